"""Step-time models: how long one scheduler step takes, so that steps become (estimated) seconds.

Every figure derived from these models is an estimate and is labelled so in every output.

* ``ConstantStepTime``: every step takes the same time (``--step-time-ms``, ``timing.step_time_ms``).
* ``CalibratedStepTime``: piecewise-linear in the step's scheduled tokens, through points timed
  on a real GPU (``timing.calibration``, or the calibration a profile carries).
* ``RooflineStepTime``: the default when the model is known. A step reads the weights once and
  the KV cache of every scheduled request's context, and does 2 FLOPs per parameter per
  scheduled token; its time is the larger of bytes over memory bandwidth and FLOPs over peak
  bf16 throughput, plus a fixed per-step overhead. Attention FLOPs are not counted, so long
  prefills are optimistic.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kvplan.errors import KvplanError

if TYPE_CHECKING:
    from kvplan.usecases.simulate.engine_source import ModelFacts
    from kvplan.usecases.simulate.workload import TimingSpec

DEFAULT_OVERHEAD_MS = 2.0
BYTES_PER_PARAM_ASSUMED = 2  # bf16 weights: parameters = weights_bytes / 2


@dataclass(frozen=True)
class StepLoad:
    """What a step does: tokens computed, context tokens whose KV is read, requests in the batch."""

    num_tokens: int
    context_tokens: int
    num_requests: int


class StepTimeModel(Protocol):
    def seconds(self, load: StepLoad) -> float: ...


@dataclass(frozen=True)
class ConstantStepTime:
    step_s: float
    source: str

    def seconds(self, load: StepLoad) -> float:
        return self.step_s


@dataclass(frozen=True)
class CalibratedStepTime:
    """Measured (tokens, seconds) points, sorted by tokens, at least one."""

    points: tuple[tuple[int, float], ...]
    source: str

    def seconds(self, load: StepLoad) -> float:
        tokens = [t for t, _ in self.points]
        if len(self.points) == 1 or load.num_tokens <= tokens[0]:
            return self.points[0][1]
        # interpolate inside the measured range, extrapolate along the last segment beyond it
        index = min(bisect.bisect_left(tokens, load.num_tokens), len(tokens) - 1)
        (t0, s0), (t1, s1) = self.points[index - 1], self.points[index]
        return max(0.0, s0 + (s1 - s0) * (load.num_tokens - t0) / (t1 - t0))


@dataclass(frozen=True)
class RooflineStepTime:
    weights_bytes: int
    kv_bytes_per_token: int
    bandwidth_bytes_per_s: float
    flops_per_s: float
    overhead_s: float
    gpu: str

    def seconds(self, load: StepLoad) -> float:
        if load.num_tokens == 0:
            return self.overhead_s
        # attention reads every context token's KV; the new tokens' KV is written as well
        moved = self.weights_bytes + self.kv_bytes_per_token * (load.context_tokens + load.num_tokens)
        flops = 2 * (self.weights_bytes / BYTES_PER_PARAM_ASSUMED) * load.num_tokens
        return self.overhead_s + max(moved / self.bandwidth_bytes_per_s, flops / self.flops_per_s)


def roofline(
    *, weights_bytes: int, kv_bytes_per_token: int, bandwidth_gbps: float, bf16_tflops: float,
    overhead_ms: float, gpu: str,
) -> RooflineStepTime:
    return RooflineStepTime(
        weights_bytes=weights_bytes,
        kv_bytes_per_token=kv_bytes_per_token,
        bandwidth_bytes_per_s=bandwidth_gbps * 1e9,
        flops_per_s=bf16_tflops * 1e12,
        overhead_s=overhead_ms / 1e3,
        gpu=gpu,
    )


def calibrated(points_ms: list[tuple[int, float]], source: str) -> CalibratedStepTime:
    ordered = sorted({tokens: ms for tokens, ms in points_ms}.items())
    return CalibratedStepTime(tuple((t, ms / 1e3) for t, ms in ordered), source)


def choose_step_time(
    timing: TimingSpec, facts: ModelFacts, *, step_time_ms: float | None, gpu: str | None,
) -> tuple[StepTimeModel | None, tuple[str, ...]]:
    """The step-time model, first match wins: --step-time-ms, timing.step_time_ms,
    timing.calibration, the profile's calibration, then a roofline when the model's weight and
    KV bytes are known (from the profile, the plan or the timing section). None when nothing is."""
    if step_time_ms is not None:
        return ConstantStepTime(step_time_ms / 1e3, "--step-time-ms"), ()
    if timing.step_time_ms is not None:
        return ConstantStepTime(timing.step_time_ms / 1e3, "timing.step_time_ms"), ()
    if timing.calibration:
        return calibrated(list(timing.calibration), "timing.calibration"), ()
    if facts.calibration:
        return calibrated(list(facts.calibration), "profile calibration"), ()
    weights = timing.weights_bytes if timing.weights_bytes is not None else facts.weights_bytes
    kv_bytes = timing.kv_bytes_per_token if timing.kv_bytes_per_token is not None else facts.kv_bytes_per_token
    if weights is None or kv_bytes is None:
        return None, ()
    from kvplan.gpus.catalog import DEFAULT_GPU, get_gpu

    notes: tuple[str, ...] = ()
    key = gpu or timing.gpu or facts.gpu
    if key is None:
        key = DEFAULT_GPU
        notes = (f"no GPU named for the step-time estimate; assuming {DEFAULT_GPU} (--gpu to change)",)
    spec = get_gpu(key)
    if spec.bandwidth_gbps is None or spec.bf16_tflops is None:
        raise KvplanError(f"the GPU catalog has no bandwidth or bf16 throughput for {spec.key}, so the "
                          "roofline step time cannot be estimated: give --step-time-ms or timing.step_time_ms")
    overhead = timing.overhead_ms if timing.overhead_ms is not None else DEFAULT_OVERHEAD_MS
    model = roofline(weights_bytes=weights, kv_bytes_per_token=kv_bytes, bandwidth_gbps=spec.bandwidth_gbps,
                     bf16_tflops=spec.bf16_tflops, overhead_ms=overhead, gpu=spec.key)
    return model, notes
