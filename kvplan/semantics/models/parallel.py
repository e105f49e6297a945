"""How vLLM 0.17.1 splits decoder layers over pipeline stages (`distributed/utils.py::get_pp_indices`)."""

from __future__ import annotations

from kvplan.errors import KvplanError


def pp_layer_counts(num_layers: int, pp_size: int) -> list[int]:
    """Layers per stage: `num_layers // pp` each; the remainder goes one layer each to stages
    -2, -3, ... (never the last, the first only when the remainder is pp - 1).
    e.g. 32/3 -> [11, 11, 10], 61/4 -> [15, 15, 16, 15]."""
    if pp_size < 1:
        raise KvplanError(f"--pipeline-parallel-size must be at least 1, got {pp_size}")
    if pp_size > num_layers:
        raise KvplanError(f"--pipeline-parallel-size {pp_size} exceeds the model's {num_layers} layers")
    counts = [num_layers // pp_size] * pp_size
    for extra in range(num_layers % pp_size):
        counts[-2 - extra] += 1
    return counts


def pp_layer_ranges(num_layers: int, pp_size: int) -> list[range]:
    """The decoder-layer indices each pipeline stage instantiates."""
    ranges, start = [], 0
    for count in pp_layer_counts(num_layers, pp_size):
        ranges.append(range(start, start + count))
        start += count
    return ranges
