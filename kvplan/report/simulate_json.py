"""The simulation result as one JSON document (``--json``; schema in ``docs/metrics.md``).

Floats are rounded to 6 significant digits, and nothing in the document depends on the machine,
the wall clock or the path the workload was given by, so the same workload and seed give the
same bytes. The console and HTML reports show the same rounded figures (`round_floats`,
`series_rows`), so every number a person reads is the one the document carries.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields, is_dataclass, replace
from typing import Any, TypeVar

from kvplan.report.jsonout import to_jsonable
from kvplan.semantics.engine.groups import KVCacheGroup
from kvplan.semantics.engine.trace import CONFIG_KEYS
from kvplan.units import significant
from kvplan.usecases.simulate.arrivals import ArrivalProcess
from kvplan.usecases.simulate.distributions import Distribution
from kvplan.usecases.simulate.driver import PreparedWorkload
from kvplan.usecases.simulate.measured_step import KernelStepTime
from kvplan.usecases.simulate.metrics import SERIES_NAMES, KvUsage, RunMetrics
from kvplan.usecases.simulate.simulation import SimResult
from kvplan.usecases.simulate.timing import CalibratedStepTime, ConstantStepTime, RooflineStepTime, StepTimeModel

RESULT_SCHEMA_VERSION = 1
SIMULATION_KIND = "kvplan.simulation"
SERIES_COLUMNS = ("start", "coverage", *(f"{n}_mean" for n in SERIES_NAMES), *(f"{n}_max" for n in SERIES_NAMES))
T = TypeVar("T")
_USED, _EVICTABLE, _RUNNING, _WAITING = (SERIES_NAMES.index(name) for name in (
    "used_blocks", "evictable_cached_blocks", "running", "waiting"))


def rounded(value: Any) -> Any:
    if isinstance(value, float):
        return significant(value)
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


def round_floats(value: T) -> T:
    """The same frozen result with every float to 6 significant digits, as the document holds it."""
    if isinstance(value, float):
        return significant(value)  # type: ignore[return-value]
    if isinstance(value, tuple):
        return tuple(round_floats(item) for item in value)  # type: ignore[return-value]
    if is_dataclass(value) and not isinstance(value, type):
        return replace(value, **{f.name: round_floats(getattr(value, f.name)) for f in fields(value) if f.init})
    return value


@dataclass(frozen=True)
class SeriesRow:
    """One bucket of the time series, as the document's `series.rows` holds it."""

    start: float
    coverage: float                  # how much of the bucket the run covered (0..1)
    means: tuple[float, ...]         # one per SERIES_NAMES
    maxima: tuple[float, ...]

    @property
    def used_blocks(self) -> float:
        return self.means[_USED]

    @property
    def used_blocks_peak(self) -> float:
        return self.maxima[_USED]

    @property
    def evictable_cached_blocks(self) -> float:
        return self.means[_EVICTABLE]

    @property
    def running(self) -> float:
        return self.means[_RUNNING]

    @property
    def waiting(self) -> float:
        return self.means[_WAITING]


def series_rows(metrics: RunMetrics) -> tuple[SeriesRow, ...]:
    bucket = metrics.series_bucket

    def figure(value: float) -> float:
        rounded_value = significant(value)
        assert rounded_value is not None
        return rounded_value

    return tuple(
        SeriesRow(figure(p.start), figure(p.weight / bucket), tuple(figure(v) for v in p.means),
                  tuple(figure(v) for v in p.maxima))
        for p in metrics.series
    )


def series_table(metrics: RunMetrics, timed: bool) -> dict[str, Any]:
    return {
        "x": "time_s_estimate" if timed else "step",
        "bucket": metrics.series_bucket,
        "columns": list(SERIES_COLUMNS),
        "rows": [[row.start, row.coverage, *row.means, *row.maxima] for row in series_rows(metrics)],
    }


def result_document(result: SimResult) -> dict[str, Any]:
    setup = result.setup
    metrics = result.metrics
    timed = setup.timer is not None
    timing = {"estimate": True, **describe_timer(setup.timer)} if setup.timer is not None else None
    document = {
        "schema_version": RESULT_SCHEMA_VERSION,
        "kind": SIMULATION_KIND,
        "vllm_semantics": setup.config.release.version,
        "workload": describe_setup(setup),
        "engine": describe_engine(setup),
        "timing": timing,
        "stalled": metrics.stalled,
        "num_steps": metrics.num_steps,
        "num_requests": metrics.num_requests,
        "num_finished": metrics.num_finished,
        "kv_usage": describe_kv_usage(metrics.kv),
        "preemptions": to_jsonable(metrics.preemptions),
        "prefix_cache": to_jsonable(metrics.prefix_cache),
        "queues": to_jsonable(metrics.queues),
        "latency": to_jsonable(metrics.latency),
        "throughput": to_jsonable(metrics.throughput),
        "classes": to_jsonable(list(metrics.classes)),
        "capacity": to_jsonable(result.capacity),
        "series": series_table(metrics, timed),
        "latency_series": {
            "x": "arrival_time_s_estimate" if timed else "arrival_step",
            "unit": "s_estimate" if timed else "steps",
            "columns": ["start", "ttft_p50", "e2e_p50"],
            "rows": [list(row) for row in metrics.latency_series],
        },
        "warnings": list(result.notes),
    }
    return rounded(document)


def describe_timer(timer: StepTimeModel) -> dict[str, Any]:
    if isinstance(timer, ConstantStepTime):
        return {"model": "constant", "source": timer.source, "step_time_ms": timer.step_s * 1e3}
    if isinstance(timer, CalibratedStepTime):
        return {
            "model": "calibrated",
            "source": timer.source,
            "points": [{"num_tokens": t, "ms": s * 1e3} for t, s in timer.points],
        }
    if isinstance(timer, KernelStepTime):
        return {
            "model": "measured_kernels",
            "method": timer.method,
            "database": timer.tables.source,
            "gpu": timer.tables.query.gpu,
            "weight_format": timer.weight_format,
            "cuda_graphs": timer.cuda_graphs,
            "step_overhead_ms": timer.fixed_s * 1e3,
            "request_overhead_ms": timer.request_s * 1e3,
            "request_overhead_overlapped": timer.overlapped,
        }
    assert isinstance(timer, RooflineStepTime)
    if timer.factors is not None:
        return {
            "model": "roofline_with_factors",
            "method": timer.method,
            "gpu": timer.gpu,
            "weights_bytes": timer.weights_bytes,
            "weight_format": timer.weight_format,
            "kv_bytes_per_token": timer.kv_bytes_per_token,
            "cuda_graphs": timer.cuda_graphs,
            "achieved_bandwidth_gbps": timer.bandwidth_bytes_per_s / 1e9,
            "achieved_tflops": timer.flops_per_s / 1e12,
            "step_overhead_ms": (timer.overhead_s + timer.layer_overhead_s) * 1e3,
            "request_overhead_ms": timer.request_overhead_s * 1e3,
            "factors": to_jsonable(timer.factors),
        }
    return {
        "model": "roofline",
        "gpu": timer.gpu,
        "weights_bytes": timer.weights_bytes,
        "kv_bytes_per_token": timer.kv_bytes_per_token,
        "bandwidth_gbps": timer.bandwidth_bytes_per_s / 1e9,
        "bf16_tflops": timer.flops_per_s / 1e12,
        "overhead_ms": timer.overhead_s * 1e3,
    }


def describe_arrival(arrival: ArrivalProcess) -> dict[str, Any]:
    out: dict[str, Any] = {"process": arrival.process}
    for key, value in (("rate", arrival.rate), ("burst_size", arrival.burst_size), ("interval_s", arrival.interval_s),
                       ("count", arrival.count), ("duration_s", arrival.duration_s)):
        if value is not None:
            out[key] = value
    if arrival.process == "timestamps":
        out["num_times"] = len(arrival.times_s)
    return out


def _plain(value: float) -> float | int:
    return int(value) if value.is_integer() else value


def describe_distribution(dist: Distribution) -> dict[str, Any]:
    """The distribution as it would be written in a workload file (tables summarised)."""
    out: dict[str, Any] = {"dist": dist.kind}
    if dist.kind == "constant":
        out["value"] = _plain(dist.params[0])
        return out
    if dist.kind in ("uniform",):
        out["min"], out["max"] = (_plain(v) for v in dist.params)
        return out
    if dist.kind in ("normal", "lognormal"):
        out["mean"], out["std"] = (_plain(v) for v in dist.params)
    elif dist.kind == "empirical":
        out["num_values"] = len(dist.table)
    else:
        out["num_bins"] = len(dist.table)
    out["min"] = _plain(dist.low)
    if math.isfinite(dist.high):
        out["max"] = _plain(dist.high)
    return out


def describe_setup(setup: PreparedWorkload) -> dict[str, Any]:
    workload = setup.workload
    out: dict[str, Any] = {"name": workload.name, "seed": setup.seed}
    if workload.is_explicit:
        out["kind"] = "requests"
        out["arrivals"] = "steps" if setup.in_steps else "seconds"
        out["num_requests"] = len(setup.explicit)
    else:
        out["kind"] = "mix"
        out["arrival"] = describe_arrival(workload.arrival) if workload.arrival else None
        out["classes"] = [
            {
                "name": c.name,
                "weight": c.weight,
                "prompt_tokens": describe_distribution(c.prompt_tokens),
                "output_tokens": describe_distribution(c.output_tokens),
                "shared_prefix": {"name": c.shared_prefix.name, "tokens": c.shared_prefix.tokens}
                if c.shared_prefix else None,
                "turns": {
                    "count": describe_distribution(c.turns.count),
                    "user_tokens": describe_distribution(c.turns.user_tokens),
                    "think_time_s": describe_distribution(c.turns.think_time_s),
                } if c.turns else None,
            }
            for c in workload.classes
        ]
    return out


def describe_kv_usage(kv: KvUsage) -> dict[str, Any]:
    """`kv_usage` as documents hold it: a group's type under the key "type", spelt as its spec's `kind`
    (docs/schemas/simulate.json)."""
    document: dict[str, Any] = to_jsonable(kv)
    document["groups"] = [{"type": group.spec.kind, **{key: value for key, value in entry.items() if key != "spec"}}
                          for group, entry in zip(kv.groups, document["groups"], strict=True)]
    return document


def describe_groups(groups: tuple[KVCacheGroup, ...], layers_known: bool) -> list[dict[str, Any]]:
    """The engine's KV cache groups as vLLM names them, with their layers where a plan says."""
    described = []
    for group in groups:
        entry: dict[str, Any] = {"type": group.spec.kind, "spec": group.spec.__name__, "block_size": group.block_size,
                                 **group.parameters}
        entry["num_layers"] = group.num_layers if layers_known else None
        described.append(entry)
    return described


def describe_engine(setup: PreparedWorkload) -> dict[str, Any]:
    config = setup.config
    facts = setup.engine.facts
    return {
        "source": setup.engine.source,
        **{k: getattr(config, k) for k in CONFIG_KEYS},
        "kv_cache_groups": describe_groups(setup.engine.kv_cache_groups, bool(setup.engine.planned_groups)),
        "gpu_kv_cache_tokens": setup.engine.gpu_kv_cache_tokens,
        "usable_blocks": config.num_usable_blocks,
        "model": facts.model,
        "gpu": facts.gpu,
        "kv_bytes_per_token": setup.kv_bytes_per_token,
        "weights_bytes": facts.weights_bytes,
    }
