"""The logged start-up's memory budget in kvplan's terms: the terms the log states (weights, peak
activation, non-torch or consumed memory, the CUDA-graph estimate) arranged so that the release's
formula gives back the logged available KV memory exactly. What the log rounds (every figure to
0.01 GiB) lands in one term, the one vLLM measures as a difference (non-torch in 0.17.1, consumed in
0.33.0): it is then "from the log", known to the rounding of the figures it is the rest of.

    logged_budget(log, total, utilization, release) -> MemoryBudget | None"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvplan.semantics.memory.budget import MemoryBudget, requested_memory
from kvplan.semantics.releases import NonKvMemory, Release
from kvplan.usecases.explain.log_reader import StartupLog


def logged_available(log: StartupLog) -> int | None:
    """The KV memory vLLM had: the size committed after warmup where the extensible KV cache
    measured it (0.34.0: "Extended KV cache to N blocks (X GiB)", "Memory after warmup"; its
    "Available KV cache memory" is then the reserved capacity), else "Available KV cache memory",
    else the figure of its memory-check error."""
    for measured in ("extended_kv", "measured_kv"):
        if log.figure(measured) is not None:
            return int(log.figure(measured))
    if log.figure("available_kv") is not None:
        return int(log.figure("available_kv"))
    if log.error is not None and log.error.kind == "max_model_len_too_large":
        return int(log.error.figures["available_bytes"])
    return None


def logged_graph_estimate(log: StartupLog, total: int, release: Release) -> int:
    """The CUDA-graph estimate the release takes from the budget, as logged: "Estimated CUDA graph
    memory", else the utilization it is equivalent to (4 decimals of the total), else 0."""
    if not release.cuda_graphs_in_budget or log.setting("graph_estimate_in_budget") is False:
        return 0
    if log.figure("graph_estimate") is not None:
        return int(log.figure("graph_estimate"))
    fraction = log.figure("graph_estimate_fraction")
    return 0 if fraction is None else round(fraction * total)


def _separate_terms(log: StartupLog, base: dict[str, Any], non_kv: int, release: Release) -> MemoryBudget:
    """0.17.1: non-KV = weights + peak + non-torch; non-torch takes the rest."""
    weights = int(log.figure("weights") or 0)
    peak = log.figure("peak_activation")
    if peak is None:
        peak = max(non_kv - weights - int(log.figure("non_torch") or 0), 0)
    return MemoryBudget(weights_bytes=weights, activation_peak_bytes=int(peak),
                        non_torch_bytes=non_kv - weights - int(peak), release=release, **base)


def _consumed_terms(log: StartupLog, base: dict[str, Any], non_kv: int, release: Release) -> MemoryBudget:
    """0.33.0: non-KV = consumed + transient peak, where vLLM logs peak activation as the transient
    peak plus the graph estimate; consumed takes the rest."""
    weights = int(log.figure("weights") or 0)
    graphs = base["cuda_graph_bytes"]
    logged_peak = log.figure("peak_activation")
    transient = max(int(logged_peak) - graphs, 0) if logged_peak is not None else int(log.figure("torch_peak") or 0)
    consumed = non_kv - transient
    return MemoryBudget(weights_bytes=weights, activation_peak_bytes=transient,
                        non_torch_bytes=max(consumed - weights, 0), consumed_bytes=consumed, release=release, **base)


# Release.non_kv_memory -> the logged terms as that release adds them up
LOGGED_TERMS: dict[NonKvMemory, Callable[[StartupLog, dict[str, Any], int, Release], MemoryBudget]] = {
    "weights_peak_non_torch": _separate_terms,
    "consumed_plus_transient_peak": _consumed_terms,
}


def logged_budget(log: StartupLog, total: int | None, utilization: float, release: Release) -> MemoryBudget | None:
    """The budget whose available KV memory is the logged one; None when the log gives no KV memory
    or the device's total is unknown."""
    available = logged_available(log)
    if available is None or total is None:
        return None
    requested = requested_memory(total, utilization)
    graphs = logged_graph_estimate(log, total, release)
    free = log.figure("free_at_start")
    base: dict[str, Any] = {"total_bytes": total, "free_at_start_bytes": int(free) if free is not None else total,
            "utilization": utilization, "cuda_graph_bytes": graphs}
    budget = LOGGED_TERMS[release.non_kv_memory](log, base, requested - available - graphs, release)
    assert budget.available_kv_bytes == available, "the logged terms add up to the logged KV memory"
    return budget
