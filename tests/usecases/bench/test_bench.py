"""kvplan bench serve and compare: vllm bench serve's arguments, arrivals, result shape and metrics."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kvplan.cli import app
from kvplan.semantics.engine.args import EngineArgs
from kvplan.usecases.bench.compare import compare, load_result
from kvplan.usecases.bench.serve import BenchServeRequest, bench_serve, send_times
from kvplan.usecases.simulate.engine_source import EngineOverrides
from kvplan.usecases.simulate.frontend import FrontEnd, FrontEndQueue
from tests.no_torch import kvplan_process

DATA = Path(__file__).resolve().parents[2] / "data" / "bench"
QWEN3 = str(DATA / "models" / "Qwen--Qwen3-0.6B")
MEASURED = DATA / "vllm-results" / "F_vanilla_r16.seed42.json"
# the result keys vllm bench serve --save-result writes (vllm/benchmarks/serve.py), all of which kvplan predicts
VLLM_KEYS = ("backend", "model_id", "num_prompts", "request_rate", "burstiness", "max_concurrency", "duration",
             "completed", "failed", "total_input_tokens", "total_output_tokens", "request_throughput",
             "output_throughput", "total_token_throughput", "max_output_tokens_per_s", "max_concurrent_requests")


def small(**changes) -> BenchServeRequest:
    base = dict(model=QWEN3, overrides=EngineOverrides(EngineArgs(kv_cache_memory_bytes=4 << 30, max_model_len=2048),
                                                        gpu="h100-sxm-80gb"),
                random_input_len=512, random_output_len=32, num_prompts=40, seed=1)
    base.update(changes)
    return BenchServeRequest(**base)


def test_send_times_follow_vllm_bench_serve():
    assert send_times(small(request_rate=math.inf)) == [0.0] * 40
    times = send_times(small(request_rate=8.0))
    assert times == sorted(times) and times[-1] == pytest.approx(40 / 8.0)   # rescaled as vLLM does
    regular = send_times(small(request_rate=8.0, burstiness=math.inf))
    assert regular == pytest.approx([(i + 1) / 8.0 for i in range(40)])
    bursty, smooth = send_times(small(request_rate=8.0, burstiness=0.2)), send_times(small(request_rate=8.0,
                                                                                         burstiness=20.0))
    gaps = [[b - a for a, b in itertools.pairwise(t)] for t in (bursty, smooth)]
    assert max(gaps[0]) > 3 * max(gaps[1])


def test_a_closed_loop_never_has_more_requests_in_flight_than_clients():
    result = bench_serve(small(max_concurrency=4))
    assert result.metrics["max_concurrent_requests"] == 4
    assert result.metrics["completed"] == 40
    open_loop = bench_serve(small())
    assert open_loop.metrics["max_concurrent_requests"] > 4
    # four clients wait for each other, so the run takes longer than when every request is sent at once
    assert result.metrics["duration"] > open_loop.metrics["duration"]


def test_client_ttft_is_the_engine_ttft_plus_the_front_end():
    with_front = bench_serve(small(max_concurrency=1, num_prompts=5))
    bare = bench_serve(small(max_concurrency=1, num_prompts=5, frontend=FrontEnd(0.0, 0.0, 0.0, 0.0, "none")))
    engine = bare.metrics["median_ttft_ms"]
    assert engine == pytest.approx(bare.engine_ttft_ms["median"], rel=1e-6)
    front = FrontEnd()
    assert with_front.metrics["median_ttft_ms"] == pytest.approx(
        engine + (front.request_s + front.token_s + front.latency_s) * 1e3, rel=0.05)


def test_the_front_end_limits_throughput_when_everything_arrives_at_once():
    # 200 requests at once: the API server admits one every request_ms (+ its tokens' streaming)
    front = FrontEnd(20e-3, 0.0, 0.0, 0.0, "test")
    result = bench_serve(small(num_prompts=200, frontend=front))
    assert result.metrics["request_throughput"] == pytest.approx(1 / 20e-3, rel=0.05)
    queue = FrontEndQueue(front)
    assert [queue.admit(0.0)[0] for _ in range(3)] == pytest.approx([0.02, 0.04, 0.06])


def test_itl_counts_every_gap_between_tokens():
    result = bench_serve(small(num_prompts=6, max_concurrency=2, percentile_metrics=("itl", "tpot"),
                               metric_percentiles=(50.0, 99.0)))
    m = result.metrics
    assert m["median_itl_ms"] == pytest.approx(m["p50_itl_ms"])
    # with steady decoding TPOT is the mean of a request's gaps
    assert m["mean_itl_ms"] == pytest.approx(m["mean_tpot_ms"], rel=0.02)
    assert "mean_ttft_ms" not in m


def test_bench_serve_cli_prints_vllm_s_table_and_saves_its_result(tmp_path):
    saved = tmp_path / "predicted.json"
    args = ["bench", "serve", "--model", QWEN3, "--gpu", "h100-sxm-80gb", "--kv-cache-memory", "4GiB",
            "--max-model-len", "2048", "--random-input-len", "512", "--random-output-len", "32", "--num-prompts", "30",
            "--request-rate", "16", "--seed", "42", "--vllm-version", "0.33.0", "--save-result", "--result-filename",
            str(saved)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    for line in ("Serving Benchmark Result", "Request rate configured (RPS):           16.00",
                 "Mean TTFT (ms):", "P99 ITL (ms):", "engine TTFT", "step time: roofline with efficiency factors"):
        assert line in result.stdout
    document = json.loads(saved.read_text())
    assert all(key in document for key in VLLM_KEYS)
    assert document["prediction"] is True and document["kvplan"]["estimate"] is True
    assert document["request_rate"] == 16.0 and document["completed"] == 30
    compared = CliRunner().invoke(app, ["bench", "compare", str(saved), str(MEASURED), "--json"])
    assert compared.exit_code == 0, compared.output
    rows = {row["metric"]: row for row in json.loads(compared.stdout)["metrics"]}
    assert {"request_throughput", "mean_ttft_ms", "p99_itl_ms", "median_tpot_ms"} <= set(rows)
    measured = json.loads(MEASURED.read_text())
    row = rows["mean_ttft_ms"]
    assert row["measured"] == measured["mean_ttft_ms"]
    assert row["relative_error"] == pytest.approx(row["predicted"] / row["measured"] - 1)


def test_compare_reads_a_real_vllm_result_file():
    measured = load_result(MEASURED)
    comparison = compare(measured, measured)
    assert {r.metric for r in comparison.rows} >= {"duration", "mean_ttft_ms", "std_itl_ms", "p99_tpot_ms"}
    assert all(r.relative_error == 0 for r in comparison.rows)


@pytest.mark.parametrize("args, message", [
    (["--request-rate", "0"], "--request-rate must be more than 0"),
    (["--dataset-name", "sharegpt"], "kvplan predicts the random dataset only"),
    (["--percentile-metrics", "ttft,goodput"], "unknown metric 'goodput'"),
    (["--result-filename", "x.json"], "--result-filename needs --save-result"),
])
def test_bad_arguments_are_one_line(args, message):
    result = kvplan_process("bench", "serve", "--model", QWEN3, "--kv-cache-memory", "4GiB", *args)
    assert result.returncode == 2
    assert message in result.stderr and len(result.stderr.strip().splitlines()) == 2   # the line, HEAVY=


def test_bench_serve_imports_no_torch_with_a_given_kv_cache():
    result = kvplan_process("bench", "serve", "--model", QWEN3, "--kv-cache-memory", "4GiB", "--num-prompts", "5",
                            "--random-output-len", "4", "--max-model-len", "2048", "--json")
    assert result.returncode == 0, result.stderr
    assert result.stderr.strip().splitlines()[-1] == "HEAVY="
    assert json.loads(result.stdout)["schema_version"] == 1


