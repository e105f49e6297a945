"""`kvplan bench serve` (vllm bench serve's arguments, predicted) and `kvplan bench compare`."""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path

import typer

from kvplan.cli.options import EngineOptions, command_flags, engine_options
from kvplan.cli.outputs import prepare_outputs
from kvplan.cli.root import JSON, app
from kvplan.errors import KvplanError
from kvplan.files import atomic_output
from kvplan.report.jsonout import dumps, to_jsonable
from kvplan.report.stderr import warn_once
from kvplan.semantics.engine.args import FETCHES, PRICES, SCHEDULES, SIZES, named
from kvplan.usecases.simulate.frontend import FrontEnd

bench_app = typer.Typer(name="bench", help="`vllm bench serve`, predicted; a prediction against a measurement.",
                        no_args_is_help=True)
app.add_typer(bench_app, name="bench")

# the order bench's --help has always shown its flags in (only the order: which engine arguments it takes
# is their roles', and one missing here is shown after these)
_BENCH_HELP = (
    "model", "gpu", "gpu_memory", "gpu_memory_utilization", "kv_cache_memory_bytes", "num_gpu_blocks", "block_size",
    "max_model_len", "max_num_batched_tokens", "max_num_seqs", "kv_cache_dtype", "dtype", "tensor_parallel_size",
    "pipeline_parallel_size", "enable_prefix_caching", "enable_chunked_prefill", "trust_remote_code", "offline",
    "revision", "vllm_version", "scheduling", "enforce_eager", "step_time",
)
# simulate's engine on the model bench names: the scheduler's settings, what sizes and fetches the pool
# planned from the model, and what prices the steps
BENCH_ENGINE = command_flags(
    ("model", *named(SCHEDULES, SIZES, FETCHES, PRICES)),
    ("gpu", "gpu_memory", "num_gpu_blocks", "offline", "vllm_version", "scheduling", "step_time"), _BENCH_HELP)


def _rate(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise KvplanError(f"--request-rate takes a number of requests per second or inf, got {text!r}") from None
    if math.isnan(value) or value <= 0:
        raise KvplanError("--request-rate must be more than 0 (inf sends every prompt at once)")
    return value


def _numbers(text: str, flag: str) -> tuple[float, ...]:
    try:
        return tuple(float(part) for part in text.split(",") if part.strip())
    except ValueError:
        raise KvplanError(f"{flag} takes comma-separated numbers, e.g. 50,90,99; got {text!r}") from None


@bench_app.command("serve")
@engine_options(*BENCH_ENGINE)
def serve_command(
    *,
    engine: EngineOptions,
    dataset_name: str = typer.Option("random", "--dataset-name", help="Only random: prompts of random tokens."),
    random_input_len: int = typer.Option(1024, "--random-input-len", "--input-len", help="Prompt tokens."),
    random_output_len: int = typer.Option(128, "--random-output-len", "--output-len", help="Output tokens."),
    random_range_ratio: float = typer.Option(
        0.0, "--random-range-ratio", help="Lengths uniform in [L (1 - r), L (1 + r)]; 0: fixed."),
    random_prefix_len: int = typer.Option(0, "--random-prefix-len", help="A prefix every prompt shares (tokens)."),
    num_prompts: int = typer.Option(1000, "--num-prompts", help="Requests in the benchmark."),
    request_rate: str = typer.Option("inf", "--request-rate", help="Requests per second; inf sends all at t=0."),
    burstiness: float = typer.Option(1.0, "--burstiness", help="Gamma shape of the gaps; 1 is Poisson."),
    max_concurrency: int | None = typer.Option(
        None, "--max-concurrency", help="A closed loop: at most this many requests in flight, each client sending "
        "its next request when its previous one has finished."),
    ignore_eos: bool = typer.Option(
        False, "--ignore-eos", help="Accepted for vllm bench serve's command lines: the random dataset always "
        "generates its full output length (vLLM sets ignore_eos for it)."),
    seed: int = typer.Option(0, "--seed", help="Seed of the lengths and arrival gaps (kvplan's own stream)."),
    percentile_metrics: str = typer.Option("ttft,tpot,itl", "--percentile-metrics",
                                           help="Metrics to report: ttft, tpot, itl, e2el."),
    metric_percentiles: str = typer.Option("99", "--metric-percentiles", help="Percentiles, e.g. 50,90,99."),
    save_result: bool = typer.Option(False, "--save-result", help="Save the result as a JSON file."),
    result_filename: Path | None = typer.Option(None, "--result-filename", help="Where --save-result writes."),
    compare_with: Path | None = typer.Option(
        None, "--compare", help="Compare the prediction with a real vllm bench serve result file."),
    frontend_request_ms: float | None = typer.Option(
        None, "--frontend-request-ms", help="Serial API-server work per request (docs/accuracy.md)."),
    frontend_token_ms: float | None = typer.Option(
        None, "--frontend-token-ms", help="Serial API-server work per output token."),
    frontend_latency_ms: float | None = typer.Option(
        None, "--frontend-latency-ms", help="From the API server to the client, per token."),
    frontend_stream_wait_ms: float | None = typer.Option(
        None, "--frontend-stream-wait-ms", help="Added to each admission per stream in flight."),
    no_frontend: bool = typer.Option(False, "--no-frontend", help="Engine latency only (no API server)."),
    step_time_ms: float | None = typer.Option(None, "--step-time-ms", help="Every step takes this long."),
    json_output: bool = JSON,
) -> None:
    """Predict what `vllm bench serve` measures against `vllm serve` with these engine options: the same
    arguments, the same result table and metric names, every figure an estimate.

    Exit codes: 0 done, 2 bad options, 1 the model does not fit."""
    from kvplan.report.bench_console import compare_lines, serve_lines
    from kvplan.usecases.bench.compare import compare, load_result
    from kvplan.usecases.bench.serve import BenchServeRequest, bench_serve
    from kvplan.usecases.simulate.engine_source import EngineOverrides

    if dataset_name != "random":
        raise KvplanError(f"--dataset-name {dataset_name}: kvplan predicts the random dataset only (its lengths "
                          "are known without a tokenizer)")
    file = result_filename if result_filename is not None else (Path("kvplan-bench-serve.json") if save_result
                                                                else None)
    if result_filename is not None and not save_result:
        raise KvplanError("--result-filename needs --save-result (as in vllm bench serve)")
    prepare_outputs([("--result-filename", file)], (compare_with,) if compare_with else ())
    frontend = FrontEnd(0.0, 0.0, 0.0, 0.0, "--no-frontend") if no_frontend else _frontend(
        frontend_request_ms, frontend_token_ms, frontend_latency_ms, frontend_stream_wait_ms)
    measured = load_result(compare_with) if compare_with is not None else None
    if engine.model is None:
        raise KvplanError("no model given; usage: kvplan bench serve --model MODEL [OPTIONS], as vllm bench serve "
                          "against `vllm serve MODEL`")
    request = BenchServeRequest(
        model=engine.model, overrides=engine.pick(EngineOverrides), release=engine.release(),
        random_input_len=random_input_len, random_output_len=random_output_len,
        random_range_ratio=random_range_ratio, random_prefix_len=random_prefix_len, num_prompts=num_prompts,
        request_rate=_rate(request_rate), burstiness=burstiness, max_concurrency=max_concurrency, seed=seed,
        percentile_metrics=tuple(m.strip() for m in percentile_metrics.split(",") if m.strip()),
        metric_percentiles=_numbers(metric_percentiles, "--metric-percentiles"), frontend=frontend,
        step_time_ms=step_time_ms,
    )
    del ignore_eos  # the random dataset's outputs are their full length either way
    result = bench_serve(request)
    warn_once(result.notes)
    document = result.metrics
    comparison = compare(document, measured, "kvplan bench serve", str(compare_with)) if measured else None
    if file is not None:
        try:
            with atomic_output(file) as stream:
                stream.write(json.dumps(to_jsonable(document)) + "\n")
        except OSError as error:
            raise KvplanError(f"cannot write {file}: {error.strerror}") from None
        print(f"kvplan: wrote the predicted result to {file}", file=sys.stderr)
    if json_output:
        out = dict(document)
        if comparison is not None:
            out["comparison"] = _comparison_json(comparison)
        sys.stdout.write(dumps(out) + "\n")
        return
    for line in serve_lines(result):
        print(line)
    if comparison is not None:
        print()
        for line in compare_lines(comparison):
            print(line)


def _frontend(request_ms: float | None, token_ms: float | None, latency_ms: float | None,
              stream_wait_ms: float | None) -> FrontEnd:
    given = {"request_s": request_ms, "token_s": token_ms, "latency_s": latency_ms, "stream_wait_s": stream_wait_ms}
    for flag, value in zip(("--frontend-request-ms", "--frontend-token-ms", "--frontend-latency-ms",
                            "--frontend-stream-wait-ms"), given.values(), strict=True):
        if value is not None and not 0 <= value <= 10**6:
            raise KvplanError(f"{flag} must be from 0 to 1000000 ms, got {value}")
    chosen = {k: v / 1e3 for k, v in given.items() if v is not None}
    if not chosen:
        return FrontEnd()
    return FrontEnd(**chosen, source="--frontend-* flags and defaults")


def _comparison_json(comparison: object) -> dict[str, object]:
    from kvplan.usecases.bench.compare import Comparison

    assert isinstance(comparison, Comparison)
    return {
        "predicted": comparison.predicted_source,
        "measured": comparison.measured_source,
        "metrics": [{"metric": r.metric, "predicted": r.predicted, "measured": r.measured,
                     "relative_error": r.relative_error} for r in comparison.rows],
    }


@bench_app.command("compare")
def compare_command(
    predicted: Path = typer.Argument(..., metavar="PREDICTED.json", help="kvplan bench serve --save-result's file."),
    measured: Path = typer.Argument(..., metavar="MEASURED.json", help="vllm bench serve --save-result's file."),
    json_output: bool = JSON,
) -> None:
    """Metric by metric: predicted, measured, and the error relative to the measurement.

    Exit codes: 0 done, 2 a file is not a vllm bench serve result."""
    from kvplan.report.bench_console import compare_lines
    from kvplan.usecases.bench.compare import compare, load_result

    comparison = compare(load_result(predicted), load_result(measured), str(predicted), str(measured))
    if json_output:
        sys.stdout.write(dumps({"schema_version": 1, **_comparison_json(comparison)}) + "\n")
        return
    for line in compare_lines(comparison):
        print(line)
