"""Step-time models: how long one scheduler step takes, so that steps become (estimated) seconds.

Every figure derived from these models is an estimate and is labelled so in every output, with
the method that priced it (``StepTimeModel.method``).

* ``ConstantStepTime``: every step takes the same time (``--step-time-ms``, ``timing.step_time_ms``).
* ``CalibratedStepTime``: piecewise-linear in the step's scheduled tokens, through points timed
  on a real GPU (``timing.calibration``, or the calibration a profile carries).
* ``RooflineStepTime``: the default when the model is known: a roofline with efficiency factors
  (``StepFactors``, each with its source in docs/accuracy.md). A step reads the weights once and
  the KV cache of every scheduled request's context; it does 2 FLOPs per multiplied parameter
  per scheduled token, plus attention's 4 x heads x head size FLOPs per (query token, attended
  token) pair and layer. Its time is the larger of the bytes over the achieved bandwidth and the
  FLOPs over the achieved FLOP/s, plus a fixed cost per step and per layer (kernel launches; more
  without CUDA graphs, ``--enforce-eager``) and a cost per running request (the engine core's
  CPU work per request: input preparation, sampling, output processing).

The step time is a pure function of the step's batch composition (``StepLoad``), so a caller may
evaluate it per step or for a run of identical steps at once.
"""

from __future__ import annotations

import bisect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from kvplan.errors import KvplanError
from kvplan.usecases.step_time_methods import STEP_TIME_METHODS

if TYPE_CHECKING:
    from kvplan.usecases.simulate.engine_source import ModelFacts
    from kvplan.usecases.simulate.workload import TimingSpec

BYTES_PER_PARAM_ASSUMED = 2  # bf16 weights: parameters = weights_bytes / 2 when the model's shape is unknown


@dataclass(frozen=True)
class StepFactors:
    """How far a real step is from the roofline; the defaults and their sources: docs/accuracy.md
    ("Step-time factors"). Derived from physics and public measurements, never fitted per result."""

    bandwidth_efficiency: float = 0.80     # achieved fraction of peak memory bandwidth (weight/KV streaming)
    flops_efficiency: float = 0.60         # achieved fraction of dense peak FLOP/s in large GEMMs
    attention_efficiency: float = 0.45     # achieved fraction of peak in attention (FlashAttention-class kernels)
    step_ms: float = 0.60                  # per step: scheduler, input preparation, sampling, output handoff
    layer_ms: float = 0.025                # per decoder layer and step with CUDA graphs (launch-bound floor)
    eager_layer_ms: float = 0.090          # the same without CUDA graphs (--enforce-eager): kernels launched one by one
    request_ms: float = 0.030              # per running request and step (engine core CPU work per request)


DEFAULT_FACTORS = StepFactors()
# the fixed overhead of a step when nothing about the model is known (the roofline without a shape)
DEFAULT_OVERHEAD_MS = 2.0


# Not frozen (built once per step: a frozen dataclass's __init__ sets fields through
# object.__setattr__); step-time models read it only.
@dataclass(slots=True)
class StepLoad:
    """What a step does: tokens computed, context tokens whose KV is read, requests in the batch.

    ``attention_pairs``: over the scheduled requests, the (query token, attended token) pairs
    attention computes; None for a decode-only step, where each request's one query token attends
    its whole context (``context_tokens``).

    ``decodes`` / ``decode_context``: of the scheduled requests, those that compute one token (a
    decode: one query against its context) and their context tokens; the rest are prefill chunks.
    Only a pricer that times decode and prefill attention apart (measured kernels) reads them;
    None: not counted (every request but a step's bulk is then priced as a prefill chunk)."""

    num_tokens: int
    context_tokens: int
    num_requests: int
    attention_pairs: int | None = None
    decodes: int | None = None
    decode_context: int = 0


class StepTimeModel(Protocol):
    @property
    def method(self) -> str: ...

    def seconds(self, load: StepLoad) -> float: ...


@dataclass(frozen=True)
class ConstantStepTime:
    step_s: float
    source: str

    @property
    def method(self) -> str:
        return f"constant step time ({self.source})"

    def seconds(self, load: StepLoad) -> float:
        return self.step_s


@dataclass(frozen=True)
class CalibratedStepTime:
    """Measured (tokens, seconds) points, sorted by tokens, at least one."""

    points: tuple[tuple[int, float], ...]
    source: str

    @property
    def method(self) -> str:
        return f"calibrated from {len(self.points)} measured points ({self.source})"

    def seconds(self, load: StepLoad) -> float:
        tokens = [t for t, _ in self.points]
        if len(self.points) == 1 or load.num_tokens <= tokens[0]:
            return self.points[0][1]
        # interpolate inside the measured range, extrapolate along the last segment beyond it
        index = min(bisect.bisect_left(tokens, load.num_tokens), len(tokens) - 1)
        (t0, s0), (t1, s1) = self.points[index - 1], self.points[index]
        return max(0.0, s0 + (s1 - s0) * (load.num_tokens - t0) / (t1 - t0))


@dataclass(frozen=True)
class ComputeShape:
    """What one GPU computes per token: multiplied parameters, attention layers and heads, layers.
    From the model's shape and the plan's weights (``engine_source.compute_shape``)."""

    matmul_params: int           # parameters multiplied per token on one GPU (lm_head included)
    streamed_bytes: int          # weight bytes one GPU reads per step (an untied embedding table is not read)
    num_layers: int              # decoder layers on one GPU (its pipeline stage)
    attention_layers: int        # layers with attention on that GPU
    attention_heads: int         # query heads per GPU
    head_size: int
    weight_format: str           # bf16, fp16, fp8, int4 (AWQ/GPTQ), ... as timed


@dataclass(frozen=True)
class KernelFacts:
    """What measured kernel tables are looked up by, besides the GPU and the weights' format (a
    plan's; ``engine_source.plan_pool``)."""

    model_config: str            # the model's config.json, as JSON text
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    kv_cache_dtype: str = "auto"


@dataclass(frozen=True)
class RooflineStepTime:
    weights_bytes: int
    kv_bytes_per_token: int
    bandwidth_bytes_per_s: float
    flops_per_s: float
    overhead_s: float            # per step, whatever the batch
    gpu: str
    layer_overhead_s: float = 0.0
    request_overhead_s: float = 0.0
    flops_per_token: float = 0.0            # 2 x multiplied parameters; 0: from weights_bytes (bf16 assumed)
    attention_flops_per_pair: float = 0.0   # 4 x heads x head size x attention layers (0: not counted)
    attention_flops_per_s: float = 0.0
    cuda_graphs: bool = True
    weight_format: str = "bf16"
    factors: StepFactors | None = None      # None: the bare roofline of a model whose shape is unknown

    @property
    def method(self) -> str:
        if self.factors is None:
            return (f"roofline on {self.gpu} at peak bandwidth and FLOP/s, {self.overhead_s * 1e3:.3g} ms per step "
                    "(model shape unknown: no attention FLOPs, no efficiency factors)")
        return (f"roofline with efficiency factors on {self.gpu} ({self.weight_format} weights, "
                f"CUDA graphs {'on' if self.cuda_graphs else 'off'}; factors: docs/accuracy.md)")

    def seconds(self, load: StepLoad) -> float:
        fixed = self.overhead_s + self.layer_overhead_s
        if load.num_tokens == 0:
            return fixed
        # attention reads every context token's KV; the new tokens' KV is written as well
        moved = self.weights_bytes + self.kv_bytes_per_token * (load.context_tokens + load.num_tokens)
        per_token = self.flops_per_token or 2 * (self.weights_bytes / BYTES_PER_PARAM_ASSUMED)
        compute = per_token * load.num_tokens / self.flops_per_s
        if self.attention_flops_per_pair:
            pairs = load.context_tokens if load.attention_pairs is None else load.attention_pairs
            compute += self.attention_flops_per_pair * pairs / self.attention_flops_per_s
        return fixed + self.request_overhead_s * load.num_requests + max(moved / self.bandwidth_bytes_per_s, compute)


def roofline(
    *, weights_bytes: int, kv_bytes_per_token: int, bandwidth_gbps: float, bf16_tflops: float,
    overhead_ms: float, gpu: str,
) -> RooflineStepTime:
    """The bare roofline (peak bandwidth and FLOP/s, a fixed overhead): a model whose shape is unknown."""
    return RooflineStepTime(
        weights_bytes=weights_bytes,
        kv_bytes_per_token=kv_bytes_per_token,
        bandwidth_bytes_per_s=bandwidth_gbps * 1e9,
        flops_per_s=bf16_tflops * 1e12,
        overhead_s=overhead_ms / 1e3,
        gpu=gpu,
    )


def factored_roofline(
    *, shape: ComputeShape, kv_bytes_per_token: int, bandwidth_gbps: float, tflops: float, gpu: str,
    cuda_graphs: bool = True, factors: StepFactors = DEFAULT_FACTORS, overhead_ms: float | None = None,
) -> RooflineStepTime:
    """The roofline with efficiency factors for a model whose shape is known; ``tflops`` is the peak
    of the format the GEMMs run in (fp8 on GPUs with fp8 tensor cores for fp8 weights, else bf16)."""
    layer_ms = factors.layer_ms if cuda_graphs else factors.eager_layer_ms
    return RooflineStepTime(
        weights_bytes=shape.streamed_bytes,
        kv_bytes_per_token=kv_bytes_per_token,
        bandwidth_bytes_per_s=bandwidth_gbps * 1e9 * factors.bandwidth_efficiency,
        flops_per_s=tflops * 1e12 * factors.flops_efficiency,
        overhead_s=(factors.step_ms if overhead_ms is None else overhead_ms) / 1e3,
        gpu=gpu,
        layer_overhead_s=layer_ms * shape.num_layers / 1e3,
        request_overhead_s=factors.request_ms / 1e3,
        flops_per_token=2.0 * shape.matmul_params,
        attention_flops_per_pair=4.0 * shape.attention_heads * shape.head_size * shape.attention_layers,
        # attention runs in bf16 whatever the weights' format
        attention_flops_per_s=attention_peak_tflops(tflops, shape.weight_format) * 1e12
        * factors.attention_efficiency,
        cuda_graphs=cuda_graphs,
        weight_format=shape.weight_format,
        factors=factors,
    )


def attention_peak_tflops(tflops: float, weight_format: str) -> float:
    """Attention's peak: the bf16 one, which is half the fp8 peak the GEMMs of fp8 weights run at."""
    return tflops / 2 if weight_format == "fp8" else tflops


def calibrated(points_ms: list[tuple[int, float]], source: str) -> CalibratedStepTime:
    ordered = sorted({tokens: ms for tokens, ms in points_ms}.items())
    return CalibratedStepTime(tuple((t, ms / 1e3) for t, ms in ordered), source)


def choose_step_time(
    timing: TimingSpec, facts: ModelFacts, *, step_time_ms: float | None, gpu: str | None,
    enforce_eager: bool = False, method: str = "auto", async_scheduling: bool = True,
) -> tuple[StepTimeModel | None, tuple[str, ...]]:
    """The step-time model, first match wins: --step-time-ms, timing.step_time_ms,
    timing.calibration, the profile's calibration, then, when the model's weight and KV bytes are
    known (from the profile, the plan or the timing section), a model of the GPU: for a model whose
    shape and config the plan gave, measured kernels (``method`` "kernels", or "auto" on a GPU of
    ``AUTO_KERNEL_GPUS``, with the `perf` extra installed) or the roofline with efficiency factors;
    else the bare roofline. None when nothing is known."""
    if method not in STEP_TIME_METHODS:
        raise KvplanError(f"--step-time: expected one of {', '.join(STEP_TIME_METHODS)}, got {method!r}")
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
    shape = facts.compute
    if shape is not None and timing.weights_bytes is None:
        tflops = spec.bf16_tflops
        if shape.weight_format == "fp8":
            if spec.fp8_tflops is not None:
                tflops = spec.fp8_tflops
            else:
                notes = (*notes, f"{spec.key} has no fp8 tensor-core peak in the catalog: fp8 GEMMs are timed at "
                                 "its bf16 peak (weight-only fp8, as vLLM runs it there)")
        model = factored_roofline(shape=shape, kv_bytes_per_token=kv_bytes, bandwidth_gbps=spec.bandwidth_gbps,
                                  tflops=tflops, gpu=spec.key, cuda_graphs=not enforce_eager,
                                  overhead_ms=timing.overhead_ms)
        if method == "kernels" or (method == "auto" and spec.key in AUTO_KERNEL_GPUS):
            kernels, why = _measured_kernels(facts, shape, spec.key, enforce_eager, timing.overhead_ms,
                                             async_scheduling, loud=method == "kernels")
            if kernels is not None:
                return kernels, (*notes, *facts.timing_notes)
            if why:
                return model, (*notes, *facts.timing_notes, why)
        return model, (*notes, *facts.timing_notes)
    if method == "kernels":
        notes = (*notes, "--step-time kernels: measured kernels need the model's shape and config (engine.model or "
                         "--model, planned on the spot): the step time is the bare roofline")
    overhead = timing.overhead_ms if timing.overhead_ms is not None else DEFAULT_OVERHEAD_MS
    model = roofline(weights_bytes=weights, kv_bytes_per_token=kv_bytes, bandwidth_gbps=spec.bandwidth_gbps,
                     bf16_tflops=spec.bf16_tflops, overhead_ms=overhead, gpu=spec.key)
    return model, (*notes, *facts.timing_notes)


# GPUs where `--step-time auto` prices steps from measured kernels when the `perf` extra is
# installed: those where, on the public `vllm bench serve` results, the kernels are at least as
# accurate as the roofline with factors (docs/accuracy.md, "Measured kernels against the roofline").
AUTO_KERNEL_GPUS: frozenset[str] = frozenset()


def _measured_kernels(facts: ModelFacts, shape: ComputeShape, gpu: str, enforce_eager: bool,
                      overhead_ms: float | None, async_scheduling: bool, *,
                      loud: bool) -> tuple[StepTimeModel | None, str | None]:
    """The measured-kernel step time, or why not: a note for stderr when the kernels were asked
    for (``loud``) or the database covers the GPU but cannot price this setup."""
    from kvplan.measure.kernel_tables import KernelQuery, KernelsUnavailable, covers, installed_version, open_tables
    from kvplan.usecases.simulate.measured_step import KernelStepTime

    if facts.kernels is None:
        return None, ("--step-time kernels: the engine's model is not known (a profile's or a block count's pool): "
                      "the step time is the roofline" if loud else None)
    if not loud and (installed_version() is None or not covers(gpu)):
        return None, None
    query = KernelQuery(model_config=facts.kernels.model_config, gpu=gpu,
                        tensor_parallel_size=facts.kernels.tensor_parallel_size,
                        pipeline_parallel_size=facts.kernels.pipeline_parallel_size,
                        weight_format=shape.weight_format, kv_cache_dtype=facts.kernels.kv_cache_dtype)
    try:
        tables = open_tables(query)
    except KernelsUnavailable as error:
        return None, f"{error}: the step time is the roofline with efficiency factors"
    return KernelStepTime(tables, weight_format=shape.weight_format, cuda_graphs=not enforce_eager,
                          num_layers=shape.num_layers, overhead_ms=overhead_ms, overlapped=async_scheduling), None
