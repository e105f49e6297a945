"""`kvplan plan`: from a model config and the serving settings to the KV-cache configuration vLLM
computes (the request's release), without a GPU and without torch (for catalog models).

The order follows vLLM's start-up: resolve dtype and lengths (`ModelConfig`), batch defaults and
their validation (`EngineArgs`, `SchedulerConfig`), cache layout (model hooks, platform block
size), per-worker specs, then `get_kv_cache_configs` on `kv_cache_memory_bytes` per GPU."""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field, fields, replace
from typing import Any

from kvplan.errors import KvplanError
from kvplan.gpus.catalog import GpuSpec, get_gpu
from kvplan.measure.hf_config import config_directory, model_shape
from kvplan.semantics.config.cache import resolve_disable_hybrid_kv_cache_manager, utilization_problem
from kvplan.semantics.config.model import long_max_model_len_warning, resolve_model_dtype, verify_max_model_len
from kvplan.semantics.config.parallel import verify_tensor_parallel
from kvplan.semantics.config.quantization import (
    check_quantization_capability,
    quantization_method,
    requested_quantization,
)
from kvplan.semantics.config.scheduler import BatchLimits, batch_defaults, resolve_batch_limits, verify_batch_limits
from kvplan.semantics.engine.args import EngineArgs, setting
from kvplan.semantics.engine.groups import KVCacheGroup, groups_from_kv_cache_config
from kvplan.semantics.kv.layer_specs import CacheLayout, CacheSettings, build_worker_specs, resolve_cache_layout
from kvplan.semantics.kv.sizing import (
    SizingResult,
    SizingTexts,
    concurrency_at_length,
    kv_bytes_per_token,
    size_kv_cache,
    sizing_limits,
)
from kvplan.semantics.kv.specs import KVCacheConfig, KVCacheSpec
from kvplan.semantics.memory.measured import MeasuredSizing, SizingPath, default_utilization, sizing_path
from kvplan.semantics.memory.weights_fit import weights_alone
from kvplan.semantics.models.config_file import ResolvedConfig
from kvplan.semantics.models.shape import ModelShape
from kvplan.semantics.releases import Release
from kvplan.semantics.weights import WeightEstimate
from kvplan.sources.installed import default_release
from kvplan.sources.models import resolve_config

# Request lengths (prompt + output tokens) a plan gives concurrency at when --prompt-len is not given:
# a chat turn, a long chat or RAG prompt, a long document (issue 24, item 6).
TYPICAL_PROMPT_LENS = (1024, 4096, 16384)


# kvplan's own settings of a plan, beside vLLM's engine arguments (`PlanRequest.of` reads both by name)
REQUEST_SETTINGS = ("gpu", "gpu_memory_bytes", "with_weights", "release", "prompt_lens")
# every setting a request takes by name (`PlanRequest.of`): vLLM's engine arguments and kvplan's own
SETTING_NAMES = frozenset((*(spec.name for spec in fields(EngineArgs)), *REQUEST_SETTINGS))
# a plan's settings as a saved profile records them (provenance.knobs, whose digest is over them), in the
# order profiles have always had; an engine argument added since is recorded after them where it is given
RECORDED = ("model", "kv_cache_memory_bytes", "gpu", "gpu_memory_bytes", "gpu_memory_utilization", "block_size",
            "max_model_len", "max_num_batched_tokens", "max_num_seqs", "kv_cache_dtype", "dtype",
            "tensor_parallel_size", "pipeline_parallel_size", "num_gpu_blocks_override", "trust_remote_code",
            "enable_prefix_caching", "enable_chunked_prefill", "disable_hybrid_kv_cache_manager", "with_weights",
            "release", "enable_extensible_kv_cache", "enforce_eager", "quantization", "prompt_lens")
# engine arguments that do not change a plan, so a record leaves them out: the revision picks the config
# (recorded as its digest, config_sha256), the engine loop is the simulation's
NOT_RECORDED = ("revision", "async_scheduling")
# engine arguments a plan leaves unset when they are not given, though the release names a default: the
# block size is chosen by the attention backends and the hybrid alignment (`resolve_cache_layout`)
DERIVED = ("block_size",)


@dataclass(frozen=True)
class PlanRequest:
    """The user's settings, as `vllm serve` takes them, for one vLLM release: vLLM's engine arguments
    (`args`, declared once in `kvplan.semantics.engine.args`; None: unset, `value` gives the release's
    default) and kvplan's own (the GPU, whether to count the weights, the lengths to give the
    concurrency at). An unset gpu_memory_utilization is resolved here, once, to the release's default
    for the request's sizing path: a request changed later (`with_args`) keeps it."""

    args: EngineArgs                           # args.model is required
    gpu: str | None = None
    gpu_memory_bytes: int | None = None
    with_weights: bool = True
    release: Release = field(default_factory=default_release)
    # --prompt-len: request lengths to give vLLM's concurrency figure at, beside max_model_len's
    prompt_lens: tuple[int, ...] = TYPICAL_PROMPT_LENS

    def __post_init__(self) -> None:
        if self.args.model is None:
            raise ValueError("a PlanRequest needs args.model")
        if self.args.gpu_memory_utilization is None:
            # 0.34.0 resolves an unset value by the sizing path: 1.0 measured, 0.92 estimated
            object.__setattr__(self, "args", replace(
                self.args, gpu_memory_utilization=default_utilization(self.release, self.sizing_path)))

    @classmethod
    def of(cls, **settings: Any) -> PlanRequest:
        """A request from its settings by name, flat as a saved profile's knobs and a spec's [target]
        give them: vLLM's engine arguments (`EngineArgs`' names) and kvplan's own (`REQUEST_SETTINGS`)."""
        own = {name: settings.pop(name) for name in REQUEST_SETTINGS if name in settings}
        return cls(args=EngineArgs(**settings), **own)

    def with_settings(self, **changes: Any) -> PlanRequest:
        """This request with settings replaced by name (engine arguments and kvplan's own alike)."""
        own = {name: changes.pop(name) for name in REQUEST_SETTINGS if name in changes}
        return replace(self, args=replace(self.args, **changes), **own)

    def with_args(self, **changes: Any) -> PlanRequest:
        """This request with these engine arguments replaced."""
        return replace(self, args=replace(self.args, **changes))

    @property
    def model(self) -> str:
        return str(self.args.model)

    def value(self, name: str) -> Any:
        """An engine argument as the plan takes it: the one given, else the release's default
        (`EngineArgs.value`); unset where vLLM derives it (`DERIVED`, the lengths, the batch limits)."""
        return getattr(self.args, name) if name in DERIVED else self.args.value(name, self.release)

    def setting(self, name: str) -> Any:
        """One setting by name: an engine argument as the plan takes it, or kvplan's own."""
        return getattr(self, name) if name in REQUEST_SETTINGS else self.value(name)

    def recorded(self) -> dict[str, Any]:
        """The settings as a saved profile records them (`RECORDED`), then any other engine argument
        given that changes a plan."""
        record = {name: self.setting(name) for name in RECORDED}
        record.update({name: value for name, value in self.args.given().items()
                       if name not in record and name not in NOT_RECORDED})
        return record

    @property
    def sizing_path(self) -> SizingPath:
        """Which path sizes the KV cache for these settings, and the flag that decides
        (`semantics/memory/measured.py`; every release before 0.34.0 sizes from the estimate)."""
        return sizing_path(self.release, kv_cache_memory_given=self.args.kv_cache_memory_bytes is not None,
                           blocks_override_given=self.args.num_gpu_blocks_override is not None,
                           extensible=self.args.enable_extensible_kv_cache)

    @property
    def utilization(self) -> float:
        """gpu_memory_utilization: the one given, else the release's default for the sizing path."""
        utilization = self.args.gpu_memory_utilization
        assert utilization is not None      # resolved in __post_init__
        return utilization


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
class SettledConfig:
    """Everything settled before memory enters: what `VllmConfig` holds after `__post_init__`."""

    resolved: ResolvedConfig
    shape: ModelShape
    device: Device
    model_dtype: str
    max_model_len: int                 # the model's (or the user's) length; auto-fit may reduce it
    auto_fit: bool
    batch: BatchLimits
    cache: CacheSettings               # the cache settings of the release, resolved
    layout: CacheLayout
    worker_specs: tuple[dict[str, KVCacheSpec], ...]
    logs: tuple[str, ...]
    disable_hybrid_kv_cache_manager: bool = False
    quantization: str | None = None    # ModelConfig.quantization: the method vLLM resolved


@dataclass(frozen=True)
class PlanResult:
    request: PlanRequest
    setup: SettledConfig
    kv_cache_memory_bytes: int
    sizing: SizingResult
    weights: WeightEstimate | None
    warnings: tuple[str, ...] = field(default_factory=tuple)
    memory_source: str = "--kv-cache-memory"
    kv_cache_memory_per_worker: tuple[int, ...] = ()    # each pipeline stage's KV memory per GPU
    weights_unknown: str | None = None    # why the weights were not counted (the KV sizing never needs them)
    # which path sized the cache and why (None: the request's own, `PlanRequest.sizing_path`); a plan the
    # profile run made on 0.34.0's measured path carries it with the measured terms
    path: SizingPath | None = None
    measured: MeasuredSizing | None = None
    # (tokens, vLLM's concurrency figure for requests of that many tokens), for the request's
    # prompt lengths up to max_model_len
    concurrency_at_lengths: tuple[tuple[int, float], ...] = ()
    # a predicted KV memory's non-torch term per GPU and where it came from (usecases/non_torch.py:
    # a real vLLM log, or assumed 0); None where the KV memory was given
    non_torch_bytes: int | None = None
    non_torch_source: str | None = None

    @property
    def sizing_path(self) -> SizingPath:
        return self.path or self.request.sizing_path

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

    @property
    def weights_warning(self) -> str | None:
        """One line for the user when the weights were not counted, naming the model: every command
        that plans says it once per model (`kvplan.report.stderr.warn_once`)."""
        if self.weights_unknown is None:
            return None
        return (f"weights unknown for {self.setup.shape.model_id} (the KV cache is sized without them): "
                f"{self.weights_unknown}")

    @property
    def summary(self) -> PlanSummary:
        return summarize(self)


@dataclass(frozen=True)
class PlanSummary:
    """What the other use cases read of a plan: the pool, the settings vLLM settled on and the
    model's bytes. The plan record carries each under its field name (`gpu` as `gpu.key`, the
    groups' block sizes as `kv_cache_groups[].spec.block_size`, the engine's groups as
    `kv_cache_groups`), so a saved profile's plan reads back into this
    (`kvplan.usecases.profile_summary`)."""

    model: str | None
    config_sha256: str | None
    gpu: str | None                            # the catalog key of the GPU the plan was made for
    fits: bool
    error: str | None
    block_size: int
    max_model_len: int
    max_num_batched_tokens: int
    max_num_seqs: int
    enable_prefix_caching: bool
    enable_chunked_prefill: bool
    kv_cache_memory_bytes: int | None
    num_blocks: int | None
    num_usable_blocks: int | None
    gpu_kv_cache_tokens: int | None
    max_concurrency: float | None
    kv_bytes_per_token: int | float | None
    weights_bytes: int | None
    weights_per_gpu_bytes: int | None
    bytes_needed_for_one_max_len_request: int | None
    estimated_max_model_len: int | None
    group_block_sizes: tuple[int, ...]
    # rank 0's KV cache groups as vLLM's scheduler runs them (empty for an attention-free model)
    kv_cache_groups: tuple[KVCacheGroup, ...] = ()


def summarize(result: PlanResult) -> PlanSummary:
    setup, sizing, weights = result.setup, result.sizing, result.weights
    num_blocks = sizing.num_blocks
    return PlanSummary(
        model=setup.shape.model_id,
        config_sha256=setup.resolved.sha256,
        gpu=setup.device.gpu.key if setup.device.gpu else None,
        fits=sizing.fits,
        error=sizing.finding,
        block_size=setup.layout.block_size,
        max_model_len=sizing.max_model_len,
        max_num_batched_tokens=setup.batch.max_num_batched_tokens,
        max_num_seqs=setup.batch.max_num_seqs,
        enable_prefix_caching=setup.layout.enable_prefix_caching,
        enable_chunked_prefill=result.request.value("enable_chunked_prefill"),
        kv_cache_memory_bytes=result.kv_cache_memory_bytes,
        num_blocks=num_blocks,
        num_usable_blocks=None if num_blocks is None else max(num_blocks - 1, 0),
        gpu_kv_cache_tokens=sizing.gpu_kv_cache_tokens,
        max_concurrency=sizing.max_concurrency,
        kv_bytes_per_token=result.kv_bytes_per_token,
        weights_bytes=None if weights is None else weights.total_bytes,
        weights_per_gpu_bytes=None if weights is None else weights.per_rank_bytes,
        bytes_needed_for_one_max_len_request=sizing.bytes_needed_for_one_max_len_request,
        estimated_max_model_len=sizing.estimated_max_model_len,
        group_block_sizes=tuple(group.kv_cache_spec.block_size for group in sizing.groups),
        kv_cache_groups=groups_from_kv_cache_config(sizing.rank0_groups, result.request.release),
    )


def setup_kv_bytes_per_token(setup: SettledConfig) -> int | float:
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


def check_request(request: PlanRequest) -> None:
    """The request's own values, as vLLM's argument checks take them (exit 2)."""
    problem = utilization_problem(request.utilization)
    if problem is not None:
        raise KvplanError(f"{setting('gpu_memory_utilization').flag}: {problem}")
    for name in ("tensor_parallel_size", "pipeline_parallel_size", "max_num_batched_tokens", "max_num_seqs",
                 "num_gpu_blocks_override"):
        value = request.value(name)
        if value is not None and value < 1:
            raise KvplanError(f"{setting(name).flag} must be at least 1, got {value}")


def settle(request: PlanRequest) -> SettledConfig:
    """Every decision vLLM makes before it measures memory, with its refusals (exit 2)."""
    check_request(request)
    resolved = resolve_config(request.model)
    shape = model_shape(
        resolved.config, resolved.model_id, trust_remote_code=request.value("trust_remote_code"),
        config_dir=config_directory(resolved), release=request.release,
    )
    online = requested_quantization(
        shape.quantization, quantization_method(shape.model_type, shape.quantization, request.release),
        request.args.quantization)
    if online is not None:
        # --quantization fp8 on an unquantized checkpoint: sized (weights and all) as its fp8 config
        resolved = replace(resolved, config={**resolved.config, "quantization_config": online})
        shape = model_shape(
            resolved.config, resolved.model_id, trust_remote_code=request.value("trust_remote_code"),
            config_dir=config_directory(resolved), release=request.release,
        )
    device = _device(request)
    logs: list[str] = []
    dtype = resolve_model_dtype(
        request.value("dtype"), shape.config_dtype, shape.model_type, device.capability,
        gpu_name=device.name or "cuda",
    )
    logs.extend(dtype.logs)
    quantization = quantization_method(shape.model_type, shape.quantization, request.release)
    check_quantization_capability(quantization, device.capability)
    # vLLM multiplies the derived length by the RoPE factor (1.0 by default) whenever the config has RoPE
    # parameters, which makes it a float in its error text; gemma3 is exempt from the scaling
    derived: float = shape.max_model_len if "gemma3" in shape.model_type else float(shape.max_model_len)
    allow_long = os.environ.get("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "").strip().lower() in ("1", "true")
    max_model_len = verify_max_model_len(
        request.args.max_model_len, derived, "max_position_embeddings", allow_long=allow_long
    )
    if max_model_len > derived:
        logs.append(long_max_model_len_warning(max_model_len, derived, "max_position_embeddings"))
    verify_tensor_parallel(shape, request.value("tensor_parallel_size"))
    batch = resolve_batch_limits(
        max_model_len, request.args.max_num_batched_tokens, request.args.max_num_seqs,
        gpu_total_bytes=device.total_bytes, gpu_name=device.name, gpu_capability=device.capability,
        enable_chunked_prefill=request.value("enable_chunked_prefill"), release=request.release,
    )
    logs.extend(verify_batch_limits(
        batch.max_num_batched_tokens, batch.max_num_seqs, max_model_len, request.value("enable_chunked_prefill")
    ))
    settings = CacheSettings(
        max_model_len=max_model_len,
        model_dtype=dtype.dtype,
        block_size=request.args.block_size,
        cache_dtype=request.value("kv_cache_dtype"),
        tensor_parallel_size=request.value("tensor_parallel_size"),
        pipeline_parallel_size=request.value("pipeline_parallel_size"),
        pp_layer_partition=os.environ.get("VLLM_PP_LAYER_PARTITION"),
        enable_prefix_caching=request.args.enable_prefix_caching,
        enable_chunked_prefill=request.value("enable_chunked_prefill"),
        mamba_ssm_cache_dtype=request.value("mamba_ssm_cache_dtype"),
        gpu_capability=device.capability,
        release=request.release,
    )
    hybrid_manager = resolve_disable_hybrid_kv_cache_manager(
        request.args.disable_hybrid_kv_cache_manager, shape.attention_chunk_size is not None,
        _env_flag("VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE", default=True),
    )
    logs.extend(hybrid_manager.logs)
    layout = resolve_cache_layout(shape, settings)
    logs.extend(layout.logs)
    worker_specs = tuple(build_worker_specs(shape, settings))
    return SettledConfig(
        resolved=resolved, shape=shape, device=device, model_dtype=dtype.dtype, max_model_len=max_model_len,
        auto_fit=request.args.max_model_len == -1, batch=batch, cache=settings, layout=layout,
        worker_specs=worker_specs, logs=tuple(logs), disable_hybrid_kv_cache_manager=hybrid_manager.disabled,
        quantization=quantization,
    )


def _env_flag(name: str, *, default: bool) -> bool:
    """A vLLM environment variable read as `bool(int(value))`."""
    value = os.environ.get(name)
    if value is None:
        return default
    try:
        return bool(int(value))
    except ValueError:
        raise KvplanError(f"{name}={value!r}: vLLM reads it as an integer, 0 or 1") from None


def predicts_kv_memory(request: PlanRequest) -> bool:
    """Whether the KV memory is to be predicted by the profile run (`usecases.profile.plan_for_device`):
    no --kv-cache-memory, and a GPU named by --gpu or --gpu-memory; otherwise `plan` sizes the cache
    for the memory given (or says to give it). The one rule `kvplan plan`, `plan_for_device` and the
    `Planner` (fit, sweep) choose by."""
    return request.args.kv_cache_memory_bytes is None and (request.gpu is not None
                                                           or request.gpu_memory_bytes is not None)


def plan(request: PlanRequest, setup: SettledConfig | None = None,
         kv_cache_memory_per_worker: tuple[int, ...] | None = None, *, texts: SizingTexts | None = None,
         report_capacity: bool = True) -> PlanResult:
    """Size the KV cache for `request.args.kv_cache_memory_bytes` per GPU, exactly as vLLM would; with
    `kv_cache_memory_per_worker` (the profile run of each pipeline stage), each stage's own. `texts`
    and `report_capacity` are `size_kv_cache`'s (0.34.0's measured path: its wording, and the
    capacity line only after warmup)."""
    if request.args.kv_cache_memory_bytes is None:
        raise KvplanError(
            "give --kv-cache-memory BYTES (KV-cache memory per GPU, e.g. 24GiB), or --gpu KEY / --gpu-memory "
            "to predict it with the profile run"
        )
    setup = setup or settle(request)
    limits = sizing_limits(setup.max_model_len, setup.batch.max_num_batched_tokens,
                           request.value("pipeline_parallel_size"), release=request.release)
    per_worker = kv_cache_memory_per_worker or (request.args.kv_cache_memory_bytes,) * len(setup.worker_specs)
    sizing = size_kv_cache(
        list(setup.worker_specs),
        list(per_worker),
        limits,
        num_gpu_blocks_override=request.args.num_gpu_blocks_override,
        auto_fit=setup.auto_fit,
        disable_hybrid_kv_cache_manager=setup.disable_hybrid_kv_cache_manager,
        release=request.release,
        texts=texts,
        report_capacity=report_capacity,
    )
    weights, weights_unknown = count_weights(request, setup) if request.with_weights else (None, None)
    config = sizing.config
    at_lengths = () if config is None else tuple(
        (tokens, concurrency_at_length(config, limits, request.release, tokens))
        for tokens in request.prompt_lens if tokens <= setup.max_model_len)
    return PlanResult(
        request=request, setup=setup, kv_cache_memory_bytes=request.args.kv_cache_memory_bytes, sizing=sizing,
        weights=weights, warnings=setup.shape.warnings, kv_cache_memory_per_worker=tuple(per_worker),
        weights_unknown=weights_unknown, concurrency_at_lengths=at_lengths,
    )


def distinct_weights_warnings(warnings: Iterable[str | None]) -> tuple[str, ...]:
    """The plans' unknown-weights warnings a command carries: each distinct one once, in order."""
    return tuple(dict.fromkeys(warning for warning in warnings if warning))


def count_weights(request: PlanRequest, setup: SettledConfig) -> tuple[WeightEstimate | None, str | None]:
    """The weight bytes, or None and why they are unknown: a model whose layout is neither in the catalog
    nor readable from config.json needs a meta-device build (torch), which may be missing or fail. The KV
    cache is sized from the memory given all the same."""
    from kvplan.measure.meta_build import weights_for

    try:
        weights = weights_for(
            setup.resolved, setup.model_dtype, request.value("tensor_parallel_size"),
            request.value("pipeline_parallel_size"),
            trust_remote_code=request.value("trust_remote_code"), pp_layer_partition=setup.cache.pp_layer_partition,
        )
    except KvplanError as error:
        return None, str(error)
    return weights, None


def weights_alone_note(result: PlanResult) -> str | None:
    """When the weights of one GPU exceed what vLLM may use of it: that, and how many GPUs would do."""
    weights, device = result.weights, result.setup.device
    if weights is None or result.sizing.fits:
        return None
    alone = weights_alone(weights.total_bytes, weights.per_rank_bytes, device.total_bytes, result.request.utilization)
    return None if alone is None else alone.sentence(device.gpu.key if device.gpu else "GPU of this memory")


def suggested_fix(result: PlanResult) -> str | None:
    """One actionable sentence for a configuration that does not fit."""
    sizing = result.sizing
    if sizing.fits:
        return None
    alone = weights_alone_note(result)
    if alone is not None:
        return alone
    needed = sizing.bytes_needed_for_one_max_len_request
    if result.kv_cache_memory_bytes <= 0 or needed <= 0:
        return "the KV cache gets no memory: raise gpu_memory_utilization, use a larger GPU or more GPUs"
    parts = [f"give the KV cache at least {needed:,} bytes per GPU (--kv-cache-memory {needed})"]
    if sizing.estimated_max_model_len:
        parts.append(f"lower --max-model-len to {sizing.estimated_max_model_len}")
    return " or ".join(parts)


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


def gpu_batch_defaults(gpus: list[GpuSpec], release: Release) -> list[BatchLimits]:
    """What `vllm serve` of the release takes per step on each GPU when no limit is given."""
    return [BatchLimits(*batch_defaults(gpu.total_bytes, gpu.name, "openai_api_server", gpu.compute_capability,
                                        release=release)) for gpu in gpus]


def catalog_entries(release: Release) -> list[CatalogEntry]:
    from collections import Counter

    from kvplan.sources.catalog import catalog_ids

    entries = []
    for model_id in catalog_ids():
        setup = settle(PlanRequest(args=EngineArgs(model=model_id), release=release))
        kinds: Counter[str] = Counter(layer.kind for layer in setup.shape.layers)
        entries.append(CatalogEntry(
            model_id=model_id, architecture=setup.shape.architecture,
            num_hidden_layers=setup.shape.num_hidden_layers, layer_kinds=dict(kinds),
            max_model_len=setup.max_model_len, dtype=setup.model_dtype,
            kv_bytes_per_token=setup_kv_bytes_per_token(setup),
        ))
    return entries
