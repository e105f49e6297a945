"""`kvplan bench serve`: what `vllm bench serve` would measure, predicted by the exact scheduler.

The arguments are `vllm bench serve`'s own (the random dataset, the request rate and burstiness,
the closed loop of `--max-concurrency`, the percentiles), the engine's are `vllm serve`'s. The
run is kvplan's simulation of vLLM's scheduler step by step, each step priced by the step-time
model, with the serving front end between the clients and the engine (`frontend`). The result
has the metric names and the shape of `vllm bench serve`'s result (``BenchServeResult.metrics``;
its computation follows `vllm/benchmarks/serve.py`'s `calculate_metrics`), and every figure is a
prediction: an estimate, with the method that priced it.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field

from kvplan.errors import KvplanError
from kvplan.semantics.releases import Release
from kvplan.usecases.simulate.arrivals import ArrivalProcess
from kvplan.usecases.simulate.distributions import Distribution
from kvplan.usecases.simulate.driver import PreparedWorkload, SimOptions, prepare, run
from kvplan.usecases.simulate.engine_source import EngineOverrides
from kvplan.usecases.simulate.frontend import FrontEnd
from kvplan.usecases.simulate.metrics import RequestRecord, percentile
from kvplan.usecases.simulate.workload import EngineSpec, RequestClass, SharedPrefix, TimingSpec, Workload

METRICS = ("ttft", "tpot", "itl", "e2el")
DEFAULT_PERCENTILE_METRICS = ("ttft", "tpot", "itl")   # vllm bench serve's for generative models
SCHEMA_VERSION = 1


@dataclass(frozen=True)
class BenchServeRequest:
    """`vllm bench serve`'s arguments (its defaults where it has them) and the engine's."""

    model: str
    overrides: EngineOverrides = field(default_factory=EngineOverrides)
    release: Release | None = None
    random_input_len: int = 1024
    random_output_len: int = 128
    random_range_ratio: float = 0.0
    random_prefix_len: int = 0
    num_prompts: int = 1000
    request_rate: float = math.inf
    burstiness: float = 1.0
    max_concurrency: int | None = None
    seed: int = 0
    percentile_metrics: tuple[str, ...] = DEFAULT_PERCENTILE_METRICS
    metric_percentiles: tuple[float, ...] = (99.0,)
    frontend: FrontEnd = field(default_factory=FrontEnd)
    step_time_ms: float | None = None


@dataclass(frozen=True)
class BenchServeResult:
    request: BenchServeRequest
    setup: PreparedWorkload
    metrics: dict[str, object]          # vllm bench serve's result document, as it saves it
    engine_ttft_ms: dict[str, float]    # TTFT in the engine alone (arrival in the engine to first token)
    notes: tuple[str, ...]


def bench_workload(request: BenchServeRequest) -> Workload:
    """The benchmark as a kvplan workload: one class of random prompts, the benchmark's arrivals."""
    _check(request)
    ratio = request.random_range_ratio
    inputs = _lengths(request.random_input_len, ratio, minimum=0)
    outputs = _lengths(request.random_output_len, ratio, minimum=1)
    prefix = SharedPrefix("random-prefix", request.random_prefix_len) if request.random_prefix_len else None
    if inputs.high < 1:
        raise KvplanError("--random-input-len with --random-range-ratio gives prompts of no tokens: raise it")
    inputs = _at_least_one(inputs) if prefix is None else inputs
    arrival = ArrivalProcess("timestamps", times_s=tuple(send_times(request)), max_concurrency=request.max_concurrency)
    spec = EngineSpec(model=request.model, gpu=request.overrides.gpu)
    classes = (RequestClass("random", 1.0, inputs, outputs, prefix, None),)
    return Workload("vllm bench serve", request.seed, spec, TimingSpec(), classes=classes, arrival=arrival)


def send_times(request: BenchServeRequest) -> list[float]:
    """When the benchmark sends each request, as `vllm bench serve`'s `get_request` schedules them: all at
    t=0 at an infinite rate; else gaps from a gamma distribution of shape `burstiness` and mean 1/rate
    (exponential at 1, constant at an infinite burstiness), rescaled so that the last request goes at
    num_prompts / rate. The draws are kvplan's own seeded stream, not numpy's."""
    count, rate = request.num_prompts, request.request_rate
    if math.isinf(rate):
        return [0.0] * count
    rng = random.Random(f"kvplan:{request.seed}:bench-arrivals")
    times, clock = [], 0.0
    for _ in range(count):
        if math.isinf(request.burstiness):
            clock += 1.0 / rate
        else:
            clock += rng.gammavariate(request.burstiness, 1.0 / (rate * request.burstiness))
        times.append(clock)
    scale = (count / rate) / times[-1] if times[-1] > 0 else 1.0
    return [t * scale for t in times]


def _lengths(length: int, ratio: float, minimum: int) -> Distribution:
    """vLLM's random dataset: a uniform integer in [floor(L (1 - r)), ceil(L (1 + r))]."""
    low = max(minimum, math.floor(length * (1 - ratio)))
    high = max(minimum, math.ceil(length * (1 + ratio)))
    if low == high:
        return Distribution("constant", True, (float(low),), float(low), float(low))
    return Distribution("uniform", True, (float(low), float(high)), float(low), float(high))


def _at_least_one(dist: Distribution) -> Distribution:
    if dist.low >= 1:
        return dist
    return Distribution(dist.kind, True, (max(1.0, dist.params[0]), *dist.params[1:]), 1.0, dist.high)


def _check(request: BenchServeRequest) -> None:
    if request.num_prompts < 1:
        raise KvplanError("--num-prompts must be at least 1")
    if request.request_rate <= 0:
        raise KvplanError("--request-rate must be more than 0 (inf sends every prompt at once)")
    if request.burstiness <= 0:
        raise KvplanError("--burstiness must be more than 0 (1 is a Poisson process)")
    if request.max_concurrency is not None and request.max_concurrency < 1:
        raise KvplanError("--max-concurrency must be greater than 0")
    if not 0 <= request.random_range_ratio < 1:
        raise KvplanError("--random-range-ratio must be in [0, 1)")
    unknown = [m for m in request.percentile_metrics if m not in METRICS]
    if unknown:
        raise KvplanError(f"--percentile-metrics: unknown metric {unknown[0]!r} (kvplan predicts {', '.join(METRICS)})")
    if any(not 0 <= p <= 100 for p in request.metric_percentiles):
        raise KvplanError("--metric-percentiles: each percentile must be in [0, 100]")


def bench_serve(request: BenchServeRequest) -> BenchServeResult:
    workload = bench_workload(request)
    setup = prepare(workload, SimOptions(overrides=request.overrides, seed=request.seed,
                                         step_time_ms=request.step_time_ms, release=request.release,
                                         frontend=request.frontend, clients=True))
    outcome = run(setup)
    if outcome.metrics.stalled:
        raise KvplanError("the simulated engine stalled: a request cannot be scheduled even alone (raise "
                          "--max-model-len, --max-num-batched-tokens or the KV cache)")
    records = [r for r in outcome.records if r.client_last_time is not None]
    notes = list(setup.notes)
    if outcome.num_rejected:
        notes.append(f"{outcome.num_rejected} prompts are not shorter than max_model_len "
                     f"({setup.config.max_model_len}): vLLM refuses them, they count as failed")
    document = result_document(request, setup, records, list(outcome.itl_s), outcome.num_rejected,
                               list(outcome.deliveries))
    engine = [(r.first_token_time - r.arrival_time) * 1e3 for r in records
              if r.first_token_time is not None and r.arrival_time is not None]
    engine_ttft = _stats(engine, (50.0, 99.0))
    assert setup.timer is not None
    document["kvplan"] = {
        "prediction": True,
        "estimate": True,
        "vllm_semantics": setup.config.vllm_version,
        "gpu": getattr(setup.timer, "gpu", None),
        "step_time_method": setup.timer.method,
        "frontend_method": request.frontend.method,
        "engine_ttft_ms": engine_ttft,
        "num_gpu_blocks": setup.config.num_gpu_blocks,
        "max_num_seqs": setup.config.max_num_seqs,
        "max_num_batched_tokens": setup.config.max_num_batched_tokens,
        "notes": notes,
    }
    return BenchServeResult(request, setup, document, engine_ttft, tuple(notes))


def _stats(values_ms: list[float], percentiles: tuple[float, ...]) -> dict[str, float]:
    ordered = sorted(values_ms) or [0.0]
    mean = math.fsum(ordered) / len(ordered)
    out = {"mean": mean, "median": percentile(ordered, 0.5),
           "std": math.sqrt(math.fsum((v - mean) ** 2 for v in ordered) / len(ordered))}
    for p in percentiles:
        out[f"p{_p_word(p)}"] = percentile(ordered, p / 100)
    return out


def _p_word(p: float) -> str:
    return str(int(p)) if int(p) == p else str(p)


def result_document(request: BenchServeRequest, setup: PreparedWorkload, records: list[RequestRecord],
                    itl_s: list[float], failed: int, deliveries: list[tuple[float, int]]) -> dict[str, object]:
    """The result as `vllm bench serve --save-result` writes it (without the per-request lists), then
    kvplan's own block: the prediction's method and the engine's share of the latency."""
    ttft = [(r.client_first_time - r.sent_time) for r in records]  # type: ignore[operator]
    e2el = [(r.client_last_time - r.sent_time) for r in records]  # type: ignore[operator]
    tpot = [(e - t) / (r.num_outputs - 1) for r, t, e in zip(records, ttft, e2el, strict=True) if r.num_outputs > 1]
    # the benchmark's clock starts before its first request is sent (t=0) and ends with the last token
    duration = max(e2e + r.sent_time for r, e2e in zip(records, e2el, strict=True)) if records else 0.0  # type: ignore[operator]
    total_input = sum(r.prompt_tokens for r in records)
    total_output = sum(r.num_outputs for r in records)
    result: dict[str, object] = {
        "schema_version": SCHEMA_VERSION,
        "prediction": True,
        "backend": "openai",
        "label": "kvplan prediction",
        "model_id": request.model,
        "tokenizer_id": request.model,
        "num_prompts": request.num_prompts,
        "request_rate": "inf" if math.isinf(request.request_rate) else request.request_rate,
        "burstiness": request.burstiness,
        "max_concurrency": request.max_concurrency,
        "duration": duration,
        "completed": len(records),
        "failed": failed,
        "total_input_tokens": total_input,
        "total_output_tokens": total_output,
        "request_throughput": len(records) / duration if duration else 0.0,
        "request_goodput": None,
        "output_throughput": total_output / duration if duration else 0.0,
        "total_token_throughput": (total_input + total_output) / duration if duration else 0.0,
        "max_output_tokens_per_s": _peak_tokens_per_s(records, deliveries),
        "max_concurrent_requests": _peak_concurrency(records),
    }
    values = {"ttft": ttft, "tpot": tpot, "itl": itl_s, "e2el": e2el}
    for metric in request.percentile_metrics:
        for name, value in _stats([v * 1e3 for v in values[metric]], request.metric_percentiles).items():
            result[f"{name}_{metric}_ms"] = value
    return result


def _peak_tokens_per_s(records: list[RequestRecord], deliveries: list[tuple[float, int]]) -> float:
    """The most output tokens that reached the clients within one second, counted in whole seconds from
    the first request sent (vLLM's buckets)."""
    if not records or not deliveries:
        return 0.0
    start = min(r.sent_time for r in records)  # type: ignore[type-var]
    buckets: dict[int, int] = {}
    for time, count in deliveries:
        second = int(time - start)  # type: ignore[operator]
        buckets[second] = buckets.get(second, 0) + count
    return float(max(buckets.values()))


def _peak_concurrency(records: list[RequestRecord]) -> int:
    events = sorted([(r.sent_time, 1) for r in records] + [(r.client_last_time, -1) for r in records])
    level = peak = 0
    for _, delta in events:
        level += delta
        peak = max(peak, level)
    return peak
