"""`kvplan bench serve`'s table, laid out as `vllm bench serve` prints its result, and `kvplan bench
compare`'s table. Plain text: a user holds the two side by side."""

from __future__ import annotations

import math
from collections.abc import Iterator
from typing import Any

from kvplan.usecases.bench.compare import Comparison
from kvplan.usecases.bench.serve import BenchServeResult

_HEADERS = {"ttft": ("TTFT", "Time to First Token"), "tpot": ("TPOT", "Time per Output Token (excl. 1st token)"),
            "itl": ("ITL", "Inter-token Latency"), "e2el": ("E2EL", "End-to-end Latency")}


def _row(label: str, value: Any) -> str:
    text = f"{value:<10.2f}" if isinstance(value, float) else f"{value!s:<10}"
    return f"{label:<40} {text}".rstrip()


def serve_lines(result: BenchServeResult) -> Iterator[str]:
    m = result.metrics
    request = result.request
    yield "kvplan prediction of `vllm bench serve` (an estimate, not a measurement)"
    yield "{s:{c}^{n}}".format(s=" Serving Benchmark Result (predicted) ", n=50, c="=")
    yield _row("Successful requests:", m["completed"])
    yield _row("Failed requests:", m["failed"])
    if request.max_concurrency is not None:
        yield _row("Maximum request concurrency:", request.max_concurrency)
    if not math.isinf(request.request_rate):
        yield _row("Request rate configured (RPS):", float(request.request_rate))
    yield _row("Benchmark duration (s):", m["duration"])
    yield _row("Total input tokens:", m["total_input_tokens"])
    yield _row("Total generated tokens:", m["total_output_tokens"])
    yield _row("Request throughput (req/s):", m["request_throughput"])
    yield _row("Output token throughput (tok/s):", m["output_throughput"])
    yield _row("Peak output token throughput (tok/s):", m["max_output_tokens_per_s"])
    yield _row("Peak concurrent requests:", float(m["max_concurrent_requests"]))  # type: ignore[arg-type]
    yield _row("Total token throughput (tok/s):", m["total_token_throughput"])
    for metric in request.percentile_metrics:
        name, header = _HEADERS[metric]
        yield "{s:{c}^{n}}".format(s=header, n=50, c="-")
        yield _row(f"Mean {name} (ms):", m[f"mean_{metric}_ms"])
        yield _row(f"Median {name} (ms):", m[f"median_{metric}_ms"])
        for p in request.metric_percentiles:
            word = str(int(p)) if int(p) == p else str(p)
            yield _row(f"P{word} {name} (ms):", m[f"p{word}_{metric}_ms"])
    yield "=" * 50
    engine = result.engine_ttft_ms
    yield (f"engine TTFT (arrival in the engine to first token): mean {engine['mean']:.2f} ms, median "
           f"{engine['median']:.2f} ms, P99 {engine['p99']:.2f} ms; the rest of TTFT is the API server")
    kvplan = m["kvplan"]
    assert isinstance(kvplan, dict)
    yield f"step time: {kvplan['step_time_method']}"
    yield f"front end: {kvplan['frontend_method']}"
    yield (f"engine: vLLM {kvplan['vllm_semantics']} scheduler, {kvplan['num_gpu_blocks']:,} KV blocks, "
           f"max_num_seqs {kvplan['max_num_seqs']}, max_num_batched_tokens {kvplan['max_num_batched_tokens']:,}")


def compare_lines(comparison: Comparison) -> Iterator[str]:
    yield f"predicted: {comparison.predicted_source}" + ("" if comparison.predicted_is_prediction else
                                                           " (not a kvplan prediction)")
    yield f"measured:  {comparison.measured_source}" + (" (a kvplan prediction, not a measurement)"
                                                         if comparison.measured_is_prediction else "")
    yield f"{'metric':<28} {'predicted':>12} {'measured':>12} {'error':>8}"
    for row in comparison.rows:
        error = row.relative_error
        shown = "n/a" if error is None else f"{error * 100:+.1f}%"
        yield f"{row.metric:<28} {row.predicted:>12.2f} {row.measured:>12.2f} {shown:>8}"
