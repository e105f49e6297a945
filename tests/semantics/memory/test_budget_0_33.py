"""vLLM 0.33.0's accounting (docs/vllm/changes-0.33.md §1.2, §1.3 and §1.5): non-KV memory is the drop in free
memory plus the transient peak, the CUDA-graph estimate leaves the budget, and the log lines name the
terms as 0.33.0 does."""

from __future__ import annotations

import math
from dataclasses import replace

from kvplan.semantics.memory.budget import (
    REDUNDANCY_BUFFER_BYTES,
    MemoryBudget,
    available_memory_lines,
    kv_cache_memory_suggestion,
    peak_activation_bytes,
)
from kvplan.semantics.releases import VLLM_0_17_1, VLLM_0_33_0

A100 = 85_094_825_984   # 79.25 GiB, the total of the published 0.31 log
GIB = 1 << 30
MIB = 1 << 20


def budget(**changes) -> MemoryBudget:
    """Weights 15 GiB, 260 MiB non-torch, a run that leaves 125 MiB allocated and peaks 1.33 GiB above
    what was allocated before it, and a 0.23 GiB graph estimate."""
    base = MemoryBudget(A100, A100, 0.92, weights_bytes=15 * GIB, activation_peak_bytes=1362 * MIB,
                        non_torch_bytes=260 * MIB, release=VLLM_0_33_0, cuda_graph_bytes=235 * MIB,
                        retained_bytes=125 * MIB)
    return replace(base, **changes)


def test_non_kv_is_consumed_plus_transient_peak_and_graphs_leave_the_budget():
    b = budget()
    assert b.total_consumed_bytes == 15 * GIB + 260 * MIB + 125 * MIB
    assert b.transient_peak_bytes == (1362 - 125) * MIB
    assert b.non_kv_bytes == b.total_consumed_bytes + b.transient_peak_bytes
    assert b.available_kv_bytes == math.ceil(A100 * 0.92) - b.non_kv_bytes - 235 * MIB
    # what the run leaves allocated is counted once: in consumed, not in the peak
    assert b.non_kv_bytes == 15 * GIB + 260 * MIB + 1362 * MIB


def test_a_measured_drop_in_free_memory_replaces_the_sum():
    b = budget(consumed_bytes=16 * GIB)
    assert b.total_consumed_bytes == 16 * GIB
    assert b.non_kv_bytes == 16 * GIB + b.transient_peak_bytes


def test_0_17_1_counts_the_same_terms_without_the_graph_pool():
    old = budget(release=VLLM_0_17_1, utilization=0.9)
    assert old.non_kv_bytes == 15 * GIB + 1362 * MIB + 260 * MIB
    assert old.available_kv_bytes == math.ceil(A100 * 0.9) - old.non_kv_bytes


def test_peak_activation_includes_the_applied_graph_estimate():
    assert peak_activation_bytes(budget()) == (1362 - 125) * MIB + 235 * MIB
    assert peak_activation_bytes(budget(release=VLLM_0_17_1)) == 1362 * MIB


def test_the_log_lines_follow_0_33_0():
    b = budget()
    available, graphs = available_memory_lines(b)
    assert available == f"Available KV cache memory: {round(b.available_kv_bytes / GIB, 2)} GiB"
    delta = 235 * MIB / A100
    assert graphs == (
        "CUDA graph memory profiling is enabled (default since v0.21.0). The current "
        f"--gpu-memory-utilization=0.9200 is equivalent to --gpu-memory-utilization={round(0.92 - delta, 4):.4f} "
        "without CUDA graph memory profiling. To maintain the same effective KV cache size as before, increase "
        f"--gpu-memory-utilization to {round(0.92 + delta, 4):.4f}. To disable, set "
        "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0."
    )
    suggestion = kv_cache_memory_suggestion(b, cuda_graph_bytes=240 * MIB)
    # vLLM's heuristic counts the graphs twice: in peak activation and as CUDAGraph memory
    non_kv = b.total_consumed_bytes + peak_activation_bytes(b) + 240 * MIB
    assert suggestion.to_requested_limit == math.ceil(A100 * 0.92) - non_kv - REDUNDANCY_BUFFER_BYTES
    assert (f"Actual usage is {round(b.total_consumed_bytes / GIB, 2)} GiB for consumed memory (weights + "
            f"non-torch), {round(peak_activation_bytes(b) / GIB, 2)} GiB for peak activation, and 0.23 GiB for "
            "CUDAGraph memory.") in suggestion.line


def test_no_graph_line_without_a_graph_estimate():
    assert len(available_memory_lines(budget(cuda_graph_bytes=0))) == 1
    assert len(available_memory_lines(budget(release=VLLM_0_17_1))) == 1
