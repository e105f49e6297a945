"""vLLM's memory accounting, from the start-up snapshot to the KV-cache budget
(`vllm-kv-semantics.md` sections 2.1, 2.2, 2.4 and 2.5), and the log lines that report it.

    requested = ceil(total * gpu_memory_utilization)          (refused if free < requested)
    non_kv    = the release's formula; 0.17.1: weights + torch peak increase + non-torch increase
    available = requested - non_kv                            (or --kv-cache-memory as given)

What 0.17.1 does not count sits outside `requested`: the CUDA context (created before the
snapshot) and the CUDA-graph pool (captured after the KV cache is allocated); a release whose
`cuda_graphs_in_budget` is set takes the graph pool from the budget instead."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

from kvplan.semantics.releases import NonKvMemory, Release, default_release
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
    from the budget only by a release whose `cuda_graphs_in_budget` is set."""

    total_bytes: int
    free_at_start_bytes: int
    utilization: float
    weights_bytes: int
    activation_peak_bytes: int
    non_torch_bytes: int
    kv_cache_memory_override: int | None = None
    release: Release = field(default_factory=default_release)
    cuda_graph_bytes: int = 0

    @property
    def requested_bytes(self) -> int:
        return requested_memory(self.total_bytes, self.utilization)

    @property
    def non_kv_bytes(self) -> int:
        return NON_KV_MEMORY[self.release.non_kv_memory](self)

    @property
    def profiled_available_bytes(self) -> int:
        graphs = self.cuda_graph_bytes if self.release.cuda_graphs_in_budget else 0
        return self.requested_bytes - self.non_kv_bytes - graphs

    @property
    def available_kv_bytes(self) -> int:
        """What vLLM hands to the sizing functions (may be negative: nothing fits)."""
        if self.kv_cache_memory_override is not None:
            return self.kv_cache_memory_override
        return self.profiled_available_bytes


def _weights_peak_non_torch(budget: MemoryBudget) -> int:
    return budget.weights_bytes + budget.activation_peak_bytes + budget.non_torch_bytes


# Release.non_kv_memory -> how the profile run's terms add up to non-KV memory
NON_KV_MEMORY: dict[NonKvMemory, Callable[[MemoryBudget], int]] = {
    "weights_peak_non_torch": _weights_peak_non_torch,
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
    return (f"Available KV cache memory: {format_gib(budget.available_kv_bytes)} GiB",)


@dataclass(frozen=True)
class KvCacheMemorySuggestion:
    """`compile_or_warm_up_model`'s advice once CUDA graphs are known (logged at debug level)."""

    to_requested_limit: int
    to_gpu_limit: int
    line: str


def kv_cache_memory_suggestion(budget: MemoryBudget, cuda_graph_bytes: int) -> KvCacheMemorySuggestion:
    non_kv = budget.non_kv_bytes + cuda_graph_bytes
    to_gpu = budget.free_at_start_bytes - non_kv - REDUNDANCY_BUFFER_BYTES
    to_requested = budget.requested_bytes - non_kv - REDUNDANCY_BUFFER_BYTES
    line = (
        f"Free memory on device ({format_gib(budget.free_at_start_bytes)}/{format_gib(budget.total_bytes)} "
        f"GiB) on startup. Desired GPU memory utilization is ({budget.utilization}, "
        f"{format_gib(budget.requested_bytes)} GiB). Actual usage is {format_gib(budget.weights_bytes)} "
        f"GiB for weight, {format_gib(budget.activation_peak_bytes)} GiB for peak activation, "
        f"{format_gib(budget.non_torch_bytes)} GiB for non-torch memory, and {format_gib(cuda_graph_bytes)} "
        f"GiB for CUDAGraph memory. Replace gpu_memory_utilization config with `--kv-cache-memory="
        f"{to_requested}` ({format_gib(to_requested)} GiB) to fit into requested memory, or "
        f"`--kv-cache-memory={to_gpu}` ({format_gib(to_gpu)} GiB) to fully utilize gpu memory. Current kv "
        f"cache memory in use is {format_gib(budget.available_kv_bytes)} GiB."
    )
    return KvCacheMemorySuggestion(to_requested, to_gpu, line)


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
