"""Sizing the KV-cache pool from per-worker specs and memory, as vLLM's `get_kv_cache_configs` does
(0.17.1: `v1/core/kv_cache_utils.py`, docs/vllm/kv-semantics.md §2.3 and §3.2; 0.33.0:
`v1/core/kv_cache_planning.py`, docs/vllm/changes-0.33.md §2). What differs between releases is read from
the `Release` handed in, through the tables below (PER_REQUEST_MEMORY, KV_TENSOR_LAYOUT,
KV_CAPACITY, IN_FLIGHT_TOKENS, LOG_FORMATS).

Public API:
    size_kv_cache(worker_specs, available_bytes_per_worker, limits, num_gpu_blocks_override=None,
                  auto_fit=False, disable_hybrid_kv_cache_manager=False, *, release) -> SizingResult
        The whole of `get_kv_cache_configs` plus its report: merge the workers' specs, group
        them, project the groups onto each worker, apply the override (0.33.0: before the checks),
        auto-fit `max_model_len` (vLLM's `--max-model-len -1`), check memory (0.33.0: holding
        back one block), size each worker, take the minimum block count. A configuration that
        does not fit is a result with `fits=False` and vLLM's exact error text in `finding`
        (never an exception); specs vLLM refuses raise `GroupingError`.
    sizing_limits(max_model_len, max_num_batched_tokens, pipeline_parallel_size, *, release) -> SizingLimits
    kv_cache_config_from_groups(groups, available_bytes, num_gpu_blocks_override=None, *, release)
        -> (KVCacheConfig, log lines)                  -- one worker
    project_groups(groups, worker_specs) -> groups      -- a PP worker's share of the groups
    bytes_per_block(groups) -> int                      -- what one block of the pool costs
    max_memory_usage_bytes_from_groups(groups, limits, release) -> int
    estimate_max_model_len_from_groups(groups, available_bytes, limits, release) -> int
    check_enough_kv_cache_memory(available_bytes, needed_bytes, max_model_len, estimate, release) -> str | None
    shrink_pool(config, num_blocks) -> KVCacheConfig    -- the same layout with fewer blocks
    kv_capacity(config, limits, release) -> (tokens, concurrency)  -- vLLM's capacity figures
    blocks_for_kv_tokens(tokens, group_block_sizes, blocks_per_request, max_model_len, release) -> int
    kv_cache_tokens(num_blocks, group_block_sizes) -> int -- 0.17.1's token figure for any pool of those groups
    kv_bytes_per_token(worker_specs) -> float           -- sum of page / block size over layers
    report_lines(config, limits, release) -> lines      -- the release's capacity lines, verbatim"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, replace

from kvplan.errors import ConfigRejected
from kvplan.semantics.kv.grouping import GroupingError, get_kv_cache_groups
from kvplan.semantics.kv.specs import (
    GroupSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheSpec,
    KVCacheTensor,
    SizingLimits,
    UniformTypeKVCacheSpecs,
)
from kvplan.semantics.releases import (
    InFlightTokens,
    KvCapacity,
    KvTensorLayout,
    LogFormat,
    PerRequestMemory,
    Release,
)
from kvplan.units import cdiv, format_gib

DOCS_HINT = "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
CANNOT_AUTO_FIT = (
    "Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single token. "
    "Try increasing `gpu_memory_utilization`."
)
# the device vLLM names in 0.33.0's lines (`_kv_cache_device_name`): kvplan plans for CUDA GPUs
DEVICE_NAME = "GPU"
# 0.34.0's advice with the extensible KV cache off (the estimate path)
ESTIMATE_HINT = ("Try increasing `gpu_memory_utilization` when initializing the engine (this flag also controls CPU "
                 "memory reservation on the CPU backend, despite its name).")
# 0.34.0 logs a reduced auto-fit length below this at WARNING (`AUTO_FIT_SHORT_MAX_MODEL_LEN`)
AUTO_FIT_SHORT_MAX_MODEL_LEN = 8192


@dataclass(frozen=True)
class SizingTexts:
    """vLLM's wording of the lines sizing repeats, for one `log_format` (and, from 0.34.0, one sizing
    path: `measured_sizing_texts`)."""

    no_memory: str
    model_s: str                       # "models's" (0.17.1's spelling) or "model's"
    memory_advice: str                 # the advice closing the memory-check error
    auto_fit_fits: Callable[[int, int], str]          # (original, limiting bytes)
    auto_fit_reduced: Callable[[int, int, int], str]  # (original, fitted, limiting bytes)
    capacity_lines: Callable[[int, float, int], tuple[str, ...]]   # (tokens, concurrency, max_model_len)
    cannot_auto_fit: str = ""          # the auto-fit error when not one token fits (CANNOT_AUTO_FIT if empty)


def _separate_capacity_lines(tokens: int, concurrency: float, max_model_len: int) -> tuple[str, ...]:
    return (
        f"GPU KV cache size: {tokens:,} tokens",
        f"Maximum concurrency for {max_model_len:,} tokens per request: {concurrency:.2f}x",
    )


def _merged_capacity_line(tokens: int, concurrency: float, max_model_len: int) -> tuple[str, ...]:
    return (
        f"{DEVICE_NAME} KV cache size: {tokens:,} tokens, Maximum concurrency for {max_model_len:,} tokens "
        f"per request: {concurrency:.2f}x",
    )


# Release.log_format -> vLLM's wording
LOG_FORMATS: dict[LogFormat, SizingTexts] = {
    "separate_capacity_lines": SizingTexts(
        no_memory=(
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
            f"initializing the engine. {DOCS_HINT}"
        ),
        model_s="models's",
        memory_advice="Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing "
                      "the engine.",
        auto_fit_fits=lambda original, _limiting: (
            f"Auto-fit max_model_len: full model context length {original} fits in available GPU memory"
        ),
        auto_fit_reduced=lambda original, fitted, limiting: (
            f"Auto-fit max_model_len: reduced from {original} to {fitted} to fit in available GPU memory "
            f"({format_gib(limiting)} GiB available for KV cache)"
        ),
        capacity_lines=_separate_capacity_lines,
    ),
    "merged_capacity_line": SizingTexts(
        no_memory=(
            "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
            "initializing the engine (this flag also controls CPU memory reservation on the CPU backend, "
            f"despite its name). {DOCS_HINT}"
        ),
        model_s="model's",
        memory_advice="Try increasing `gpu_memory_utilization` (which also controls CPU memory on the CPU "
                      "backend) or decreasing `max_model_len` when initializing the engine.",
        auto_fit_fits=lambda original, limiting: (
            f"Auto-fit max_model_len: full model context length {original} fits in available KV cache memory "
            f"({format_gib(limiting)} GiB {DEVICE_NAME})"
        ),
        auto_fit_reduced=lambda original, fitted, limiting: (
            f"Auto-fit max_model_len: reduced from {original} to {fitted} to fit in available KV cache memory "
            f"({format_gib(limiting)} GiB {DEVICE_NAME})"
        ),
        capacity_lines=_merged_capacity_line,
    ),
    # 0.34.0 on the estimate path (kv_cache_planning.py: `_more_kv_cache_memory_hint` with the extensible
    # KV cache off, `_auto_fit_max_model_len`); measured_sizing_texts gives the measured path's
    "merged_capacity_line_after_warmup": SizingTexts(
        no_memory=f"No available memory for the cache blocks. {ESTIMATE_HINT} {DOCS_HINT}",
        model_s="model's",
        memory_advice=f"{ESTIMATE_HINT} Decreasing `max_model_len` also reduces what is needed.",
        auto_fit_fits=lambda original, limiting: (
            f"Auto-fit max_model_len: full model context length {original} fits in available KV cache memory "
            f"({format_gib(limiting)} GiB {DEVICE_NAME})"
        ),
        auto_fit_reduced=lambda original, fitted, limiting: _auto_reduced(
            original, fitted, f"{format_gib(limiting)} GiB {DEVICE_NAME} available for the KV cache",
            "Increase `gpu_memory_utilization` or set --max-model-len explicitly."),
        capacity_lines=_merged_capacity_line,
        cannot_auto_fit=("Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single "
                         f"token. {ESTIMATE_HINT}"),
    ),
}


def _auto_reduced(original: int, fitted: int, left: str, hint: str) -> str:
    """0.34.0's "auto reduced" line: INFO from 8,192 tokens on, a WARNING with the rejection below."""
    line = f"--max-model-len auto reduced max_model_len from {original} to {fitted} ({left})."
    if fitted >= AUTO_FIT_SHORT_MAX_MODEL_LEN:
        return line
    return f"{line} Requests longer than {fitted} tokens will be rejected. {hint}"


def measured_sizing_texts(release: Release, utilization: float, *, after_warmup: bool) -> SizingTexts:
    """0.34.0's wording with the extensible KV cache on: the capacity pass's auto-fit is tentative, the
    pass after warmup names the memory CUDA graphs and warmup left, and the hints say what the
    extensible cache takes (`_more_kv_cache_memory_hint(after_warmup)`)."""
    used_by = "the model, its activations, CUDA graphs and warmup" if after_warmup else \
        "the model and its activations"
    graphs_hint = (" CUDA graphs take less with fewer or smaller capture sizes in the compilation config."
                   if after_warmup else "")
    if utilization < 1.0:
        hint = (f"The KV cache gets what is left after {used_by} within `gpu_memory_utilization`={utilization}; "
                "increase it (with the extensible KV cache it defaults to 1.0) or decrease `max_model_len` or "
                f"`max_num_seqs`.{graphs_hint}")
        short_hint = "Increase `gpu_memory_utilization` or set --max-model-len explicitly."
    else:
        hint = (f"The extensible KV cache already takes all device memory left after {used_by}; decrease "
                f"`max_model_len` or `max_num_seqs`, or the model needs a device with more memory.{graphs_hint}")
        short_hint = "Use more GPUs or set --max-model-len explicitly."
    base = LOG_FORMATS[release.log_format]
    tentative = "; the final length is set after CUDA graph capture and warmup"

    def fits(original: int, limiting: int) -> str:
        memory = f"{format_gib(limiting)} GiB {DEVICE_NAME}"
        if after_warmup:
            return (f"Auto-fit max_model_len: using max_model_len={original}, which fits in the KV cache memory "
                    f"left after CUDA graph capture and warmup ({memory}).")
        return f"Auto-fit max_model_len: full model context length {original} fits in available KV cache " \
               f"memory ({memory}){tentative}"

    def reduced(original: int, fitted: int, limiting: int) -> str:
        memory = f"{format_gib(limiting)} GiB {DEVICE_NAME}"
        if after_warmup:
            return _auto_reduced(original, fitted, f"{memory} left for the KV cache after CUDA graph capture and "
                                                   "warmup", short_hint)
        return (f"Auto-fit max_model_len: reduced from {original} to {fitted} to fit in available KV cache memory "
                f"({memory}){tentative}")

    cannot = ("CUDA graph capture and warmup left no memory for the KV cache. Increase `gpu_memory_utilization`, "
              "reduce the memory CUDA graphs take (fewer or smaller capture sizes in the compilation config), or "
              "use more GPUs." if after_warmup else hint)
    return replace(
        base, no_memory=f"No available memory for the cache blocks. {hint} {DOCS_HINT}",
        memory_advice=f"{hint} Decreasing `max_model_len` also reduces what is needed.",
        auto_fit_fits=fits, auto_fit_reduced=reduced,
        cannot_auto_fit=("Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single "
                         f"token. {cannot}"),
    )


@dataclass(frozen=True)
class SizingResult:
    """What vLLM would end up with, or why it would refuse to start.

    `worker_configs` holds one `KVCacheConfig` per worker (all with the same `num_blocks`); it is
    empty when the configuration does not fit. `bytes_needed_per_worker` is what one request of
    `max_model_len` tokens needs by vLLM's memory check, on each worker."""

    fits: bool
    finding: str | None
    max_model_len: int
    groups: tuple[KVCacheGroupSpec, ...]
    worker_configs: tuple[KVCacheConfig, ...]
    bytes_needed_per_worker: tuple[int, ...]
    estimated_max_model_len: int | None = None
    gpu_kv_cache_tokens: int | None = None
    max_concurrency: float | None = None
    log_lines: tuple[str, ...] = ()
    # the global groups restricted to each worker's layers (what its KVCacheConfig holds), in rank order
    worker_groups: tuple[tuple[KVCacheGroupSpec, ...], ...] = ()

    @property
    def rank0_groups(self) -> tuple[KVCacheGroupSpec, ...]:
        """The groups of rank 0's KVCacheConfig: what vLLM logs, and what its scheduler runs with."""
        return self.worker_groups[0] if self.worker_groups else self.groups

    @property
    def config(self) -> KVCacheConfig | None:
        return self.worker_configs[0] if self.worker_configs else None

    @property
    def num_blocks(self) -> int | None:
        return self.worker_configs[0].num_blocks if self.worker_configs else None

    @property
    def page_size_bytes(self) -> int | None:
        return self.groups[0].kv_cache_spec.page_size_bytes if self.groups else None

    @property
    def bytes_needed_for_one_max_len_request(self) -> int:
        return max(self.bytes_needed_per_worker, default=0)


def _uniform_page_size(specs: Iterable[GroupSpec]) -> int:
    page_sizes = {spec.page_size_bytes for spec in specs}
    assert len(page_sizes) == 1, f"groups must share one page size, got {sorted(page_sizes)}"
    return page_sizes.pop()


def _single_uniform_type(groups: Sequence[KVCacheGroupSpec]) -> UniformTypeKVCacheSpecs | None:
    if len(groups) == 1 and isinstance(groups[0].kv_cache_spec, UniformTypeKVCacheSpecs):
        return groups[0].kv_cache_spec
    return None


def _layer_spec(group: KVCacheGroupSpec, name: str) -> KVCacheSpec:
    spec = group.kv_cache_spec
    return spec.kv_cache_specs[name] if isinstance(spec, UniformTypeKVCacheSpecs) else spec


def _request_blocks(spec: GroupSpec, limits: SizingLimits) -> int:
    """The blocks one `max_model_len` request takes from a group's block table."""
    if isinstance(spec, UniformTypeKVCacheSpecs):
        return max(cdiv(member.max_memory_usage_bytes(limits), member.page_size_bytes)
                   for member in spec.kv_cache_specs.values())
    return cdiv(spec.max_memory_usage_bytes(limits), spec.page_size_bytes)


def bytes_per_block(groups: Sequence[KVCacheGroupSpec]) -> int:
    """What one more block of the pool costs on one worker (`num_blocks = available // this`): the
    pages of the largest group's layers, summed (0.17.1's `group_size x page` is the same number)."""
    return max(sum(_layer_spec(group, name).page_size_bytes for name in group.layer_names) for group in groups)


def _first_group_times_group_size(groups: Sequence[KVCacheGroupSpec], limits: SizingLimits) -> int:
    """0.17.1: one group of unequal pages needs each layer's own bytes; several groups need group
    0's blocks only, times the group size (so padding layers are paid for)."""
    uniform = _single_uniform_type(groups)
    if uniform is not None:
        return sum(spec.max_memory_usage_bytes(limits) for spec in uniform.kv_cache_specs.values())
    group_size = max(len(group.layer_names) for group in groups)
    page_size = _uniform_page_size(group.kv_cache_spec for group in groups)
    blocks = cdiv(groups[0].kv_cache_spec.max_memory_usage_bytes(limits), page_size)
    return group_size * page_size * blocks


def _sum_over_groups(groups: Sequence[KVCacheGroupSpec], limits: SizingLimits) -> int:
    """0.33.0: every group takes its own blocks from the one pool, so a request costs the sum of
    the groups' blocks, each block costing the pool's bytes per block."""
    return bytes_per_block(groups) * sum(_request_blocks(group.kv_cache_spec, limits) for group in groups)


# Release.per_request_memory -> what one max_model_len request needs
PER_REQUEST_MEMORY: dict[PerRequestMemory, Callable[[Sequence[KVCacheGroupSpec], SizingLimits], int]] = {
    "first_group_times_group_size": _first_group_times_group_size,
    "sum_over_groups": _sum_over_groups,
}


def max_memory_usage_bytes_from_groups(
    groups: Sequence[KVCacheGroupSpec], limits: SizingLimits, release: Release
) -> int:
    """Bytes one `max_model_len` request needs, by the release's rule."""
    if not groups:
        return 0
    return PER_REQUEST_MEMORY[release.per_request_memory](groups, limits)


def reserved_bytes(groups: Sequence[KVCacheGroupSpec], release: Release) -> int:
    """The memory the release's capacity check and auto-fit hold back: whole blocks of the pool."""
    if not groups or not release.capacity_reserve_blocks:
        return 0
    return release.capacity_reserve_blocks * bytes_per_block(groups)


def _one_batch(max_num_batched_tokens: int, pipeline_parallel_size: int) -> int | None:
    return None


def _concurrent_batches(max_num_batched_tokens: int, pipeline_parallel_size: int) -> int | None:
    """`VllmConfig.max_in_flight_tokens`: `vllm serve` schedules asynchronously, two batches in flight,
    with one pipeline stage; with several it runs synchronously, one batch per stage (as the
    release's own planning does, tests/data/sizing)."""
    batches = 2 if pipeline_parallel_size <= 1 else pipeline_parallel_size
    return batches * max_num_batched_tokens


def _pp_plus_one_batches(max_num_batched_tokens: int, pipeline_parallel_size: int) -> int | None:
    """0.34.0: Model Runner V2 only, which schedules asynchronously with pipeline stages too:
    `max_concurrent_batches = pp + 1` (docs/vllm/changes-0.34.md section 1.7)."""
    return (pipeline_parallel_size + 1) * max_num_batched_tokens


# Release.in_flight_tokens -> what a sliding-window or chunked-local request holds beyond its window
IN_FLIGHT_TOKENS: dict[InFlightTokens, Callable[[int, int], int | None]] = {
    "one_batch": _one_batch,
    "concurrent_batches": _concurrent_batches,
    "pp_plus_one_batches": _pp_plus_one_batches,
}


def sizing_limits(max_model_len: int, max_num_batched_tokens: int, pipeline_parallel_size: int = 1, *,
                  release: Release) -> SizingLimits:
    """The scheduler settings the specs read, as the release derives them."""
    in_flight = IN_FLIGHT_TOKENS[release.in_flight_tokens](max_num_batched_tokens, pipeline_parallel_size)
    return SizingLimits(max_model_len, max_num_batched_tokens, in_flight)


def _largest_fitting_len(fits: Callable[[int], bool], upper: int) -> int:
    """vLLM's binary search over [1, upper]; 0 when not even one token fits."""
    if not fits(1):
        return 0
    left, right, best = 1, upper, 1
    while left <= right:
        mid = (left + right) // 2
        if fits(mid):
            best, left = mid, mid + 1
        else:
            right = mid - 1
    return best


def estimate_max_model_len_from_groups(
    groups: Sequence[KVCacheGroupSpec], available_bytes: int, limits: SizingLimits, release: Release,
) -> int:
    return _largest_fitting_len(
        lambda n: max_memory_usage_bytes_from_groups(groups, replace(limits, max_model_len=n), release)
        <= available_bytes,
        limits.max_model_len,
    )


def check_enough_kv_cache_memory(
    available_bytes: int, needed_bytes: int, max_model_len: int, estimate: Callable[[int], int], release: Release,
    texts: SizingTexts | None = None,
) -> str | None:
    """vLLM's error text when one `max_model_len` request does not fit, else None (`texts`: the
    release's wording unless given)."""
    texts = texts or LOG_FORMATS[release.log_format]
    if available_bytes <= 0:
        return texts.no_memory
    if needed_bytes <= available_bytes:
        return None
    estimated = estimate(available_bytes)
    based_on = (
        f"Based on the available memory, the estimated maximum model length is {estimated}. "
        if estimated > 0 else ""
    )
    # "models's" is 0.17.1's spelling; kvplan repeats the message verbatim
    return (
        f"To serve at least one request with the {texts.model_s} max seq len ({max_model_len}), "
        f"({format_gib(needed_bytes)} GiB KV cache is needed, which is larger than the available KV "
        f"cache memory ({format_gib(available_bytes)} GiB). {based_on}"
        f"{texts.memory_advice} {DOCS_HINT}"
    )


def override_line(num_blocks: int, num_gpu_blocks_override: int) -> str:
    return f"Overriding num_gpu_blocks={num_blocks} with num_gpu_blocks_override={num_gpu_blocks_override}"


def _tensor_per_layer(groups: Sequence[KVCacheGroupSpec], num_blocks: int) -> tuple[KVCacheTensor, ...]:
    """0.17.1: one tensor per layer of a uniform-type group; otherwise `group_size` tensors, tensor i
    shared by layer i of every group."""
    uniform = _single_uniform_type(groups)
    if uniform is not None:
        return tuple(
            KVCacheTensor(size=uniform.kv_cache_specs[name].page_size_bytes * num_blocks, shared_by=(name,))
            for name in groups[0].layer_names
        )
    group_size = max(len(group.layer_names) for group in groups)
    assert group_size > 0, "group_size must be greater than 0"
    page_size = _uniform_page_size(group.kv_cache_spec for group in groups)
    return tuple(
        KVCacheTensor(
            size=page_size * num_blocks,
            shared_by=tuple(group.layer_names[i] for group in groups if i < len(group.layer_names)),
        )
        for i in range(group_size)
    )


def _shared_backing(groups: Sequence[KVCacheGroupSpec], num_blocks: int) -> tuple[KVCacheTensor, ...]:
    """0.33.0 (layer-outer LBNHC layout): one backing allocation of `bytes_per_block x num_blocks`;
    each group's layers of one spec are a run of `page x num_blocks`-byte regions from byte 0."""
    size = bytes_per_block(groups) * num_blocks
    tensors = []
    for group in groups:
        by_spec: dict[KVCacheSpec, list[str]] = {}
        for name in group.layer_names:
            by_spec.setdefault(_layer_spec(group, name), []).append(name)
        offset = 0
        for spec, names in by_spec.items():
            layer_stride = spec.page_size_bytes * num_blocks
            tensors.append(KVCacheTensor(size=size, shared_by=tuple(names), layer_stride=layer_stride,
                                         block_stride=spec.page_size_bytes, offset=offset))
            offset += len(names) * layer_stride
    return tuple(tensors)


# Release.kv_tensor_layout -> the tensors of a pool of `num_blocks` blocks
KV_TENSOR_LAYOUT: dict[KvTensorLayout, Callable[[Sequence[KVCacheGroupSpec], int], tuple[KVCacheTensor, ...]]] = {
    "tensor_per_layer": _tensor_per_layer,
    "shared_backing": _shared_backing,
}


def _pool(groups: Sequence[KVCacheGroupSpec], num_blocks: int, layout: KvTensorLayout) -> KVCacheConfig:
    tensors = KV_TENSOR_LAYOUT[layout](groups, num_blocks)
    return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=tensors, kv_cache_groups=tuple(groups),
                         tensor_layout=layout)


def kv_cache_config_from_groups(
    groups: Sequence[KVCacheGroupSpec], available_bytes: int, num_gpu_blocks_override: int | None = None, *,
    release: Release,
) -> tuple[KVCacheConfig, tuple[str, ...]]:
    """One worker's pool: `num_blocks = available // bytes_per_block` (at least 0), then the
    override where the release applies it here (0.17.1)."""
    if not groups:
        return KVCacheConfig(num_blocks=1, kv_cache_tensors=(), kv_cache_groups=()), ()  # null block
    if not any(group.layer_names for group in groups):
        # vLLM stops here on `assert group_size > 0`: a pipeline stage instantiated no layer
        raise ConfigRejected("a pipeline stage holds no layer with a KV cache (vLLM fails on "
                             "\"assert group_size > 0\"): lower --pipeline-parallel-size")
    num_blocks = max(available_bytes // bytes_per_block(groups), 0)
    logs: tuple[str, ...] = ()
    if num_gpu_blocks_override is not None:
        if release.blocks_override == "after_checks":
            logs = (override_line(num_blocks, num_gpu_blocks_override),)
        num_blocks = num_gpu_blocks_override
    return _pool(groups, num_blocks, release.kv_tensor_layout), logs


def project_groups(
    groups: Sequence[KVCacheGroupSpec], worker_specs: Mapping[str, KVCacheSpec]
) -> tuple[KVCacheGroupSpec, ...]:
    """The global groups restricted to one worker's layers; a group may end up empty."""
    projected = []
    for group in groups:
        names = tuple(name for name in group.layer_names if name in worker_specs)
        spec = group.kv_cache_spec
        if names and isinstance(spec, UniformTypeKVCacheSpecs):
            spec = UniformTypeKVCacheSpecs(
                block_size=spec.block_size, kv_cache_specs={name: spec.kv_cache_specs[name] for name in names}
            )
        projected.append(KVCacheGroupSpec(names, spec))
    return tuple(projected)


def _blocks_per_group(config: KVCacheConfig, limits: SizingLimits) -> tuple[int, float]:
    """0.17.1: blocks per group times the smallest block size; concurrency from the per-request bytes
    of every group, padded to whole blocks of `layers_per_group` pages."""
    groups = config.kv_cache_groups
    tokens = kv_cache_tokens(config.num_blocks, [group.kv_cache_spec.block_size for group in groups])
    layers_per_group = max(len(group.layer_names) for group in groups)
    per_request = layers_per_group * sum(group.kv_cache_spec.max_memory_usage_bytes(limits) for group in groups)
    per_block = groups[0].kv_cache_spec.page_size_bytes * layers_per_group
    return tokens, config.num_blocks / cdiv(per_request, per_block)


def kv_cache_tokens(num_blocks: int, group_block_sizes: Sequence[int]) -> int:
    """0.17.1's "GPU KV cache size" of a pool of `num_blocks` shared by groups of these block sizes."""
    return num_blocks // len(group_block_sizes) * min(group_block_sizes)


def _concurrency_times_length(config: KVCacheConfig, limits: SizingLimits) -> tuple[int, float]:
    """0.33.0 (`get_kv_cache_capacity`): a request takes each group's blocks from the one pool, and the
    token figure is the concurrency times max_model_len, truncated."""
    concurrency = config.num_blocks / sum(_request_blocks(group.kv_cache_spec, limits)
                                          for group in config.kv_cache_groups)
    return int(concurrency * limits.max_model_len), concurrency


# Release.kv_capacity -> (tokens, concurrency) of a pool
KV_CAPACITY: dict[KvCapacity, Callable[[KVCacheConfig, SizingLimits], tuple[int, float]]] = {
    "blocks_per_group": _blocks_per_group,
    "concurrency_times_length": _concurrency_times_length,
}


def kv_capacity(config: KVCacheConfig, limits: SizingLimits, release: Release) -> tuple[int, float]:
    """vLLM's "GPU KV cache size" tokens and "Maximum concurrency" of the pool."""
    return KV_CAPACITY[release.kv_capacity](config, limits)


def concurrency_at_length(config: KVCacheConfig, limits: SizingLimits, release: Release, tokens: int) -> float:
    """vLLM's "Maximum concurrency" figure for requests of `tokens` tokens instead of max_model_len:
    the same per-request blocks, taken at that length (how many 4k-token chats fit at once, issue 24)."""
    return kv_capacity(config, replace(limits, max_model_len=tokens), release)[1]


def blocks_for_kv_tokens(tokens: int, group_block_sizes: Sequence[int], blocks_per_request: int,
                         max_model_len: int, release: Release) -> int:
    """The fewest blocks whose "KV cache size" figure is at least `tokens`, by the release's rule."""
    if release.kv_capacity == "blocks_per_group":
        return len(group_block_sizes) * cdiv(tokens, min(group_block_sizes))
    blocks = cdiv(tokens * blocks_per_request, max_model_len)
    while int(blocks / blocks_per_request * max_model_len) < tokens:  # the float product may fall short
        blocks += 1
    return blocks


def kv_bytes_per_token(specs: Mapping[str, KVCacheSpec]) -> float:
    """Bytes one token costs on one worker: each layer's page over its block size, summed
    (a Mamba layer's share is nominal: its page holds a whole request's state)."""
    return sum(spec.page_size_bytes / spec.block_size for spec in specs.values())


def report_lines(config: KVCacheConfig, limits: SizingLimits, release: Release) -> tuple[str, ...]:
    tokens, concurrency = kv_capacity(config, limits, release)
    return LOG_FORMATS[release.log_format].capacity_lines(tokens, concurrency, limits.max_model_len)


def _merge_worker_specs(worker_specs: Sequence[Mapping[str, KVCacheSpec]]) -> dict[str, KVCacheSpec]:
    merged: dict[str, KVCacheSpec] = {}
    for specs in worker_specs:
        for name, spec in specs.items():
            if merged.setdefault(name, spec) != spec:
                raise GroupingError(
                    "The KV cache specs for the same layer are different across workers. "
                    "This is not supported yet."
                )
    return merged


def _auto_fit_max_model_len(
    projected: Sequence[Sequence[KVCacheGroupSpec]], available: Sequence[int], limits: SizingLimits,
    release: Release, texts: SizingTexts,
) -> tuple[int, str | None]:
    """The largest `max_model_len` every worker holds in `available` (the memory the check sees) and
    vLLM's log line; 0 and no line when not even one token fits."""
    original = limits.max_model_len
    if all(not groups for groups in projected):
        return original, (
            f"Auto-fit max_model_len: attention-free model, using derived max_model_len={original}"
        )
    best, limiting_bytes = original, available[0]
    for groups, avail in zip(projected, available, strict=True):
        if groups:
            worker_best = estimate_max_model_len_from_groups(groups, avail, limits, release)
            if worker_best < best:
                best, limiting_bytes = worker_best, avail
    if best <= 0:
        return 0, None
    if best >= original:
        return original, texts.auto_fit_fits(original, limiting_bytes)
    return best, texts.auto_fit_reduced(original, best, limiting_bytes)


def shrink_pool(config: KVCacheConfig, num_blocks: int) -> KVCacheConfig:
    """The same layers and layout with `num_blocks` blocks (vLLM re-plans the worker with them)."""
    if not config.kv_cache_groups:
        return config
    return _pool(config.kv_cache_groups, num_blocks, config.tensor_layout)


def size_kv_cache(
    worker_specs: Sequence[Mapping[str, KVCacheSpec]],
    available_bytes_per_worker: Sequence[int],
    limits: SizingLimits,
    num_gpu_blocks_override: int | None = None,
    auto_fit: bool = False,
    disable_hybrid_kv_cache_manager: bool = False,
    *,
    release: Release,
    texts: SizingTexts | None = None,
    report_capacity: bool = True,
) -> SizingResult:
    """vLLM's `get_kv_cache_configs` and its capacity report for these workers, as `release` computes
    them.

    `worker_specs` has one dict per worker (layer name -> spec, in model order) and
    `available_bytes_per_worker` the KV memory of each. `limits.max_model_len` is the model's
    derived length; with `auto_fit` it is reduced to what every worker holds. `texts` replaces the
    release's wording (0.34.0's measured path); without `report_capacity` the capacity lines are not
    logged (0.34.0 logs them after warmup, on the measured blocks)."""
    texts = texts or LOG_FORMATS[release.log_format]
    if len(worker_specs) != len(available_bytes_per_worker):
        raise ValueError("one available-memory figure per worker is needed")
    grouping = get_kv_cache_groups(
        _merge_worker_specs(worker_specs), disable_hybrid_kv_cache_manager, release=release)
    projected = [project_groups(grouping.groups, specs) for specs in worker_specs]
    logs = list(grouping.logs)
    available = list(available_bytes_per_worker)

    def refused(message: str, needed: tuple[int, ...], estimated: int | None = None) -> SizingResult:
        return SizingResult(
            fits=False, finding=message, max_model_len=limits.max_model_len, groups=grouping.groups,
            worker_configs=(), bytes_needed_per_worker=needed, estimated_max_model_len=estimated,
            log_lines=tuple(logs), worker_groups=tuple(projected),
        )

    if num_gpu_blocks_override is not None and release.blocks_override == "before_checks":
        # the override becomes the memory every later step plans with (0.33.0)
        for index, groups in enumerate(projected):
            if groups:
                per_block = bytes_per_block(groups)
                logs.append(override_line(available[index] // per_block, num_gpu_blocks_override))
                available[index] = num_gpu_blocks_override * per_block
    check_memory = [avail - reserved_bytes(groups, release) for groups, avail in zip(projected, available,
                                                                                     strict=True)]

    if auto_fit:
        fitted_len, fit_log = _auto_fit_max_model_len(projected, check_memory, limits, release, texts)
        if fit_log is None:
            needed = tuple(max_memory_usage_bytes_from_groups(groups, limits, release) for groups in projected)
            return refused(texts.cannot_auto_fit or CANNOT_AUTO_FIT, needed)
        logs.append(fit_log)
        limits = replace(limits, max_model_len=fitted_len)

    needed = tuple(max_memory_usage_bytes_from_groups(groups, limits, release) for groups in projected)
    for groups, avail, need in zip(projected, check_memory, needed, strict=True):
        if not groups:
            continue

        def estimate(memory: int, groups: Sequence[KVCacheGroupSpec] = groups) -> int:
            return estimate_max_model_len_from_groups(groups, memory, limits, release)

        finding = check_enough_kv_cache_memory(avail, need, limits.max_model_len, estimate, release, texts)
        if finding is not None:
            return refused(finding, needed, estimate(avail) if 0 < avail < need else None)

    configs = []
    override_here = num_gpu_blocks_override if release.blocks_override == "after_checks" else None
    for groups, specs, avail in zip(projected, worker_specs, available, strict=True):
        assert sum(len(group.layer_names) for group in groups) == len(specs), (
            "Some layers are not assigned to any group."
        )
        config, override_logs = kv_cache_config_from_groups(groups, avail, override_here, release=release)
        configs.append(config)
        logs.extend(override_logs)
    min_blocks = min(config.num_blocks for config in configs)
    configs = [config if config.num_blocks == min_blocks else shrink_pool(config, min_blocks)
               for config in configs]

    first = configs[0]
    if not first.kv_cache_groups:
        return SizingResult(
            fits=True, finding=None, max_model_len=limits.max_model_len, groups=grouping.groups,
            worker_configs=tuple(configs), bytes_needed_per_worker=needed, log_lines=tuple(logs),
            worker_groups=tuple(projected),
        )
    for config in configs if report_capacity else ():
        # vLLM logs these once (`info_once`): every worker prints the same lines
        for line in report_lines(config, limits, release):
            if line not in logs:
                logs.append(line)
    tokens, concurrency = kv_capacity(first, limits, release)
    return SizingResult(
        fits=True, finding=None, max_model_len=limits.max_model_len, groups=grouping.groups,
        worker_configs=tuple(configs), bytes_needed_per_worker=needed,
        gpu_kv_cache_tokens=tokens, max_concurrency=concurrency, log_lines=tuple(logs),
        worker_groups=tuple(projected),
    )
