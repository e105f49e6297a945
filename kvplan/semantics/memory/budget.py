"""vLLM's memory accounting, from the start-up snapshot to the KV-cache budget
(docs/vllm/kv-semantics.md §2.1, §2.2, §2.4 and §2.5; docs/vllm/changes-0.33.md §1), and the
log lines that report it.

    requested = ceil(total * gpu_memory_utilization)          (refused if free < requested)
    non_kv    = the release's formula (NON_KV_MEMORY):
                0.17.1: weights + torch peak increase + non-torch increase
                0.33.0: total consumed (the drop in free memory from start-up to after the profile
                        run: weights, non-torch and what the run left allocated) + transient peak
                        (the run's peak above what stays allocated)
    available = requested - non_kv - (the CUDA-graph pool, where `cuda_graphs_in_budget`)
                                                              (or --kv-cache-memory as given)

What 0.17.1 does not count sits outside `requested`: the CUDA context (created before the
snapshot) and the CUDA-graph pool (captured after the KV cache is allocated); 0.33.0 estimates the
graph pool before the KV cache exists and takes it from the budget."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from kvplan.semantics.releases import NEWEST_RELEASE, KvSizing, LogFormat, NonKvMemory, Release
from kvplan.units import format_gib

# vLLM's margin in its --kv-cache-memory suggestion: "memory profiling may slightly underestimate"
REDUNDANCY_BUFFER_BYTES = 150 * (1 << 20)


def requested_memory(total_bytes: int, utilization: float) -> int:
    """`request_memory`: the float product rounded up, exactly as vLLM computes it."""
    return math.ceil(total_bytes * utilization)


def startup_refusal(free_bytes: int, total_bytes: int, utilization: float, device: str) -> str | None:
    """vLLM's error when free memory at start-up is below `requested`, else None."""
    requested = requested_memory(total_bytes, utilization)
    if free_bytes >= requested:
        return None
    return (
        f"Free memory on device {device} ({format_gib(free_bytes)}/{format_gib(total_bytes)} GiB) on "
        f"startup is less than desired GPU memory utilization ({utilization}, {format_gib(requested)} GiB). "
        "Decrease GPU memory utilization or reduce GPU memory used by other processes."
    )


@dataclass(frozen=True)
class MemoryBudget:
    """One worker's budget, in bytes, as `release` accounts it. `kv_cache_memory_override` is
    `--kv-cache-memory`; `cuda_graph_bytes` is the CUDA-graph pool (known or estimated), taken
    from the budget only by a release whose `cuda_graphs_in_budget` is set.

    `activation_peak_bytes` is the profile run's peak above what was allocated before it;
    `retained_bytes` what the run leaves allocated (persistent buffers), so that the transient peak
    0.33.0 counts is `activation_peak_bytes - retained_bytes`. `consumed_bytes` is 0.33.0's total
    consumed as measured (the drop in free memory); None where it is not measured: weights + non-torch
    + the model runner's state (`runner_state_bytes`, allocated after start-up and kept) + retained."""

    total_bytes: int
    free_at_start_bytes: int
    utilization: float
    weights_bytes: int
    activation_peak_bytes: int
    non_torch_bytes: int
    kv_cache_memory_override: int | None = None
    release: Release = NEWEST_RELEASE
    cuda_graph_bytes: int = 0
    retained_bytes: int = 0
    consumed_bytes: int | None = None
    runner_state_bytes: int = 0
    # the path that sizes the cache (semantics/memory/measured.py): on 0.34.0's measured path the budget
    # is the reservation's capacity, and the graphs are measured in the free memory, not estimated
    kv_sizing: KvSizing = "profiled_estimate"

    @property
    def total_consumed_bytes(self) -> int:
        """0.33.0's "consumed memory (weights + non-torch)"."""
        if self.consumed_bytes is not None:
            return self.consumed_bytes
        return self.weights_bytes + self.non_torch_bytes + self.runner_state_bytes + self.retained_bytes

    @property
    def transient_peak_bytes(self) -> int:
        """0.33.0's transient peak headroom: the run's peak above what stays allocated after it."""
        return self.activation_peak_bytes - self.retained_bytes

    @property
    def cuda_graph_budget_bytes(self) -> int:
        """The CUDA-graph pool the release takes from the KV budget (none on the measured path, where
        `profile_cudagraph_memory` returns 0)."""
        taken = self.release.cuda_graphs_in_budget and GRAPH_ESTIMATE_TAKEN[self.kv_sizing]
        return self.cuda_graph_bytes if taken else 0

    @property
    def requested_bytes(self) -> int:
        return requested_memory(self.total_bytes, self.utilization)

    @property
    def non_kv_bytes(self) -> int:
        return NON_KV_MEMORY[self.release.non_kv_memory](self)

    @property
    def profiled_available_bytes(self) -> int:
        return self.requested_bytes - self.non_kv_bytes - self.cuda_graph_budget_bytes

    @property
    def available_kv_bytes(self) -> int:
        """What vLLM hands to the sizing functions (may be negative: nothing fits)."""
        if self.kv_cache_memory_override is not None:
            return self.kv_cache_memory_override
        return self.profiled_available_bytes


# the sizing path -> whether the CUDA-graph estimate is taken from the budget (docs/vllm/changes-0.34.md 1.3)
GRAPH_ESTIMATE_TAKEN: dict[KvSizing, bool] = {"profiled_estimate": True, "measured_after_capture": False}


def _weights_peak_non_torch(budget: MemoryBudget) -> int:
    return budget.weights_bytes + budget.activation_peak_bytes + budget.non_torch_bytes


def _consumed_plus_transient_peak(budget: MemoryBudget) -> int:
    return budget.total_consumed_bytes + budget.transient_peak_bytes


# Release.non_kv_memory -> how the profile run's terms add up to non-KV memory
NON_KV_MEMORY: dict[NonKvMemory, Callable[[MemoryBudget], int]] = {
    "weights_peak_non_torch": _weights_peak_non_torch,
    "consumed_plus_transient_peak": _consumed_plus_transient_peak,
}


def model_loading_line(weights_bytes: int) -> str:
    """vLLM's line without its seconds: kvplan's own build time predicts nothing about vLLM's load."""
    return f"Model loading took {format_gib(weights_bytes)} GiB memory"


def available_memory_lines(budget: MemoryBudget) -> tuple[str, ...]:
    """What `determine_available_memory` logs."""
    if budget.kv_cache_memory_override is not None:
        return (
            f"Initial free memory {format_gib(budget.free_at_start_bytes)} GiB, reserved "
            f"{format_gib(budget.kv_cache_memory_override)} GiB memory for KV Cache as specified by "
            "kv_cache_memory_bytes config and skipped memory profiling. This does not respect the "
            "gpu_memory_utilization config. Only use kv_cache_memory_bytes config when you want manual "
            "control of KV cache memory size. If OOM'ed, check the difference of initial free memory "
            "between the current run and the previous run where kv_cache_memory_bytes is suggested and "
            "update it correspondingly.",
        )
    lines = [f"Available KV cache memory: {format_gib(budget.available_kv_bytes)} GiB"]
    graphs = budget.cuda_graph_budget_bytes
    if graphs > 0:
        # 0.33.0's INFO line once the estimate is taken from the budget
        utilization = budget.utilization
        delta = graphs / budget.total_bytes
        lines.append(
            "CUDA graph memory profiling is enabled (default since v0.21.0). The current "
            f"--gpu-memory-utilization={utilization:.4f} is equivalent to --gpu-memory-utilization="
            f"{round(utilization - delta, 4):.4f} without CUDA graph memory profiling. To maintain the same "
            f"effective KV cache size as before, increase --gpu-memory-utilization to "
            f"{min(round(utilization + delta, 4), 1.0):.4f}. To disable, set "
            "VLLM_MEMORY_PROFILER_ESTIMATE_CUDAGRAPHS=0."
        )
    return tuple(lines)


@dataclass(frozen=True)
class KvCacheMemorySuggestion:
    """`compile_or_warm_up_model`'s advice once CUDA graphs are known, and the level vLLM logs it at."""

    to_requested_limit: int
    to_gpu_limit: int
    line: str
    log_level: str


def _usage_by_term(budget: MemoryBudget, cuda_graph_bytes: int) -> tuple[int, str]:
    """0.17.1: non-KV = weights + peak + non-torch + graphs, each named."""
    return budget.non_kv_bytes + cuda_graph_bytes, (
        f"Actual usage is {format_gib(budget.weights_bytes)} GiB for weight, "
        f"{format_gib(budget.activation_peak_bytes)} GiB for peak activation, "
        f"{format_gib(budget.non_torch_bytes)} GiB for non-torch memory, and {format_gib(cuda_graph_bytes)} "
        "GiB for CUDAGraph memory."
    )


def _usage_consumed(budget: MemoryBudget, cuda_graph_bytes: int) -> tuple[int, str]:
    """0.33.0: consumed + peak activation (which includes the applied graph estimate) + the graphs
    (so the estimate counts twice: vLLM's heuristic, repeated)."""
    peak = peak_activation_bytes(budget)
    return budget.total_consumed_bytes + peak + cuda_graph_bytes, (
        f"Actual usage is {format_gib(budget.total_consumed_bytes)} GiB for consumed memory (weights + non-torch), "
        f"{format_gib(peak)} GiB for peak activation, and {format_gib(cuda_graph_bytes)} GiB for CUDAGraph memory."
    )


# Release.log_format -> the usage sentence of the --kv-cache-memory suggestion and its non-KV sum
USAGE_LINE: dict[LogFormat, Callable[[MemoryBudget, int], tuple[int, str]]] = {
    "separate_capacity_lines": _usage_by_term,
    "merged_capacity_line": _usage_consumed,
    "merged_capacity_line_after_warmup": _usage_consumed,   # unchanged in form (docs/vllm/changes-0.34.md 1.7)
}


# Release.non_kv_memory -> what vLLM logs as peak activation
PEAK_ACTIVATION: dict[NonKvMemory, Callable[[MemoryBudget], int]] = {
    "weights_peak_non_torch": lambda budget: budget.activation_peak_bytes,
    # 0.33.0: the transient peak plus the CUDA-graph estimate taken from the budget
    "consumed_plus_transient_peak": lambda budget: budget.transient_peak_bytes + budget.cuda_graph_budget_bytes,
}


def peak_activation_bytes(budget: MemoryBudget) -> int:
    return PEAK_ACTIVATION[budget.release.non_kv_memory](budget)


# Release.log_format -> the level `compile_or_warm_up_model` logs the suggestion at (0.17.1: debug,
# shown only with VLLM_LOGGING_LEVEL=DEBUG)
SUGGESTION_LOG_LEVEL: dict[LogFormat, str] = {
    "separate_capacity_lines": "DEBUG",
    "merged_capacity_line": "INFO",
    "merged_capacity_line_after_warmup": "INFO",
}


def logs_kv_cache_memory_suggestion(budget: MemoryBudget, kv_cache_created: bool) -> bool:
    """Whether vLLM reaches the suggestion: `compile_or_warm_up_model` runs only once the KV cache
    exists (`get_kv_cache_configs` raised otherwise: no memory for the cache blocks, or too little
    for one max_model_len request), and it logs the suggestion only after a memory profile, that is
    without --kv-cache-memory."""
    return kv_cache_created and budget.kv_cache_memory_override is None


def kv_cache_memory_suggestion(budget: MemoryBudget, cuda_graph_bytes: int) -> KvCacheMemorySuggestion:
    """`compile_or_warm_up_model`'s advice once CUDA graphs are known (0.17.1: debug, 0.33.0: INFO);
    `logs_kv_cache_memory_suggestion` says whether vLLM gets that far."""
    non_kv, usage = USAGE_LINE[budget.release.log_format](budget, cuda_graph_bytes)
    to_gpu = budget.free_at_start_bytes - non_kv - REDUNDANCY_BUFFER_BYTES
    to_requested = budget.requested_bytes - non_kv - REDUNDANCY_BUFFER_BYTES
    line = (
        f"Free memory on device ({format_gib(budget.free_at_start_bytes)}/{format_gib(budget.total_bytes)} "
        f"GiB) on startup. Desired GPU memory utilization is ({budget.utilization}, "
        f"{format_gib(budget.requested_bytes)} GiB). {usage} Replace gpu_memory_utilization config with "
        f"`--kv-cache-memory={to_requested}` ({format_gib(to_requested)} GiB) to fit into requested memory, or "
        f"`--kv-cache-memory={to_gpu}` ({format_gib(to_gpu)} GiB) to fully utilize gpu memory. Current kv "
        f"cache memory in use is {format_gib(budget.available_kv_bytes)} GiB."
    )
    return KvCacheMemorySuggestion(to_requested, to_gpu, line, SUGGESTION_LOG_LEVEL[budget.release.log_format])


def utilization_for(total_bytes: int, non_kv_bytes: int, kv_bytes: int, decimals: int = 4) -> float | None:
    """The smallest `gpu_memory_utilization` (to `decimals` places) that leaves `kv_bytes` for the
    KV cache after `non_kv_bytes`; None when even 1.0 does not."""
    scale = 10**decimals
    low = math.ceil((non_kv_bytes + kv_bytes) / total_bytes * scale)
    # the float product decides, so step from just below the estimate to the first value that fits
    for step in range(max(low - 2, 1), scale + 1):
        utilization = step / scale
        if requested_memory(total_bytes, utilization) - non_kv_bytes >= kv_bytes:
            return utilization
    return None
