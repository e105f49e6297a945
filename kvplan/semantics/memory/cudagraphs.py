"""The CUDA graphs vLLM captures, and how vLLM 0.33.0 estimates their pool before the KV cache exists
(docs/vllm/changes-0.33.md §1.3 and §5).

    capture_sizes(max_num_seqs, max_num_batched_tokens, capability, *, release) -> sizes, ascending
        `VllmConfig._set_cudagraph_sizes` with the release's defaults (CAPTURE_SIZES).
    capture_plan(max_num_seqs, max_num_batched_tokens, capability, *, release) -> CapturePlan
        The graphs `capture_model` records with the default cudagraph mode FULL_AND_PIECEWISE:
        a PIECEWISE graph per capture size, a FULL graph per uniform-decode size.
    extrapolate_graph_pool(plan, piecewise_samples, full_samples) -> bytes
        0.33.0's V2 estimator (`profile_cudagraph_memory`): PIECEWISE graphs measured in full, the
        FULL graphs extrapolated from the two largest, `s0 + (n - 1) x max(s1, 1 MiB)`.

kvplan cannot capture vLLM's graphs without vLLM; on a GPU it captures the model's own forward the
same way (measure/cuda.py), and without one it predicts each capture's memory (usecases/profile.py,
the method is in docs/accuracy.md)."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from kvplan.semantics.releases import CudagraphCaptureSizes, Release

# vLLM's floor for the extrapolated per-graph cost (driver overhead per graph)
MIN_PER_GRAPH_BYTES = 1 << 20
# FULL graphs captured while profiling; the rest are extrapolated from them
FULL_GRAPH_PROFILING_SAMPLES = 2
# the SM100 family (B200, B300, GB200) captures up to 1024 tokens in 0.33.0
SM100_FAMILY = 10


def _grid(max_size: int) -> list[int]:
    """1, 2, 4, multiples of 8 below 256, then multiples of 16 up to `max_size`."""
    sizes = [size for size in (1, 2, 4) if size <= max_size]
    if max_size >= 8:
        sizes += list(range(8, min(max_size + 1, 256), 8))
    if max_size >= 256:
        sizes += list(range(256, max_size + 1, 16))
    return sizes


def _up_to_512(max_num_seqs: int, max_num_batched_tokens: int, capability: tuple[int, int] | None) -> list[int]:
    """0.17.1: the grid up to min(2 x max_num_seqs, 512, max_num_batched_tokens)."""
    return _grid(min(max_num_seqs * 2, 512, max_num_batched_tokens))


def _up_to_1024_on_sm100(max_num_seqs: int, max_num_batched_tokens: int,
                         capability: tuple[int, int] | None) -> list[int]:
    """0.33.0: a 1024 ceiling on the SM100 family, max_num_batched_tokens added when it fits, and the
    uniform-decode size max_num_seqs when it fits the ceiling."""
    ceiling = 1024 if capability is not None and capability[0] == SM100_FAMILY else 512
    largest = min(max_num_seqs * 2, ceiling)
    decode = [max_num_seqs] if max_num_seqs <= largest else []
    largest = min(max_num_batched_tokens, largest)
    sizes = _grid(largest)
    if max_num_batched_tokens <= largest:
        sizes.append(max_num_batched_tokens)
    sizes += [size for size in decode if size <= max_num_batched_tokens]
    return sorted(set(sizes))


# 0.34.0's SM100 defaults (docs/vllm/changes-0.34.md section 3): PIECEWISE graphs up to this many tokens,
# uniform-decode graphs up to this many tokens
SM100_MAX_PREFILL_GRAPH_TOKENS = 8192
SM100_MAX_DECODE_GRAPH_TOKENS = 8192


def _walk_grid(limit: int, step: Callable[[int], float]) -> list[int]:
    """Sizes from 1 up to `limit` (included), each the next multiple of the largest power of two not
    above `step(size)` (vLLM 0.34.0's `_walk_grid`)."""
    grid, size = [], 1
    while size < limit:
        grid.append(size)
        stride = 1 << max(0, math.floor(math.log2(max(1.0, step(size)))))
        size = (size // stride + 1) * stride
    return [*grid, limit] if limit else []


def prefill_grid(max_tokens: int) -> list[int]:
    """0.34.0's token grid of PIECEWISE graphs: 1, 2, 4, every 8 to 64, four per doubling to 1024,
    then every 256 and every 512 once 7 % of the size passes 512 (54 sizes at 8192)."""
    return _walk_grid(max_tokens, lambda t: min(t, max(8, t / 4), 0.07 * max(t, 4096)))


def decode_grid(max_requests: int) -> list[int]:
    """0.34.0's request grid of FULL decode graphs: every count to 6, then the largest power of two
    not above 0.65 x n^(2/3) as the step (64 sizes at 1024)."""
    return _walk_grid(max_requests, lambda n: 0.65 * n ** (2 / 3))


def _is_sm100(capability: tuple[int, int] | None) -> bool:
    return capability is not None and capability[0] == SM100_FAMILY


def _split_grids_on_sm100(max_num_seqs: int, max_num_batched_tokens: int,
                          capability: tuple[int, int] | None) -> list[int]:
    """0.34.0: every graph's token count (`cudagraph_capture_sizes` after resolution): the prefill and
    decode grids on the SM100 family, 0.33.0's shared list elsewhere."""
    plan = _split_plan(max_num_seqs, max_num_batched_tokens, capability)
    return sorted({*plan.piecewise, *plan.full})


# Release.cudagraph_capture_sizes -> `_set_cudagraph_sizes`
CAPTURE_SIZES: dict[CudagraphCaptureSizes, Callable[[int, int, tuple[int, int] | None], list[int]]] = {
    "up_to_512": _up_to_512,
    "up_to_1024_on_sm100_with_batch_limits": _up_to_1024_on_sm100,
    "split_grids_on_sm100": _split_grids_on_sm100,
}


def capture_sizes(max_num_seqs: int, max_num_batched_tokens: int, capability: tuple[int, int] | None, *,
                  release: Release) -> tuple[int, ...]:
    return tuple(CAPTURE_SIZES[release.cudagraph_capture_sizes](max_num_seqs, max_num_batched_tokens, capability))


@dataclass(frozen=True)
class CapturePlan:
    """The graphs of FULL_AND_PIECEWISE: PIECEWISE at every capture size (mixed batches), FULL at the
    capture sizes a uniform decode batch of at most max_num_seqs requests takes. Largest first, the
    order vLLM captures them in."""

    piecewise: tuple[int, ...]
    full: tuple[int, ...]

    @property
    def num_graphs(self) -> int:
        return len(self.piecewise) + len(self.full)


def _shared_plan(sizes: Sequence[int], max_num_seqs: int) -> CapturePlan:
    """One list for both kinds: PIECEWISE at every size, FULL at the sizes a decode batch takes."""
    descending = tuple(sorted(sizes, reverse=True))
    return CapturePlan(piecewise=descending, full=tuple(size for size in descending if size <= max_num_seqs))


def _split_plan(max_num_seqs: int, max_num_batched_tokens: int, capability: tuple[int, int] | None) -> CapturePlan:
    """0.34.0's `_split_cudagraph_capture_sizes` with no size set by the user and one-token decode: on
    SM100 the prefill grid to min(8192, max_num_batched_tokens) and the decode grid to max_num_seqs
    (each decode graph at most 8192 tokens); elsewhere 0.33.0's shared list for both kinds."""
    if not _is_sm100(capability):
        return _shared_plan(_up_to_1024_on_sm100(max_num_seqs, max_num_batched_tokens, capability), max_num_seqs)
    prefill = prefill_grid(min(SM100_MAX_PREFILL_GRAPH_TOKENS, max_num_batched_tokens))
    decode = [size for size in decode_grid(max_num_seqs) if size <= SM100_MAX_DECODE_GRAPH_TOKENS]
    return CapturePlan(piecewise=tuple(sorted(prefill, reverse=True)), full=tuple(sorted(decode, reverse=True)))


# Release.cudagraph_capture_sizes -> the graphs `capture_model` records
CAPTURE_PLANS: dict[CudagraphCaptureSizes, Callable[[int, int, tuple[int, int] | None], CapturePlan]] = {
    "up_to_512": lambda seqs, tokens, capability: _shared_plan(_up_to_512(seqs, tokens, capability), seqs),
    "up_to_1024_on_sm100_with_batch_limits":
        lambda seqs, tokens, capability: _shared_plan(_up_to_1024_on_sm100(seqs, tokens, capability), seqs),
    "split_grids_on_sm100": _split_plan,
}


def capture_plan(max_num_seqs: int, max_num_batched_tokens: int, capability: tuple[int, int] | None, *,
                 release: Release) -> CapturePlan:
    return CAPTURE_PLANS[release.cudagraph_capture_sizes](max_num_seqs, max_num_batched_tokens, capability)


def extrapolate_full_graphs(samples: Sequence[int], num_full: int) -> int:
    """`_extrapolate_full_graph_memory`: the first capture sets the pool, later ones add their own
    cost, taken as the second sample's (at least 1 MiB)."""
    if not samples or num_full == 0:
        return 0
    per_graph = max(samples[1], MIN_PER_GRAPH_BYTES) if len(samples) > 1 else 0
    return samples[0] + (num_full - 1) * per_graph


def extrapolate_graph_pool(plan: CapturePlan, piecewise_samples: Sequence[int], full_samples: Sequence[int]) -> int:
    """0.33.0's estimate: every PIECEWISE capture measured, FULL extrapolated from its samples."""
    return max(sum(piecewise_samples) + extrapolate_full_graphs(full_samples, len(plan.full)), 0)


def extrapolate_from_largest(plan: CapturePlan, samples: Sequence[int]) -> int:
    """The estimate from the two largest captures alone (V1's `profile_cudagraph_memory`, the method
    kvplan uses on a GPU): the first sets the pool, every other graph costs the second's."""
    if not samples:
        return 0
    per_graph = max(samples[1], MIN_PER_GRAPH_BYTES) if len(samples) > 1 else MIN_PER_GRAPH_BYTES
    return samples[0] + (plan.num_graphs - 1) * per_graph


def graph_output_bytes(num_tokens: int, hidden_size: int, dtype_bytes: int) -> int:
    """What one more captured graph keeps in the pool, at least vLLM's per-graph floor: its static
    output (the hidden states of `num_tokens` tokens), the buffers before it being reused."""
    return max(num_tokens * hidden_size * dtype_bytes, MIN_PER_GRAPH_BYTES)


def predicted_samples(plan: CapturePlan, largest_forward_peak: int, hidden_size: int,
                      dtype_bytes: int) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """The captures' memory without a GPU: the largest PIECEWISE graph takes its forward's activation
    peak; every later graph (PIECEWISE, then the FULL samples, whose activations fit the pool
    already there) adds its output."""
    piecewise = tuple(
        largest_forward_peak if index == 0 else graph_output_bytes(size, hidden_size, dtype_bytes)
        for index, size in enumerate(plan.piecewise)
    )
    full = tuple(graph_output_bytes(size, hidden_size, dtype_bytes)
                 for size in plan.full[:FULL_GRAPH_PROFILING_SAMPLES])
    return piecewise, full


@dataclass(frozen=True)
class CudaGraphEstimate:
    """The CUDA-graph pool a release takes from the KV budget, and how kvplan arrived at it."""

    bytes: int
    method: str                       # "measured", "predicted" or "given"
    how: str
    plan: CapturePlan | None = None
