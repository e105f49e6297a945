"""The plan record: the document `kvplan plan --json` prints and every profile embeds (schema in
docs/schemas/plan.json). The keys that `PlanSummary` names are written from it, so the reader of a
saved profile (`kvplan.usecases.profile_summary`) and this writer share one description."""

from __future__ import annotations

from typing import Any

from kvplan import __version__
from kvplan.report.sizing_path import path_record, states_path
from kvplan.semantics.config.parallel import get_pp_indices
from kvplan.semantics.kv.layout import view_shape
from kvplan.semantics.kv.specs import (
    AttentionSpec,
    GroupSpec,
    KVCacheGroupSpec,
    KVCacheTensor,
    MambaSpec,
    UniformTypeKVCacheSpecs,
)
from kvplan.semantics.releases import KvTensorLayout
from kvplan.usecases.accuracy import kv_memory_margin
from kvplan.usecases.plan import PlanResult

PLAN_SCHEMA_VERSION = 1
PLAN_KIND = "kvplan.plan"


def spec_record(spec: GroupSpec) -> dict[str, Any]:
    record: dict[str, Any] = {
        "type": spec.type_name, "block_size": spec.block_size, "page_size_bytes": spec.page_size_bytes,
    }
    if isinstance(spec, AttentionSpec):
        record |= {"num_kv_heads": spec.num_kv_heads, "head_size": spec.head_size, "dtype": spec.dtype}
        for name in ("head_size_v", "sliding_window", "attention_chunk_size", "cache_dtype_str"):
            value = getattr(spec, name, None)
            if value is not None:
                record[name] = value
    elif isinstance(spec, MambaSpec):
        record |= {
            "mamba_type": spec.mamba_type, "shapes": [list(shape) for shape in spec.shapes],
            "dtypes": list(spec.dtypes), "mamba_cache_mode": spec.mamba_cache_mode,
            "real_page_size_bytes": spec.real_page_size_bytes,
        }
    elif isinstance(spec, UniformTypeKVCacheSpecs):
        record["layers"] = {name: spec_record(member) for name, member in spec.kv_cache_specs.items()}
    return record


def _tensor_shape(spec: GroupSpec, num_blocks: int | None, tensor_layout: KvTensorLayout) -> list[int] | None:
    shape = None if num_blocks is None else view_shape(spec, num_blocks, tensor_layout=tensor_layout)
    return None if shape is None else list(shape)


def _tensor_record(tensor: KVCacheTensor) -> dict[str, Any]:
    record: dict[str, Any] = {"size": tensor.size, "shared_by": list(tensor.shared_by)}
    if tensor.layer_stride is not None:
        record |= {"layer_stride": tensor.layer_stride, "block_stride": tensor.block_stride, "offset": tensor.offset}
    return record


def _group_records(groups: tuple[KVCacheGroupSpec, ...], num_blocks: int | None,
                   tensor_layout: KvTensorLayout) -> list[dict[str, Any]]:
    return [
        {
            "layer_names": list(group.layer_names),
            "num_layers": len(group.layer_names),
            "spec": spec_record(group.kv_cache_spec),
            "tensor_shape": _tensor_shape(group.kv_cache_spec, num_blocks, tensor_layout),
        }
        for group in groups
    ]


def pipeline_stages(result: PlanResult) -> list[dict[str, Any]]:
    """One entry per pipeline stage (the TP ranks of a stage hold the same KV cache config): its
    decoder layers `[start, end)`, the KV cache config of its workers as vLLM's worker holds it, and
    what one of its GPUs holds: its weights and the KV memory left to it."""
    setup, sizing = result.setup, result.sizing
    stages = []
    for pp_rank, groups in enumerate(sizing.worker_groups):
        start, end = get_pp_indices(setup.shape.num_hidden_layers, pp_rank, setup.cache.pipeline_parallel_size,
                                    setup.cache.pp_layer_partition)
        config = sizing.worker_configs[pp_rank] if sizing.worker_configs else None
        stages.append({
            "pp_rank": pp_rank,
            "layers": [start, end],
            "num_kv_cache_layers": len(setup.worker_specs[pp_rank]),
            "kv_cache_groups": [{"num_layers": len(group.layer_names), "layer_names": list(group.layer_names)}
                                for group in groups],
            "num_blocks": None if config is None else config.num_blocks,
            "kv_cache_tensors_total_bytes": None if config is None else config.pool_bytes,
            "bytes_needed_for_one_max_len_request": sizing.bytes_needed_per_worker[pp_rank]
            if sizing.bytes_needed_per_worker else None,
            "kv_cache_memory_bytes": result.kv_cache_memory_per_worker[pp_rank]
            if result.kv_cache_memory_per_worker else result.kv_cache_memory_bytes,
            "weights_bytes": result.weights.per_stage_bytes[pp_rank]
            if result.weights is not None and result.weights.per_stage_bytes else None,
        })
    return stages


def plan_record(result: PlanResult) -> dict[str, Any]:
    setup, sizing, request, summary = result.setup, result.sizing, result.request, result.summary
    config = sizing.config
    gpu = setup.device.gpu
    # rank 0's groups, as vLLM logs and schedules them; every stage's are under pipeline_stages
    groups = _group_records(sizing.rank0_groups, summary.num_blocks, request.release.kv_tensor_layout)
    weights = result.weights
    record = {
        "schema_version": PLAN_SCHEMA_VERSION,
        "kind": PLAN_KIND,
        "kvplan_version": __version__,
        "vllm_semantics": request.release.version,
        "model": summary.model,
        "model_source": setup.resolved.source,
        "config_sha256": summary.config_sha256,
        "architecture": setup.shape.architecture,
        "num_hidden_layers": setup.shape.num_hidden_layers,
        "gpu": None if gpu is None else {
            "key": gpu.key, "name": gpu.name, "total_bytes": gpu.total_bytes,
            "total_is_approximate": gpu.total_is_approximate, "bandwidth_gbps": gpu.bandwidth_gbps,
            "bf16_tflops": gpu.bf16_tflops, "fp8_tflops": gpu.fp8_tflops,
            "compute_capability": None if gpu.compute_capability is None else list(gpu.compute_capability),
        },
        "gpu_memory_bytes": setup.device.total_bytes,
        "dtype": setup.model_dtype,
        "kv_cache_dtype": setup.layout.cache_dtype,
        "kv_dtype": setup.layout.kv_dtype,
        "block_size": summary.block_size,
        "block_size_rule": setup.layout.block_size_rule,
        "max_model_len": summary.max_model_len,
        "max_num_batched_tokens": summary.max_num_batched_tokens,
        "max_num_seqs": summary.max_num_seqs,
        "enable_prefix_caching": summary.enable_prefix_caching,
        "enable_chunked_prefill": summary.enable_chunked_prefill,
        "mamba_cache_mode": setup.layout.mamba_cache_mode if setup.shape.is_hybrid else None,
        "disable_hybrid_kv_cache_manager": setup.disable_hybrid_kv_cache_manager,
        "quantization": setup.quantization,
        "tensor_parallel_size": request.value("tensor_parallel_size"),
        "pipeline_parallel_size": request.value("pipeline_parallel_size"),
        "kv_cache_memory_bytes": summary.kv_cache_memory_bytes,
        "kv_cache_memory_source": result.memory_source,
        "fits": summary.fits,
        "error": summary.error,
        "suggested_fix": result.suggested_fix,
        "estimated_max_model_len": summary.estimated_max_model_len,
        "bytes_needed_for_one_max_len_request": summary.bytes_needed_for_one_max_len_request,
        "num_blocks": summary.num_blocks,
        "num_usable_blocks": summary.num_usable_blocks,
        "page_size_bytes": sizing.page_size_bytes,
        "kv_cache_groups": groups,
        "kv_cache_groups_rank": 0,
        "pipeline_stages": pipeline_stages(result),
        "kv_cache_tensors": [] if config is None else [
            _tensor_record(tensor) for tensor in config.kv_cache_tensors
        ],
        "kv_cache_tensors_total_bytes": None if config is None else config.pool_bytes,
        "kv_cache_tensor_layout": None if config is None else config.tensor_layout,
        "needs_kv_cache_zeroing": None if config is None else config.needs_kv_cache_zeroing,
        "gpu_kv_cache_tokens": summary.gpu_kv_cache_tokens,
        "max_concurrency": summary.max_concurrency,
        "concurrency_at_lengths": [{"tokens": tokens, "max_concurrency": concurrency}
                                   for tokens, concurrency in result.concurrency_at_lengths],
        "kv_cache_memory_margin": _margin(result),
        "non_torch_memory": _non_torch(result),
        "kv_bytes_per_token": summary.kv_bytes_per_token,
        "weights_bytes": summary.weights_bytes,
        "weights_per_gpu_bytes": summary.weights_per_gpu_bytes,
        "weights_method": None if weights is None else weights.method,
        "weights_exact": None if weights is None else weights.exact,
        "vllm_log": list(setup.logs) + list(sizing.log_lines),
        "warnings": [*result.warnings, *([result.weights_warning] if result.weights_warning else [])],
    }
    if states_path(request.release):
        # 0.34.0: which path sized the cache and why, with the measured terms where they decided
        record["kv_sizing"] = path_record(result.sizing_path, result.measured)
    return record


def _non_torch(result: PlanResult) -> dict[str, Any] | None:
    """A predicted KV memory's non-torch term per GPU and its source (usecases/non_torch.py)."""
    if result.non_torch_bytes is None:
        return None
    return {"bytes": result.non_torch_bytes, "source": result.non_torch_source or "assumed 0"}


def _margin(result: PlanResult) -> dict[str, Any] | None:
    """A predicted KV memory's measured distance from real vLLM start-ups (usecases/accuracy.py)."""
    if not result.memory_source.startswith("predicted"):
        return None
    margin = kv_memory_margin()
    return {"median_abs_difference_bytes": margin.median_bytes, "max_abs_difference_bytes": margin.max_bytes,
            "num_logs": margin.num_logs, "source": "kvplan/data/accuracy/kv_memory_vs_logs.json"}
