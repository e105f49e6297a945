"""Whether the weights alone fit the memory vLLM may use of one GPU, and how many GPUs of that
kind would hold them: the first thing to say when the KV cache gets no memory at all (a model of
627 GiB on one 80 GB GPU leaves the cache a negative budget, which is no answer to anyone).

    weights_alone(weights_total, weights_per_gpu, gpu_total, utilization) -> WeightsAlone | None"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvplan.units import format_gib


@dataclass(frozen=True)
class WeightsAlone:
    """The weights of one GPU are more than the memory vLLM may use of it."""

    per_gpu_bytes: int
    budget_bytes: int          # gpu_memory_utilization x the GPU's total
    gpus_needed: int           # the fewest GPUs of this kind whose budgets hold the weights
    parallel_size: int         # the smallest power of two at least that (tensor-parallel sizes are)

    def sentence(self, gpu: str) -> str:
        return (f"the weights alone do not fit: {format_gib(self.per_gpu_bytes)} GiB per GPU against the "
                f"{format_gib(self.budget_bytes)} GiB vLLM may use of one {gpu}; they need at least "
                f"{self.gpus_needed} GPUs of that kind before any KV cache (try -tp {self.parallel_size}, "
                f"or -tp/-pp with a product of {self.parallel_size} or more)")


def weights_alone(weights_total: int | None, weights_per_gpu: int | None, gpu_total: int | None,
                  utilization: float) -> WeightsAlone | None:
    """None unless the weights one GPU holds exceed `utilization` of its total memory."""
    if weights_total is None or weights_per_gpu is None or gpu_total is None or gpu_total <= 0:
        return None
    budget = int(gpu_total * utilization)
    if budget <= 0 or weights_per_gpu <= budget:
        return None
    needed = max(2, math.ceil(weights_total / budget))
    return WeightsAlone(weights_per_gpu, budget, needed, 1 << (needed - 1).bit_length())
