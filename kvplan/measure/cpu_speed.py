"""How fast this machine's CPU multiplies matrices, for the up-front estimate of `--backend cpu`:
its profile run is a real forward of the whole profile batch through every layer, which takes
minutes for a model of billions of parameters, and the user should know that before it starts."""

from __future__ import annotations

import time

SAMPLE_SIZE = 512        # square float32 matmuls, the kind of work a forward is made of
SAMPLE_SECONDS = 0.2


def matmul_flops_per_s(seconds: float = SAMPLE_SECONDS, size: int = SAMPLE_SIZE) -> float:
    """Floating-point operations per second of float32 matmuls on this CPU, timed for about `seconds`."""
    import torch

    a = torch.randn(size, size)
    b = torch.randn(size, size)
    torch.mm(a, b)                         # the first call pays for thread start-up
    runs, start = 0, time.perf_counter()
    while (elapsed := time.perf_counter() - start) < seconds or runs == 0:
        torch.mm(a, b)
        runs += 1
    return 2 * size**3 * runs / max(elapsed, 1e-9)


def forward_seconds(parameters: float, tokens: int, flops_per_s: float) -> float:
    """A dense forward's time: two operations per parameter per token (attention's own work, small
    beside the weights' at profile lengths, left out)."""
    return 2 * parameters * tokens / flops_per_s if flops_per_s > 0 else float("inf")
