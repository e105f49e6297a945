"""Sizing the KV-cache pool from per-worker specs and memory, as vLLM 0.17.1's
`get_kv_cache_configs` does (`v1/core/kv_cache_utils.py`, semantics sections 2.3 and 3.2).

Public API:
    size_kv_cache(worker_specs, available_bytes_per_worker, limits, num_gpu_blocks_override=None,
                  auto_fit=False, disable_hybrid_kv_cache_manager=False) -> SizingResult
        The whole of `get_kv_cache_configs` plus its report: merge the workers' specs, group
        them, project the groups onto each worker, auto-fit `max_model_len` (vLLM's
        `--max-model-len -1`), check memory, size each worker, take the minimum block count.
        A configuration that does not fit is a result with `fits=False` and vLLM's exact error
        text in `finding` (never an exception); specs vLLM refuses raise `GroupingError`.
    kv_cache_config_from_groups(groups, available_bytes, num_gpu_blocks_override=None)
        -> (KVCacheConfig, log lines)                  -- one worker
    project_groups(groups, worker_specs) -> groups      -- a PP worker's share of the groups
    max_memory_usage_bytes_from_groups(groups, limits) -> int
    estimate_max_model_len_from_groups(groups, available_bytes, limits) -> int
    check_enough_kv_cache_memory(available_bytes, needed_bytes, max_model_len, estimate) -> str | None
    shrink_pool(config, num_blocks) -> KVCacheConfig    -- the same layout with fewer blocks
    max_concurrency(config, limits) -> float            -- `get_max_concurrency_for_kv_cache_config`
    gpu_kv_cache_tokens(config) -> int                  -- the "GPU KV cache size" figure
    kv_cache_tokens(num_blocks, group_block_sizes) -> int -- the same for any pool of those groups
    kv_bytes_per_token(worker_specs) -> float           -- sum of page / block size over layers
    report_lines(config, limits, release) -> lines      -- the release's info lines, verbatim"""

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
from kvplan.semantics.releases import KvCapacityLog, PerRequestMemory, Release
from kvplan.units import cdiv, format_gib

DOCS_HINT = "See https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
NO_MEMORY = (
    "No available memory for the cache blocks. Try increasing `gpu_memory_utilization` when "
    f"initializing the engine. {DOCS_HINT}"
)
CANNOT_AUTO_FIT = (
    "Cannot auto-fit max_model_len: not enough GPU memory available to serve even a single token. "
    "Try increasing `gpu_memory_utilization`."
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


def _first_group_times_group_size(groups: Sequence[KVCacheGroupSpec], limits: SizingLimits) -> int:
    """0.17.1: for several groups, the blocks of group 0's spec only, times the group size (so
    padding layers are paid for)."""
    group_size = max(len(group.layer_names) for group in groups)
    page_size = _uniform_page_size(group.kv_cache_spec for group in groups)
    blocks = cdiv(groups[0].kv_cache_spec.max_memory_usage_bytes(limits), page_size)
    return group_size * page_size * blocks


# Release.per_request_memory -> what one max_model_len request needs when there are several groups
PER_REQUEST_MEMORY: dict[PerRequestMemory, Callable[[Sequence[KVCacheGroupSpec], SizingLimits], int]] = {
    "first_group_times_group_size": _first_group_times_group_size,
}


def max_memory_usage_bytes_from_groups(
    groups: Sequence[KVCacheGroupSpec], limits: SizingLimits, release: Release
) -> int:
    """Bytes one `max_model_len` request needs, by the release's rule for several groups."""
    if not groups:
        return 0
    uniform = _single_uniform_type(groups)
    if uniform is not None:
        return sum(spec.max_memory_usage_bytes(limits) for spec in uniform.kv_cache_specs.values())
    return PER_REQUEST_MEMORY[release.per_request_memory](groups, limits)


def bytes_per_block(groups: Sequence[KVCacheGroupSpec]) -> int:
    """What one more block of the pool costs on one worker (`num_blocks = available // this`)."""
    uniform = _single_uniform_type(groups)
    if uniform is not None:
        return uniform.page_size_bytes
    group_size = max(len(group.layer_names) for group in groups)
    return _uniform_page_size(group.kv_cache_spec for group in groups) * group_size


def reserved_bytes(groups: Sequence[KVCacheGroupSpec], release: Release) -> int:
    """The memory the release's capacity check and auto-fit hold back: whole blocks of the pool."""
    if not groups or not release.capacity_reserve_blocks:
        return 0
    return release.capacity_reserve_blocks * bytes_per_block(groups)


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
    available_bytes: int, needed_bytes: int, max_model_len: int, estimate: Callable[[int], int]
) -> str | None:
    """vLLM's error text when one `max_model_len` request does not fit, else None."""
    if available_bytes <= 0:
        return NO_MEMORY
    if needed_bytes <= available_bytes:
        return None
    estimated = estimate(available_bytes)
    based_on = (
        f"Based on the available memory, the estimated maximum model length is {estimated}. "
        if estimated > 0 else ""
    )
    # "models's" is vLLM's spelling; kvplan repeats the message verbatim
    return (
        f"To serve at least one request with the models's max seq len ({max_model_len}), "
        f"({format_gib(needed_bytes)} GiB KV cache is needed, which is larger than the available KV "
        f"cache memory ({format_gib(available_bytes)} GiB). {based_on}"
        "Try increasing `gpu_memory_utilization` or decreasing `max_model_len` when initializing the "
        f"engine. {DOCS_HINT}"
    )


def _override(num_blocks: int, num_gpu_blocks_override: int | None) -> tuple[int, tuple[str, ...]]:
    if num_gpu_blocks_override is None:
        return num_blocks, ()
    return num_gpu_blocks_override, (
        f"Overriding num_gpu_blocks={num_blocks} with num_gpu_blocks_override={num_gpu_blocks_override}",
    )


def kv_cache_config_from_groups(
    groups: Sequence[KVCacheGroupSpec], available_bytes: int, num_gpu_blocks_override: int | None = None
) -> tuple[KVCacheConfig, tuple[str, ...]]:
    """One worker's pool: `num_blocks = available // page_size // group_size` (at least 0)."""
    if not groups:
        return KVCacheConfig(num_blocks=1, kv_cache_tensors=(), kv_cache_groups=()), ()  # null block
    uniform = _single_uniform_type(groups)
    if uniform is not None:
        # one tensor per layer, each sized by its own page; the group's page is their sum
        num_blocks, logs = _override(available_bytes // uniform.page_size_bytes, num_gpu_blocks_override)
        tensors = tuple(
            KVCacheTensor(size=uniform.kv_cache_specs[name].page_size_bytes * num_blocks, shared_by=(name,))
            for name in groups[0].layer_names
        )
    else:
        # `group_size` tensors, tensor i shared by layer i of every group
        group_size = max(len(group.layer_names) for group in groups)
        if group_size == 0:
            # vLLM stops here on `assert group_size > 0`: a pipeline stage instantiated no layer
            raise ConfigRejected("a pipeline stage holds no layer with a KV cache (vLLM fails on "
                                 "\"assert group_size > 0\"): lower --pipeline-parallel-size")
        page_size = _uniform_page_size(group.kv_cache_spec for group in groups)
        num_blocks, logs = _override(
            max(available_bytes // page_size // group_size, 0), num_gpu_blocks_override
        )
        tensors = tuple(
            KVCacheTensor(
                size=page_size * num_blocks,
                shared_by=tuple(group.layer_names[i] for group in groups if i < len(group.layer_names)),
            )
            for i in range(group_size)
        )
    return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=tensors, kv_cache_groups=tuple(groups)), logs


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


def max_concurrency(config: KVCacheConfig, limits: SizingLimits) -> float:
    """How many `max_model_len` requests the pool holds at once, by vLLM's formula."""
    layers_per_group = max(len(group.layer_names) for group in config.kv_cache_groups)
    per_request = layers_per_group * sum(
        group.kv_cache_spec.max_memory_usage_bytes(limits) for group in config.kv_cache_groups
    )
    per_block = config.kv_cache_groups[0].kv_cache_spec.page_size_bytes * layers_per_group
    return config.num_blocks / cdiv(per_request, per_block)


def gpu_kv_cache_tokens(config: KVCacheConfig) -> int:
    """vLLM's nominal token figure: blocks per group times the smallest block size."""
    return kv_cache_tokens(config.num_blocks, [group.kv_cache_spec.block_size for group in config.kv_cache_groups])


def kv_cache_tokens(num_blocks: int, group_block_sizes: Sequence[int]) -> int:
    """The "GPU KV cache size" of a pool of `num_blocks` shared by groups of these block sizes."""
    return num_blocks // len(group_block_sizes) * min(group_block_sizes)


def kv_bytes_per_token(specs: Mapping[str, KVCacheSpec]) -> float:
    """Bytes one token costs on one worker: each layer's page over its block size, summed
    (a Mamba layer's share is nominal: its page holds a whole request's state)."""
    return sum(spec.page_size_bytes / spec.block_size for spec in specs.values())


def _tokens_then_concurrency(config: KVCacheConfig, limits: SizingLimits) -> tuple[str, ...]:
    return (
        f"GPU KV cache size: {gpu_kv_cache_tokens(config):,} tokens",
        f"Maximum concurrency for {limits.max_model_len:,} tokens per request: "
        f"{max_concurrency(config, limits):.2f}x",
    )


# Release.kv_capacity_log -> the info lines that report the pool, verbatim
KV_CAPACITY_LOG: dict[KvCapacityLog, Callable[[KVCacheConfig, SizingLimits], tuple[str, ...]]] = {
    "tokens_then_concurrency": _tokens_then_concurrency,
}


def report_lines(config: KVCacheConfig, limits: SizingLimits, release: Release) -> tuple[str, ...]:
    return KV_CAPACITY_LOG[release.kv_capacity_log](config, limits)


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
    release: Release,
) -> tuple[int, str | None]:
    """The largest `max_model_len` every worker holds and vLLM's log line; 0 and no line when not
    even one token fits."""
    original = limits.max_model_len
    if all(not groups for groups in projected):
        return original, (
            f"Auto-fit max_model_len: attention-free model, using derived max_model_len={original}"
        )
    best, limiting_bytes = original, available[0]
    for groups, avail in zip(projected, available, strict=True):
        if groups:
            worker_best = estimate_max_model_len_from_groups(
                groups, avail - reserved_bytes(groups, release), limits, release)
            if worker_best < best:
                best, limiting_bytes = worker_best, avail
    if best <= 0:
        return 0, None
    if best >= original:
        return original, (
            f"Auto-fit max_model_len: full model context length {original} fits in available GPU memory"
        )
    return best, (
        f"Auto-fit max_model_len: reduced from {original} to {best} to fit in available GPU memory "
        f"({format_gib(limiting_bytes)} GiB available for KV cache)"
    )


def shrink_pool(config: KVCacheConfig, num_blocks: int) -> KVCacheConfig:
    """The same layers and layout with `num_blocks` blocks: every tensor shrinks in proportion."""
    old = config.num_blocks
    tensors = tuple(
        replace(tensor, size=tensor.size // old * num_blocks if old else 0)
        for tensor in config.kv_cache_tensors
    )
    return replace(config, num_blocks=num_blocks, kv_cache_tensors=tensors)


def size_kv_cache(
    worker_specs: Sequence[Mapping[str, KVCacheSpec]],
    available_bytes_per_worker: Sequence[int],
    limits: SizingLimits,
    num_gpu_blocks_override: int | None = None,
    auto_fit: bool = False,
    disable_hybrid_kv_cache_manager: bool = False,
    *,
    release: Release,
) -> SizingResult:
    """vLLM's `get_kv_cache_configs` and `_report_kv_cache_config` for these workers, as `release`
    computes them.

    `worker_specs` has one dict per worker (layer name -> spec, in model order) and
    `available_bytes_per_worker` the KV memory of each. `limits.max_model_len` is the model's
    derived length; with `auto_fit` it is reduced to what every worker holds."""
    if len(worker_specs) != len(available_bytes_per_worker):
        raise ValueError("one available-memory figure per worker is needed")
    grouping = get_kv_cache_groups(
        _merge_worker_specs(worker_specs), disable_hybrid_kv_cache_manager, release=release)
    projected = [project_groups(grouping.groups, specs) for specs in worker_specs]
    logs = list(grouping.logs)

    def refused(message: str, needed: tuple[int, ...], estimated: int | None = None) -> SizingResult:
        return SizingResult(
            fits=False, finding=message, max_model_len=limits.max_model_len, groups=grouping.groups,
            worker_configs=(), bytes_needed_per_worker=needed, estimated_max_model_len=estimated,
            log_lines=tuple(logs), worker_groups=tuple(projected),
        )

    if auto_fit:
        fitted_len, fit_log = _auto_fit_max_model_len(projected, available_bytes_per_worker, limits, release)
        if fit_log is None:
            needed = tuple(max_memory_usage_bytes_from_groups(groups, limits, release) for groups in projected)
            return refused(CANNOT_AUTO_FIT, needed)
        logs.append(fit_log)
        limits = replace(limits, max_model_len=fitted_len)

    needed = tuple(max_memory_usage_bytes_from_groups(groups, limits, release) for groups in projected)
    for groups, avail, need in zip(projected, available_bytes_per_worker, needed, strict=True):
        if not groups:
            continue

        def estimate(available: int, groups: Sequence[KVCacheGroupSpec] = groups) -> int:
            return estimate_max_model_len_from_groups(groups, available, limits, release)

        avail -= reserved_bytes(groups, release)
        finding = check_enough_kv_cache_memory(avail, need, limits.max_model_len, estimate)
        if finding is not None:
            return refused(finding, needed, estimate(avail) if 0 < avail < need else None)

    configs = []
    for groups, specs, avail in zip(projected, worker_specs, available_bytes_per_worker, strict=True):
        assert sum(len(group.layer_names) for group in groups) == len(specs), (
            "Some layers are not assigned to any group."
        )
        config, override_logs = kv_cache_config_from_groups(groups, avail, num_gpu_blocks_override)
        configs.append(config)
        logs.extend(override_logs)
    min_blocks = min(config.num_blocks for config in configs)
    configs = [shrink_pool(config, min_blocks) for config in configs]

    first = configs[0]
    if not first.kv_cache_groups:
        return SizingResult(
            fits=True, finding=None, max_model_len=limits.max_model_len, groups=grouping.groups,
            worker_configs=tuple(configs), bytes_needed_per_worker=needed, log_lines=tuple(logs),
            worker_groups=tuple(projected),
        )
    for config in configs:
        # vLLM logs these once (`info_once`): every worker prints the same two lines
        for line in report_lines(config, limits, release):
            if line not in logs:
                logs.append(line)
    return SizingResult(
        fits=True, finding=None, max_model_len=limits.max_model_len, groups=grouping.groups,
        worker_configs=tuple(configs), bytes_needed_per_worker=needed,
        gpu_kv_cache_tokens=gpu_kv_cache_tokens(first), max_concurrency=max_concurrency(first, limits),
        log_lines=tuple(logs), worker_groups=tuple(projected),
    )
