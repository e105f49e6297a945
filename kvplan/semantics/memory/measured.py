"""vLLM 0.34.0's measured KV-cache sizing (the extensible KV cache, `docs/vllm/changes-0.34.md` section 1):
which path sizes the cache, the utilization it resolves, and the arithmetic that turns the memory
measured after warmup and CUDA-graph capture into a block count. Pure: the terms come in as numbers
(measured on a GPU by `measure/cuda.py`, predicted by `usecases/measured_sizing.py`).

    sizing_path(release, *, kv_cache_memory_given, blocks_override_given, extensible) -> SizingPath
        KV_SIZING: the release's rule (0.34.0: measured on CUDA unless --kv-cache-memory,
        --num-gpu-blocks-override or --no-enable-extensible-kv-cache), with the flag that decides.
    default_utilization(release, path) -> float   the gpu_memory_utilization an unset one resolves to
    measured_kv_bytes(terms, release) -> bytes    `measure_kv_cache_bytes`:
        U      = I - F - C
        margin = max(1 GiB, 0.75 x P)
        avail  = max(min(R - U, F + C - margin) - max(P, G), 0)
    blocks_within(kv_bytes, segments) -> n        the most blocks whose committed footprint,
        sum over segments of round_up(n x stride, granule), fits in kv_bytes (capacity capped)
    measured_sizing(terms, segments, *, torch_reserved_bytes, release) -> MeasuredSizing
    memory_after_warmup_line / extended_line / withheld_warning: vLLM's lines, verbatim"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kvplan.semantics.releases import AutoFitPasses, KvSizing, MeasuredKvMargin, Release
from kvplan.units import format_gib, round_up

GIB = 1 << 30
# the driver's VMM granularity on CUDA GPUs; vLLM commits at least 2 MiB at a time (section 1.4)
COMMIT_GRANULE_BYTES = 2 << 20
# what the measured path leaves outside torch's caching allocator (`KV_CACHE_NON_TORCH_RESERVE_BYTES`, CUDA)
NON_TORCH_RESERVE_BYTES = 1 << 29
# an explicit utilization in (0.7, 1.0) that withholds at least this much is warned about
WITHHELD_WARNING_BYTES = 1 << 30

MEASURED: KvSizing = "measured_after_capture"
ESTIMATE: KvSizing = "profiled_estimate"


@dataclass(frozen=True)
class SizingPath:
    """Which path decides the block count, and why (the flag or setting that decides)."""

    kv_sizing: KvSizing
    reason: str

    @property
    def measured(self) -> bool:
        return self.kv_sizing == MEASURED


def _always_estimate(release: Release, kv_cache_memory_given: bool, blocks_override_given: bool,
                     extensible: bool | None) -> SizingPath:
    return SizingPath(ESTIMATE, f"vLLM {release.version} sizes the KV cache from the profile run's estimate "
                                "(requested - non-KV memory - CUDA-graph estimate)")


def _measured_unless_disabled(release: Release, kv_cache_memory_given: bool, blocks_override_given: bool,
                              extensible: bool | None) -> SizingPath:
    """`VllmConfig._resolve_extensible_kv_cache` on CUDA (section 1.1): on unless the KV memory or the
    block count is given, or the user turned it off."""
    estimate = ("0.33.0's path decides: requested (utilization 0.92 unless given) - non-KV memory - "
                "CUDA-graph estimate")
    if kv_cache_memory_given:
        return SizingPath(ESTIMATE, f"--kv-cache-memory turns the extensible KV cache off, so {estimate}")
    if blocks_override_given:
        return SizingPath(ESTIMATE, f"--num-gpu-blocks-override turns the extensible KV cache off, so {estimate}")
    if extensible is False:
        return SizingPath(ESTIMATE, f"--no-enable-extensible-kv-cache, so {estimate}")
    flag = "--enable-extensible-kv-cache" if extensible else "the extensible KV cache (on by default on CUDA)"
    return SizingPath(MEASURED, f"{flag}: the KV cache gets the memory measured free after warmup and CUDA-graph "
                                "capture, less max(1 GiB, 0.75 x transient peak) and max(transient peak, torch "
                                "reservation growth)")


# Release.kv_sizing -> which path sizes the KV cache for these settings
KV_SIZING: dict[KvSizing, Callable[[Release, bool, bool, bool | None], SizingPath]] = {
    "profiled_estimate": _always_estimate,
    "measured_after_capture": _measured_unless_disabled,
}


def sizing_path(release: Release, *, kv_cache_memory_given: bool, blocks_override_given: bool,
                extensible: bool | None = None) -> SizingPath:
    return KV_SIZING[release.kv_sizing](release, kv_cache_memory_given, blocks_override_given, extensible)


# Release.auto_fit_passes -> whether --max-model-len auto is fitted again after warmup, on the
# measured blocks (`finalize_extensible_kv_cache`, section 1.5)
AUTO_FIT_PASSES: dict[AutoFitPasses, Callable[[SizingPath], bool]] = {
    "once": lambda path: False,
    "twice_when_measured": lambda path: path.measured,
}


def refits_after_warmup(release: Release, path: SizingPath) -> bool:
    return AUTO_FIT_PASSES[release.auto_fit_passes](path)


def default_utilization(release: Release, path: SizingPath) -> float:
    """`CacheConfig.resolved_gpu_memory_utilization` of an unset value: the release's measured-path
    default there (1.0 in 0.34.0), its estimate-path default elsewhere."""
    if path.measured and release.measured_utilization is not None:
        return release.measured_utilization
    return release.gpu_memory_utilization


@dataclass(frozen=True)
class MeasuredTerms:
    """One worker's readings after warmup and CUDA-graph capture, in bytes (section 1.4)."""

    init_free_bytes: int              # I: free memory at start-up
    free_bytes: int                   # F: free memory now (after empty_cache)
    committed_bytes: int              # C: bytes committed to the KV cache now (the null block's granules)
    requested_bytes: int              # R: ceil(total x resolved utilization)
    transient_peak_bytes: int         # P: the largest allocated transient (profile run and sizing steps)
    torch_reserve_growth_bytes: int   # G: torch's reservation growth over a sizing step

    @property
    def resident_bytes(self) -> int:
        """U = I - F - C: everything resident except the KV prefix."""
        return self.init_free_bytes - self.free_bytes - self.committed_bytes

    @property
    def kept_bytes(self) -> int:
        """max(P, G): what is kept free in full for transient activations."""
        return max(self.transient_peak_bytes, self.torch_reserve_growth_bytes)


def _no_margin(peak: int) -> int:
    raise AssertionError("a release without the measured path has no measured margin")


# Release.measured_kv_margin -> the margin below the device headroom (CUDA; ROCm's floor is 3 GiB)
MEASURED_MARGIN: dict[MeasuredKvMargin, Callable[[int], int]] = {
    "none": _no_margin,
    "max_1gib_or_three_quarters_peak": lambda peak: max(GIB, int(peak * 0.75)),
}


def measured_margin(terms: MeasuredTerms, release: Release) -> int:
    return MEASURED_MARGIN[release.measured_kv_margin](terms.transient_peak_bytes)


def measured_kv_bytes(terms: MeasuredTerms, release: Release) -> int:
    """`measure_kv_cache_bytes`: the bytes the KV cache may occupy."""
    headroom = terms.free_bytes + terms.committed_bytes
    available = min(terms.requested_bytes - terms.resident_bytes, headroom - measured_margin(terms, release))
    return max(available - terms.kept_bytes, 0)


@dataclass(frozen=True)
class Segments:
    """The KV cache's layer segments (layer-outermost layout: one per layer region), each committed in
    granules, and the capacity the reservation holds."""

    strides: tuple[int, ...]          # bytes one block takes in each segment
    capacity_blocks: int              # the reservation's num_blocks (the capacity plan's)
    granule: int = COMMIT_GRANULE_BYTES

    @property
    def bytes_per_block(self) -> int:
        return sum(self.strides)

    def footprint(self, num_blocks: int) -> int:
        """Bytes a commit of `num_blocks` maps: each segment rounded up to whole granules."""
        return sum(round_up(num_blocks * stride, self.granule) for stride in self.strides)


def blocks_within(kv_bytes: int, segments: Segments) -> int:
    """`ExtensibleKVCache.blocks_within`: the most blocks (at most the capacity) whose footprint fits."""
    if not segments.strides:
        return 0
    num_blocks = min(kv_bytes // segments.bytes_per_block, segments.capacity_blocks)
    while num_blocks > 0 and segments.footprint(num_blocks) > kv_bytes:
        num_blocks -= 1
    return num_blocks


@dataclass(frozen=True)
class MeasuredSizing:
    """The measured path's result for one worker, with every term."""

    terms: MeasuredTerms
    segments: Segments
    margin_bytes: int
    kv_bytes: int                     # avail (no multimodal IPC reserve by default)
    num_blocks: int
    torch_limit_bytes: int            # what torch's caching allocator is capped at

    @property
    def footprint_bytes(self) -> int:
        return self.segments.footprint(self.num_blocks)

    @property
    def blocks_by_bytes(self) -> int:
        """kv // bytes_per_block, before the capacity cap and the granule rounding."""
        return self.kv_bytes // self.segments.bytes_per_block if self.segments.strides else 0


def measured_sizing(terms: MeasuredTerms, segments: Segments, *, torch_reserved_bytes: int,
                    release: Release) -> MeasuredSizing:
    """`measure_kv_cache_blocks`: the block count, and the cap torch's allocator gets
    (`memory_reserved + max(F - (footprint(n) - C) - 512 MiB, 0)`)."""
    kv_bytes = measured_kv_bytes(terms, release)
    num_blocks = blocks_within(kv_bytes, segments)
    left_free = terms.free_bytes - (segments.footprint(num_blocks) - terms.committed_bytes) - NON_TORCH_RESERVE_BYTES
    return MeasuredSizing(terms, segments, measured_margin(terms, release), kv_bytes, num_blocks,
                          torch_reserved_bytes + max(left_free, 0))


def memory_after_warmup_line(sizing: MeasuredSizing) -> str:
    """vLLM 0.34.0's INFO line of `measure_kv_cache_blocks`."""
    terms = sizing.terms
    return (
        f"Memory after warmup: {format_gib(terms.free_bytes)} GiB free, {format_gib(terms.committed_bytes)} GiB "
        f"committed to the KV cache, {format_gib(terms.kept_bytes)} GiB kept for transient activations "
        f"({format_gib(terms.transient_peak_bytes)} GiB allocated at peak, "
        f"{format_gib(terms.torch_reserve_growth_bytes)} GiB of torch reservation growth); {sizing.num_blocks} KV "
        f"cache blocks ({format_gib(sizing.num_blocks * sizing.segments.bytes_per_block)} GiB) fit within the "
        f"requested {format_gib(terms.requested_bytes)} GiB. Torch may reserve up to "
        f"{format_gib(sizing.torch_limit_bytes)} GiB."
    )


def extended_line(num_blocks: int, footprint_bytes: int) -> str:
    """`extend_kv_cache`'s INFO line (GiB to two places, as vLLM formats it there)."""
    return f"Extended KV cache to {num_blocks} blocks ({footprint_bytes / GIB:.2f} GiB)."


def withheld_warning(terms: MeasuredTerms, utilization: float, release: Release) -> str | None:
    """The WARNING of an explicit utilization in (0.7, 1.0) that keeps at least 1 GiB of free memory out
    of the KV cache (compared with a budget of all memory free at start-up); None otherwise."""
    if not 0.7 < utilization < 1.0:
        return None
    unbounded = MeasuredTerms(terms.init_free_bytes, terms.free_bytes, terms.committed_bytes, terms.init_free_bytes,
                              terms.transient_peak_bytes, terms.torch_reserve_growth_bytes)
    withheld = measured_kv_bytes(unbounded, release) - measured_kv_bytes(terms, release)
    if withheld < WITHHELD_WARNING_BYTES:
        return None
    return (
        f"gpu_memory_utilization={utilization} caps this instance at {format_gib(terms.requested_bytes)} GiB, "
        f"keeping {format_gib(withheld)} GiB of free device memory out of the KV cache. The extensible KV cache is "
        "sized from the memory measured after warmup and CUDA graph capture, so vLLM's own use needs no headroom "
        "below 1.0. Leave gpu_memory_utilization unset unless it leaves room for memory vLLM does not measure: "
        "other processes sharing the GPU (including ones that allocate on it later), the CPU on a unified-memory "
        "device, weight transfer buffers for weight updates, or a KV connector's own device buffers."
    )


def layer_segments(tensors: Sequence[tuple[int, int, int, int]], capacity_blocks: int) -> Segments:
    """The segments of a layer-outermost pool from its tensors' (offset, layers, layer stride, block
    stride): one per layer region (groups alias regions from byte 0, so a region counts once)."""
    strides: dict[int, int] = {}
    for offset, layers, layer_stride, block_stride in tensors:
        for index in range(layers):
            strides.setdefault(offset + index * layer_stride, block_stride)
    return Segments(tuple(strides[offset] for offset in sorted(strides)), capacity_blocks)
