"""vLLM's --mamba-ssm-cache-dtype: the dtype of a Mamba layer's ssm state. Given, it replaces what the
model's hook chooses (Nemotron-H: the release's float16 or float32) and so the Mamba page, the hybrid
block size and the block count (docs/vllm/kv-semantics.md, State dtypes)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.cli.options import PLANNING, SCHEDULING, SIMULATING
from kvplan.errors import KvplanError
from kvplan.semantics.engine.args import FETCHES, PLANS, PRICES, RUNS, SCHEDULES, SIZES, EngineArgs, named
from kvplan.semantics.kv.specs import AttentionSpec, MambaSpec
from kvplan.semantics.releases import RELEASES, VLLM_0_34_0
from kvplan.usecases.check.target import load_target
from kvplan.usecases.plan import PlanRequest, plan
from kvplan.usecases.simulate.driver import SimOptions, prepare
from kvplan.usecases.simulate.engine_source import EngineOverrides
from kvplan.usecases.simulate.workload import load_workload
from tests.usecases.check.factories import spec_writer
from tests.usecases.simulate.factories import mix, write_workload

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


# --- every command that plans a pool from a model takes it (the engine arguments' roles, issue 19) ---

# 0.34.0 with 20 GiB of KV cache: (block size, blocks) of a float16 ssm state, and of the hook's float32
FLOAT16_POOL, HOOK_POOL = (2112, 248), (4160, 126)


def nemotron_workload(tmp_path, **engine) -> Path:
    return write_workload(tmp_path, mix(engine={"model": NEMOTRON, "kv_cache_memory": "20GiB",
                                                "vllm_version": "0.34.0", **engine},
                                        arrival={"process": "all_at_once", "count": 4}))


def simulated_pool(path: Path, **args) -> tuple[int, int]:
    engine = prepare(load_workload(path), SimOptions(overrides=EngineOverrides(args=EngineArgs(**args)))).engine
    return engine.config.block_size, engine.config.num_gpu_blocks


def test_simulate_plans_engine_model_with_the_flag_and_the_workload_key(tmp_path):
    assert simulated_pool(nemotron_workload(tmp_path)) == HOOK_POOL
    assert simulated_pool(nemotron_workload(tmp_path), mamba_ssm_cache_dtype="float16") == FLOAT16_POOL
    assert simulated_pool(nemotron_workload(tmp_path, mamba_ssm_cache_dtype="float16")) == FLOAT16_POOL
    # the command line over the workload, as for every engine argument
    assert simulated_pool(nemotron_workload(tmp_path, mamba_ssm_cache_dtype="float16"),
                          mamba_ssm_cache_dtype="float32") == HOOK_POOL


def test_a_workload_takes_the_key_only_to_plan_engine_model(tmp_path):
    path = write_workload(tmp_path, mix(engine={"num_gpu_blocks": 64, "mamba_ssm_cache_dtype": "float16"}))
    with pytest.raises(KvplanError, match=r"engine\.mamba_ssm_cache_dtype: only applies when the engine is "
                                          r"planned from engine\.model"):
        load_workload(path)
    with pytest.raises(KvplanError, match=r"engine\.mamba_ssm_cache_dtype"):
        load_workload(nemotron_workload(tmp_path, mamba_ssm_cache_dtype="int8"))


def test_simulate_takes_the_flag(kvplan, tmp_path):
    base = ("simulate", str(nemotron_workload(tmp_path)), "--step-time-ms", "10", "--json")
    code, out, err = kvplan(*base, "--mamba-ssm-cache-dtype", "float16")
    assert code == 0, err
    engine = json.loads(out)["engine"]
    assert (engine["block_size"], engine["num_gpu_blocks"]) == FLOAT16_POOL
    code, out, err = kvplan(*base, "--mamba-ssm-cache-dtype", "int8")
    assert code == 2 and out == "" and err.startswith("kvplan: error: --mamba-ssm-cache-dtype: ")


@pytest.mark.parametrize(("line", "pool"), [("", HOOK_POOL), ('mamba_ssm_cache_dtype = "float16"', FLOAT16_POOL)])
def test_a_check_target_plans_with_the_key(tmp_path, line, pool):
    spec = spec_writer(tmp_path)(f'vllm_version = "0.34.0"\n[target]\nmodel = "{NEMOTRON}"\n'
                                 f'kv_cache_memory = "20GiB"\n{line}\n[[assert]]\nfits = true')
    assert spec.target is not None
    target = load_target(spec.target, "spec.toml", VLLM_0_34_0)
    assert (target.plan.block_size, target.plan.num_blocks) == pool


def test_a_check_target_reads_the_key_as_the_flag_does(tmp_path):
    with pytest.raises(KvplanError, match=r"spec\.toml: target\.mamba_ssm_cache_dtype: "):
        spec_writer(tmp_path)(f'[target]\nmodel = "{NEMOTRON}"\nmamba_ssm_cache_dtype = "int8"\n'
                              '[[assert]]\nfits = true')


def test_fit_plans_every_configuration_with_the_flag(kvplan):
    base = ("fit", "--model", NEMOTRON, "--gpus", "h200-141gb", "--kv-cache-memory", "20GiB",
            "--concurrency", "1@1024", "--vllm-version", "0.34.0", "--json")
    blocks = {}
    for dtype in ("float16", "float32"):
        code, out, err = kvplan(*base, "--mamba-ssm-cache-dtype", dtype)
        assert code == 0, err
        blocks[dtype] = [c["num_gpu_blocks"] for c in json.loads(out)["configurations"]]
    assert blocks == {"float16": [FLOAT16_POOL[1]], "float32": [HOOK_POOL[1]]}


def test_bench_serve_runs_on_the_pool_the_flag_plans(kvplan):
    base = ("bench", "serve", "--model", NEMOTRON, "--gpu", "h200-141gb", "--kv-cache-memory", "20GiB",
            "--vllm-version", "0.34.0", "--num-prompts", "4", "--random-input-len", "256", "--random-output-len", "16",
            "--json")
    blocks = {}
    for dtype in ("float16", "float32"):
        code, out, err = kvplan(*base, "--mamba-ssm-cache-dtype", dtype)
        assert code == 0, err
        blocks[dtype] = json.loads(out)["kvplan"]["num_gpu_blocks"]
    assert blocks == {"float16": FLOAT16_POOL[1], "float32": HOOK_POOL[1]}


def test_the_commands_take_the_settings_of_their_roles():
    assert "mamba_ssm_cache_dtype" in PLANNING and "mamba_ssm_cache_dtype" in SIMULATING
    assert "mamba_ssm_cache_dtype" not in SCHEDULING        # replay's pool is the trace's
    assert set(named(SCHEDULES, RUNS)) <= set(SCHEDULING) <= set(SIMULATING)
    assert set(named(PLANS)) <= set(PLANNING) and set(named(SIZES, FETCHES, PRICES)) <= set(SIMULATING)
