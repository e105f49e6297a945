"""vLLM's --mamba-ssm-cache-dtype: the dtype of a Mamba layer's ssm state. Given, it replaces what the
model's hook chooses (Nemotron-H: the release's float16 or float32) and so the Mamba page, the hybrid
block size and the block count (docs/vllm/kv-semantics.md, State dtypes)."""

from __future__ import annotations

import json

import pytest

from kvplan.semantics.kv.specs import AttentionSpec, MambaSpec
from kvplan.semantics.releases import RELEASES, VLLM_0_34_0
from kvplan.usecases.plan import PlanRequest, plan

NEMOTRON = "nvidia/Nemotron-H-56B-Base-8K"
# Nemotron-H-56B at TP 1: conv state (3, 20480) in bf16, ssm state (256, 64, 256) in the ssm dtype
CONV_BYTES = 3 * 20480 * 2
SSM_ELEMENTS = 256 * 64 * 256


def mamba_group(record: dict) -> dict:
    return next(group["spec"] for group in record["kv_cache_groups"] if group["spec"]["type"] == "MambaSpec")


@pytest.mark.parametrize("version", sorted(RELEASES))
@pytest.mark.parametrize(("dtype", "size"), [("float16", 2), ("float32", 4)])
def test_the_flag_sets_the_ssm_state_dtype_over_the_models_hook(version, dtype, size):
    result = plan(PlanRequest.of(model=NEMOTRON, kv_cache_memory_bytes=20 << 30, with_weights=False,
                                 release=RELEASES[version], mamba_ssm_cache_dtype=dtype))
    specs = result.setup.worker_specs[0].values()
    spec = next(spec for spec in specs if isinstance(spec, MambaSpec))
    attention = next(spec for spec in specs if isinstance(spec, AttentionSpec))
    assert spec.dtypes == ("bfloat16", dtype)
    assert spec.real_page_size_bytes == CONV_BYTES + SSM_ELEMENTS * size    # 8,511,488 or 16,900,096
    # the hybrid alignment grows the attention block until its page holds the Mamba page, then pads the
    # Mamba page to it: the block size follows the ssm dtype
    assert attention.page_size_bytes == spec.page_size_bytes >= spec.real_page_size_bytes


def test_a_float32_state_doubles_the_block_of_a_float16_one():
    def pool(dtype: str) -> tuple[int, int | None]:
        result = plan(PlanRequest.of(model=NEMOTRON, kv_cache_memory_bytes=20 << 30, with_weights=False,
                                     release=VLLM_0_34_0, mamba_ssm_cache_dtype=dtype))
        return result.setup.layout.block_size, result.num_blocks

    # 0.34.0's hook chooses float32: auto is float32
    assert (pool("float16"), pool("float32"), pool("auto")) == ((2112, 248), (4160, 126), (4160, 126))


def test_plan_and_profile_take_the_flag(kvplan):
    base = ("plan", NEMOTRON, "--kv-cache-memory", "20GiB", "--vllm-version", "0.34.0", "--json")
    code, out, err = kvplan(*base, "--mamba-ssm-cache-dtype", "float16")
    assert code == 0, err
    record = json.loads(out)
    assert mamba_group(record)["dtypes"] == ["bfloat16", "float16"] and record["num_blocks"] == 248
    code, out, err = kvplan(*base)
    assert code == 0, err
    assert mamba_group(json.loads(out))["dtypes"] == ["bfloat16", "float32"]
    code, out, err = kvplan(*base, "--mamba-ssm-cache-dtype", "int8")
    assert code == 2 and out == "" and err.startswith("kvplan: error: --mamba-ssm-cache-dtype: ")


def test_a_saved_profile_records_the_flag_where_it_was_given():
    given = PlanRequest.of(model=NEMOTRON, mamba_ssm_cache_dtype="float16").recorded()
    assert given["mamba_ssm_cache_dtype"] == "float16"
    assert "mamba_ssm_cache_dtype" not in PlanRequest.of(model=NEMOTRON).recorded()   # earlier digests hold
