"""The sizing cases computed by each release's own functions (40 of vLLM 0.17.1, 38 of vLLM 0.33.0),
field by field."""

from __future__ import annotations

import json

import pytest

from kvplan.errors import ConfigRejected
from kvplan.semantics.config.model import resolve_model_dtype, verify_max_model_len
from kvplan.semantics.config.parallel import verify_tensor_parallel
from kvplan.semantics.kv.layer_specs import CacheSettings, build_worker_specs, resolve_cache_layout
from kvplan.semantics.kv.sizing import bytes_per_block, size_kv_cache, sizing_limits
from kvplan.semantics.kv.specs import (
    GroupSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)
from kvplan.semantics.releases import VLLM_0_17_1, Release
from tests.semantics.conftest import CASES_FILES, SizingCase


def describe(spec: GroupSpec) -> dict:
    """A spec in the vocabulary of the cases file."""
    out: dict = {
        "type": spec.type_name, "block_size": spec.block_size, "page_size_bytes": spec.page_size_bytes
    }
    if isinstance(spec, MambaSpec):
        out |= {
            "dtypes": list(spec.dtypes), "shapes": [list(shape) for shape in spec.shapes],
            "mamba_type": spec.mamba_type, "mamba_cache_mode": spec.mamba_cache_mode,
            "page_size_padded": spec.page_size_padded,
        }
        return out
    out |= {"dtype": spec.dtype, "head_size": spec.head_size, "num_kv_heads": spec.num_kv_heads}
    if isinstance(spec, SlidingWindowSpec):
        out["sliding_window"] = spec.sliding_window
    if isinstance(spec, MLAAttentionSpec):
        out["cache_dtype_str"] = spec.cache_dtype_str
    return out


def layer_spec_summary(specs: dict) -> list[dict]:
    """Distinct specs in order of first appearance, with their layer counts."""
    summary: list[dict] = []
    for spec in specs.values():
        entry = describe(spec)
        for seen in summary:
            if {k: v for k, v in seen.items() if k != "num_layers"} == entry:
                seen["num_layers"] += 1
                break
        else:
            summary.append(entry | {"num_layers": 1})
    return summary


def plan(shape, args: dict, derived_max_len: float, release: Release):
    model_dtype = resolve_model_dtype("auto", shape.config_dtype, shape.model_type).dtype
    max_model_len = verify_max_model_len(args["max_model_len"], derived_max_len, "max_position_embeddings")
    verify_tensor_parallel(shape, args["tensor_parallel_size"])
    knobs = CacheSettings(
        max_model_len=max_model_len, model_dtype=model_dtype, block_size=args["block_size"],
        cache_dtype=args["kv_cache_dtype"], tensor_parallel_size=args["tensor_parallel_size"], release=release,
    )
    workers = build_worker_specs(shape, knobs)
    limits = sizing_limits(max_model_len, args["max_num_batched_tokens"], release=release)
    result = size_kv_cache(workers, [args["kv_cache_memory_bytes"]] * len(workers), limits, release=release)
    return knobs, resolve_cache_layout(shape, knobs), workers, result, limits


def without_unset(described: dict, expected: dict) -> dict:
    """0.33.0's harness leaves out a spec field it has no value for (an unpadded page)."""
    return {k: v for k, v in described.items() if k in expected or v is not None}


def test_case_matches_vllm(sizing_case: SizingCase, catalog_shape) -> None:
    release, case, model = sizing_case.release, sizing_case.case, sizing_case.model
    args, expect = case["args"], case["expect"]
    shape = catalog_shape(case["model"])
    # vLLM's derived length is a float once RoPE scaling (factor 1.0 here) has been applied
    derived = model["max_position_embeddings"] * 1.0
    if not expect["ok"]:
        assert expect["stage"] == "config"
        with pytest.raises(ConfigRejected) as rejected:
            plan(shape, args, derived, release)
        vllm_text = expect["error"].split("Value error, ", 1)[1].removesuffix(" [ty")
        assert str(rejected.value) == vllm_text
        return

    knobs, layout, workers, result, limits = plan(shape, args, derived, release)
    (specs,) = workers
    config = result.config
    assert result.fits and config is not None
    assert knobs.model_dtype == expect["model_dtype"] == model["vllm_model_dtype"]
    assert layout.kv_dtype == expect["kv_dtype"]
    assert layout.cache_dtype == expect["resolved_cache_dtype"]
    assert layout.block_size == expect["effective_block_size"]
    assert result.max_model_len == expect["max_model_len"]
    assert [without_unset(spec, want) for spec, want in zip(layer_spec_summary(specs), expect["layer_specs"],
                                                            strict=True)] == expect["layer_specs"]
    assert len(specs) == expect["num_kv_cache_layers"]
    groups = [describe(g.kv_cache_spec) | {"num_layers": len(g.layer_names)} for g in result.groups]
    assert [without_unset(group, want) for group, want in zip(groups, expect["groups"], strict=True)] \
        == expect["groups"]
    assert len(result.groups) == expect["num_groups"]
    assert result.bytes_needed_for_one_max_len_request == expect["bytes_needed_for_one_max_len_request"]
    assert config.num_blocks == expect["num_blocks"]
    assert sorted({g.kv_cache_spec.page_size_bytes for g in result.groups}) == expect["page_size_bytes"]
    assert [t.size for t in config.kv_cache_tensors] == expect["kv_cache_tensors"]
    assert [len(t.shared_by) for t in config.kv_cache_tensors] == expect["kv_cache_tensor_shared_by"]
    assert config.pool_bytes == expect["kv_cache_tensors_total_bytes"]
    assert result.max_concurrency == expect["max_concurrency"]
    assert result.gpu_kv_cache_tokens == expect["gpu_kv_cache_tokens"]
    # 0.33.0's harness captures the lines of `get_kv_cache_configs` and the capacity line, not those
    # of the grouping before it (the padding warning)
    logs = list(result.log_lines)
    if release is not VLLM_0_17_1:
        logs = [line for line in logs if not line.startswith("Add ")]
    assert logs == expect["vllm_log"]
    assert config.needs_kv_cache_zeroing == expect["needs_kv_cache_zeroing"]
    assert expect["disable_hybrid_kv_cache_manager"] is False
    if shape.is_hybrid:
        assert layout.mamba_cache_mode == expect["mamba_cache_mode"]
        assert layout.mamba_block_size == expect["mamba_block_size"]
        assert layout.mamba_page_size_padded == expect["mamba_page_size_padded"]
        assert layout.enable_prefix_caching == expect["enable_prefix_caching"]
    if "kv_cache_tensor_layout" in expect:  # 0.33.0: the regions of the one backing allocation
        assert [{"layers": len(t.shared_by), "layer_stride": t.layer_stride, "block_stride": t.block_stride,
                 "offset": t.offset} for t in config.kv_cache_tensors] == expect["kv_cache_tensor_layout"]
        assert bytes_per_block(result.groups) == expect["pool_bytes_per_block"]
        assert limits.in_flight_tokens == expect["max_in_flight_tokens"]
        assert result.gpu_kv_cache_tokens == expect["kv_cache_size_tokens"]


@pytest.mark.parametrize("version", sorted(CASES_FILES))
def test_excluded_tensor_parallel_sizes_are_rejected_with_vllm_text(version: str, catalog_shape) -> None:
    models = json.loads(CASES_FILES[version].read_text())["models"]
    excluded = [(model_id, entry) for model_id, model in models.items() for entry in model.get("excluded", [])]
    assert excluded
    for model_id, entry in excluded:
        with pytest.raises(ConfigRejected) as rejected:
            verify_tensor_parallel(catalog_shape(model_id), entry["tensor_parallel_size"])
        assert f"Value error, {rejected.value} [type=value_error" in entry["why"]


@pytest.mark.parametrize("version", sorted(CASES_FILES))
def test_every_catalog_dtype_resolves_as_vllm_did(version: str) -> None:
    for model in json.loads(CASES_FILES[version].read_text())["models"].values():
        model_type = {"GptOssForCausalLM": "gpt_oss"}.get(model["architecture"], "")
        choice = resolve_model_dtype("auto", model["config_torch_dtype"], model_type)
        assert choice.dtype == model["vllm_model_dtype"]
