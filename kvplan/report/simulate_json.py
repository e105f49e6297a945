"""The simulation result as one JSON document (``--json``; schema in ``docs/metrics.md``).

Floats are rounded to 6 significant digits, and nothing in the document depends on the machine,
the wall clock or the path the workload was given by, so the same workload and seed give the
same bytes.
"""

from __future__ import annotations

import math
from typing import Any

from kvplan import VLLM_SEMANTICS
from kvplan.report.jsonout import to_jsonable
from kvplan.usecases.simulate.driver import RESULT_SCHEMA_VERSION, SimResult, describe_engine, describe_setup
from kvplan.usecases.simulate.metrics import SERIES_NAMES, RunMetrics

SERIES_COLUMNS = ("start", "coverage", *(f"{n}_mean" for n in SERIES_NAMES), *(f"{n}_max" for n in SERIES_NAMES))


def rounded(value: Any) -> Any:
    if isinstance(value, float):
        return float(f"{value:.6g}") if math.isfinite(value) else None
    if isinstance(value, dict):
        return {k: rounded(v) for k, v in value.items()}
    if isinstance(value, list):
        return [rounded(v) for v in value]
    return value


def series_table(metrics: RunMetrics, timed: bool) -> dict[str, Any]:
    return {
        "x": "time_s_estimate" if timed else "step",
        "bucket": metrics.series_bucket,
        "columns": list(SERIES_COLUMNS),
        "rows": [[p.start, p.weight / metrics.series_bucket, *p.means, *p.maxima] for p in metrics.series],
    }


def result_document(result: SimResult) -> dict[str, Any]:
    setup = result.setup
    metrics = result.metrics
    timed = setup.timer is not None
    timing = {"estimate": True, **setup.timer.describe()} if setup.timer is not None else None
    document = {
        "schema_version": RESULT_SCHEMA_VERSION,
        "kind": "kvplan.simulation",
        "vllm_semantics": VLLM_SEMANTICS,
        "workload": describe_setup(setup),
        "engine": describe_engine(setup),
        "timing": timing,
        "stalled": metrics.stalled,
        "num_steps": metrics.num_steps,
        "num_requests": metrics.num_requests,
        "num_finished": metrics.num_finished,
        "kv_usage": to_jsonable(metrics.kv),
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
