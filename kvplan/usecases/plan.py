"""`kvplan plan`: from a model config and the serving knobs to vLLM 0.17.1's KV-cache
configuration, without a GPU and without torch (for catalog models).

The order follows vLLM's start-up: resolve dtype and lengths (`ModelConfig`), batch defaults and
their validation (`EngineArgs`, `SchedulerConfig`), cache layout (model hooks, platform block
size), per-worker specs, then `get_kv_cache_configs` on `kv_cache_memory_bytes` per GPU."""

from __future__ import annotations

import os
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kvplan import VLLM_SEMANTICS, __version__
from kvplan.errors import KvplanError
from kvplan.gpus.catalog import GpuSpec, get_gpu
from kvplan.semantics.config import rules
from kvplan.semantics.kv.layer_specs import CacheKnobs, CacheLayout, build_worker_specs, resolve_cache_layout
from kvplan.semantics.kv.sizing import SizingResult, kv_bytes_per_token, size_kv_cache
from kvplan.semantics.kv.specs import (
    AttentionSpec,
    GroupSpec,
    KVCacheConfig,
    KVCacheSpec,
    MambaSpec,
    MLAAttentionSpec,
    SizingLimits,
    UniformTypeKVCacheSpecs,
)
from kvplan.semantics.models.reader import shape_from_config
from kvplan.semantics.models.resolve import ResolvedConfig, resolve_config
from kvplan.semantics.models.shape import ModelShape
from kvplan.semantics.models.weights import WeightEstimate

PLAN_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class PlanRequest:
    """The user's knobs, as `vllm serve` takes them. None means "left unset": vLLM's default."""

    model: str
    kv_cache_memory_bytes: int | None = None
    gpu: str | None = None
    gpu_memory_bytes: int | None = None
    gpu_memory_utilization: float = 0.9
    block_size: int | None = None
    max_model_len: int | None = None           # -1: auto-fit
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    kv_cache_dtype: str = "auto"
    dtype: str = "auto"
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    num_gpu_blocks_override: int | None = None
    trust_remote_code: bool = False
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool = True
    with_weights: bool = True


@dataclass(frozen=True)
class Device:
    """What sizing knows of the GPU: a catalog entry, a bare memory total, or nothing."""

    gpu: GpuSpec | None
    total_bytes: int | None

    @property
    def capability(self) -> tuple[int, int] | None:
        return self.gpu.compute_capability if self.gpu else None

    @property
    def name(self) -> str:
        return self.gpu.name if self.gpu else ""


@dataclass(frozen=True)
class Setup:
    """Everything settled before memory enters: what `VllmConfig` holds after `__post_init__`."""

    resolved: ResolvedConfig
    shape: ModelShape
    device: Device
    model_dtype: str
    max_model_len: int                 # the model's (or the user's) length; auto-fit may reduce it
    auto_fit: bool
    batch: rules.BatchLimits
    knobs: CacheKnobs
    layout: CacheLayout
    worker_specs: tuple[dict[str, KVCacheSpec], ...]
    logs: tuple[str, ...]


@dataclass(frozen=True)
class PlanResult:
    request: PlanRequest
    setup: Setup
    kv_cache_memory_bytes: int
    sizing: SizingResult
    weights: WeightEstimate | None
    warnings: tuple[str, ...] = field(default_factory=tuple)
    memory_source: str = "--kv-cache-memory"

    @property
    def fits(self) -> bool:
        return self.sizing.fits

    @property
    def num_blocks(self) -> int | None:
        return self.sizing.num_blocks

    @property
    def kv_config(self) -> KVCacheConfig | None:
        return self.sizing.config

    @property
    def worker_specs(self) -> tuple[dict[str, KVCacheSpec], ...]:
        return self.setup.worker_specs

    @property
    def max_model_len(self) -> int:
        return self.sizing.max_model_len

    @property
    def kv_bytes_per_token(self) -> int | float:
        return setup_kv_bytes_per_token(self.setup)

    @property
    def suggested_fix(self) -> str | None:
        return suggested_fix(self)

    def to_record(self) -> dict[str, Any]:
        return plan_record(self)


def setup_kv_bytes_per_token(setup: Setup) -> int | float:
    """The largest per-GPU figure over pipeline stages; an int where it is whole."""
    value = max((kv_bytes_per_token(specs) for specs in setup.worker_specs), default=0.0)
    return int(value) if float(value).is_integer() else value


def _device(request: PlanRequest) -> Device:
    gpu = get_gpu(request.gpu) if request.gpu else None
    if request.gpu_memory_bytes is not None:
        if request.gpu_memory_bytes <= 0:
            raise KvplanError("--gpu-memory must be positive, e.g. 80GiB")
        return Device(gpu, request.gpu_memory_bytes)
    return Device(gpu, gpu.total_bytes if gpu else None)


def _check_request(request: PlanRequest) -> None:
    if not 0 < request.gpu_memory_utilization <= 1:
        raise KvplanError(
            f"--gpu-memory-utilization must be in (0, 1], got {request.gpu_memory_utilization}"
        )
    for flag, value in (
        ("--tensor-parallel-size", request.tensor_parallel_size),
        ("--pipeline-parallel-size", request.pipeline_parallel_size),
        ("--max-num-batched-tokens", request.max_num_batched_tokens),
        ("--max-num-seqs", request.max_num_seqs),
    ):
        if value is not None and value < 1:
            raise KvplanError(f"{flag} must be at least 1, got {value}")
    if request.num_gpu_blocks_override is not None and request.num_gpu_blocks_override < 1:
        raise KvplanError(f"--num-gpu-blocks-override must be at least 1, got {request.num_gpu_blocks_override}")


def settle(request: PlanRequest) -> Setup:
    """Every decision vLLM makes before it measures memory, with its refusals (exit 2)."""
    _check_request(request)
    resolved = resolve_config(request.model)
    config_dir = str(Path(resolved.path).parent) if resolved.source != "hub" else None
    shape = shape_from_config(
        resolved.config, resolved.model_id, trust_remote_code=request.trust_remote_code, config_dir=config_dir
    )
    device = _device(request)
    logs: list[str] = []
    dtype = rules.resolve_model_dtype(
        request.dtype, shape.config_dtype, shape.model_type, device.capability,
        gpu_name=device.name or "cuda",
    )
    logs.extend(dtype.logs)
    # vLLM multiplies the derived length by the RoPE factor (1.0 by default) whenever the config has RoPE
    # parameters, which makes it a float in its error text; gemma3 is exempt from the scaling
    derived: float = shape.max_model_len if "gemma3" in shape.model_type else float(shape.max_model_len)
    allow_long = os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "").strip().lower() in ("1", "true")
    max_model_len = rules.verify_max_model_len(
        request.max_model_len, derived, "max_position_embeddings", allow_long=allow_long
    )
    if max_model_len > derived:
        logs.append(rules.long_max_model_len_warning(max_model_len, derived, "max_position_embeddings"))
    rules.verify_tensor_parallel(shape, request.tensor_parallel_size)
    batch = rules.resolve_batch_limits(
        max_model_len, request.max_num_batched_tokens, request.max_num_seqs,
        gpu_total_bytes=device.total_bytes, gpu_name=device.name,
        enable_chunked_prefill=request.enable_chunked_prefill,
    )
    logs.extend(rules.verify_batch_limits(
        batch.max_num_batched_tokens, batch.max_num_seqs, max_model_len, request.enable_chunked_prefill
    ))
    knobs = CacheKnobs(
        max_model_len=max_model_len,
        model_dtype=dtype.dtype,
        block_size=request.block_size,
        cache_dtype=request.kv_cache_dtype,
        tensor_parallel_size=request.tensor_parallel_size,
        pipeline_parallel_size=request.pipeline_parallel_size,
        pp_layer_partition=os.environ.get("VLLM_PP_LAYER_PARTITION"),
        enable_prefix_caching=request.enable_prefix_caching,
        enable_chunked_prefill=request.enable_chunked_prefill,
        gpu_capability=device.capability,
    )
    layout = resolve_cache_layout(shape, knobs)
    logs.extend(layout.logs)
    worker_specs = tuple(build_worker_specs(shape, knobs))
    return Setup(
        resolved=resolved, shape=shape, device=device, model_dtype=dtype.dtype, max_model_len=max_model_len,
        auto_fit=request.max_model_len == -1, batch=batch, knobs=knobs, layout=layout,
        worker_specs=worker_specs, logs=tuple(logs),
    )


def plan(request: PlanRequest, setup: Setup | None = None) -> PlanResult:
    """Size the KV cache for `request.kv_cache_memory_bytes` per GPU, exactly as vLLM would."""
    if request.kv_cache_memory_bytes is None:
        raise KvplanError(
            "give --kv-cache-memory BYTES (KV-cache memory per GPU, e.g. 24GiB), or --gpu KEY / --gpu-memory "
            "to predict it with the profile run"
        )
    setup = setup or settle(request)
    limits = SizingLimits(
        max_model_len=setup.max_model_len, max_num_batched_tokens=setup.batch.max_num_batched_tokens
    )
    sizing = size_kv_cache(
        list(setup.worker_specs),
        [request.kv_cache_memory_bytes] * len(setup.worker_specs),
        limits,
        num_gpu_blocks_override=request.num_gpu_blocks_override,
        auto_fit=setup.auto_fit,
    )
    weights = None
    if request.with_weights:
        from kvplan.semantics.models.weights import weights_for

        weights = weights_for(
            setup.resolved, setup.model_dtype, request.tensor_parallel_size, request.pipeline_parallel_size,
            trust_remote_code=request.trust_remote_code,
        )
    return PlanResult(
        request=request, setup=setup, kv_cache_memory_bytes=request.kv_cache_memory_bytes, sizing=sizing,
        weights=weights, warnings=setup.shape.warnings,
    )


def suggested_fix(result: PlanResult) -> str | None:
    """One actionable sentence for a configuration that does not fit."""
    sizing = result.sizing
    if sizing.fits:
        return None
    needed = sizing.bytes_needed_for_one_max_len_request
    if result.kv_cache_memory_bytes <= 0 or needed <= 0:
        return "the KV cache gets no memory: raise gpu_memory_utilization, use a larger GPU or more GPUs"
    parts = [f"give the KV cache at least {needed:,} bytes per GPU (--kv-cache-memory {needed})"]
    if sizing.estimated_max_model_len:
        parts.append(f"lower --max-model-len to {sizing.estimated_max_model_len}")
    return " or ".join(parts)


# --- the JSON record -------------------------------------------------------------------------


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


def flash_attn_view_shape(spec: GroupSpec, num_blocks: int) -> list[int] | None:
    """The default backend's logical shape of one layer's tensor (FlashAttention; MLA backends)."""
    if isinstance(spec, MLAAttentionSpec):
        width = 656 if spec.cache_dtype_str == "fp8_ds_mla" else spec.head_size
        return [num_blocks, spec.block_size, width]
    if isinstance(spec, AttentionSpec):
        return [2, num_blocks, spec.block_size, spec.num_kv_heads, spec.head_size]
    return None


def plan_record(result: PlanResult) -> dict[str, Any]:
    setup, sizing, request = result.setup, result.sizing, result.request
    config = sizing.config
    num_blocks = sizing.num_blocks
    gpu = setup.device.gpu
    groups = [
        {
            "layer_names": list(group.layer_names),
            "num_layers": len(group.layer_names),
            "spec": spec_record(group.kv_cache_spec),
            "tensor_shape": None if num_blocks is None else flash_attn_view_shape(group.kv_cache_spec, num_blocks),
        }
        for group in sizing.groups
    ]
    weights = result.weights
    return {
        "schema_version": PLAN_SCHEMA_VERSION,
        "kind": "kvplan.plan",
        "kvplan_version": __version__,
        "vllm_semantics": VLLM_SEMANTICS,
        "model": setup.shape.model_id,
        "model_source": setup.resolved.source,
        "config_sha256": setup.resolved.sha256,
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
        "block_size": setup.layout.block_size,
        "block_size_rule": setup.layout.block_size_rule,
        "max_model_len": sizing.max_model_len,
        "max_num_batched_tokens": setup.batch.max_num_batched_tokens,
        "max_num_seqs": setup.batch.max_num_seqs,
        "enable_prefix_caching": setup.layout.enable_prefix_caching,
        "enable_chunked_prefill": request.enable_chunked_prefill,
        "mamba_cache_mode": setup.layout.mamba_cache_mode if setup.shape.is_hybrid else None,
        "tensor_parallel_size": request.tensor_parallel_size,
        "pipeline_parallel_size": request.pipeline_parallel_size,
        "kv_cache_memory_bytes": result.kv_cache_memory_bytes,
        "kv_cache_memory_source": result.memory_source,
        "fits": sizing.fits,
        "error": sizing.finding,
        "suggested_fix": result.suggested_fix,
        "estimated_max_model_len": sizing.estimated_max_model_len,
        "bytes_needed_for_one_max_len_request": sizing.bytes_needed_for_one_max_len_request,
        "num_blocks": num_blocks,
        "num_usable_blocks": None if num_blocks is None else max(num_blocks - 1, 0),
        "page_size_bytes": sizing.page_size_bytes,
        "kv_cache_groups": groups,
        "kv_cache_tensors": [] if config is None else [
            {"size": tensor.size, "shared_by": list(tensor.shared_by)} for tensor in config.kv_cache_tensors
        ],
        "kv_cache_tensors_total_bytes": None if config is None else sum(t.size for t in config.kv_cache_tensors),
        "needs_kv_cache_zeroing": None if config is None else config.needs_kv_cache_zeroing,
        "gpu_kv_cache_tokens": sizing.gpu_kv_cache_tokens,
        "max_concurrency": sizing.max_concurrency,
        "kv_bytes_per_token": result.kv_bytes_per_token,
        "weights_bytes": None if weights is None else weights.total_bytes,
        "weights_per_gpu_bytes": None if weights is None else weights.per_rank_bytes,
        "weights_method": None if weights is None else weights.method,
        "weights_exact": None if weights is None else weights.exact,
        "vllm_log": list(setup.logs) + list(sizing.log_lines),
        "warnings": list(result.warnings),
    }


@dataclass(frozen=True)
class CatalogEntry:
    """One bundled model at vLLM's defaults (TP 1, block 16, KV dtype auto)."""

    model_id: str
    architecture: str
    num_hidden_layers: int
    layer_kinds: dict[str, int]
    max_model_len: int
    dtype: str
    kv_bytes_per_token: int | float


def catalog_entries() -> list[CatalogEntry]:
    from collections import Counter

    from kvplan.semantics.models.catalog import catalog_ids

    entries = []
    for model_id in catalog_ids():
        setup = settle(PlanRequest(model=model_id))
        kinds = Counter(layer.kind for layer in setup.shape.layers)
        entries.append(CatalogEntry(
            model_id=model_id, architecture=setup.shape.architecture,
            num_hidden_layers=setup.shape.num_hidden_layers, layer_kinds=dict(kinds),
            max_model_len=setup.max_model_len, dtype=setup.model_dtype,
            kv_bytes_per_token=setup_kv_bytes_per_token(setup),
        ))
    return entries


PREDICTED_MEMORY = "predicted: ceil(total x utilization) - weights - activation peak (fake profile run)"


def plan_for_device(request: PlanRequest) -> PlanResult:
    """Like `plan`, but without `kv_cache_memory_bytes` the KV memory of the GPU named by `--gpu` /
    `--gpu-memory` is predicted by the profile run on the fake backend (needs torch)."""
    if request.kv_cache_memory_bytes is not None or (request.gpu is None and request.gpu_memory_bytes is None):
        return plan(request)
    from kvplan.errors import require_profile_extra

    require_profile_extra("predicting the KV memory of --gpu (no --kv-cache-memory given)")
    from kvplan.usecases.profile import ProfileOptions, run_profile

    profile = run_profile(ProfileOptions(request=request, backend="fake", allocate=False))
    if profile.plan is None:
        raise KvplanError(f"the profile run refused this configuration: {profile.finding}")
    return replace(profile.plan, memory_source=PREDICTED_MEMORY, warnings=profile.warnings)
