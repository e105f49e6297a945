"""`kvplan fit` end to end, checked both ways: every configuration it reports meets the objectives
when `kvplan simulate` runs with the printed flags, and the cheapest family it rejects really
misses them (or really does not hold the concurrency goal, by `kvplan plan`)."""

from __future__ import annotations

import json
import shlex
from pathlib import Path

import jsonschema
import pytest

REPO = Path(__file__).resolve().parents[2]
SCHEMA = json.loads((REPO / "docs" / "schemas" / "fit.json").read_text())
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"
TTFT_P95 = 0.5


def chat(tmp_path: Path, count: int = 100, rate: float = 5.0) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    document = json.loads((REPO / "examples" / "workloads" / "chat-5rps.json").read_text())
    document["arrival"] = {"process": "poisson", "rate": rate, "count": count}
    path = tmp_path / "chat.json"
    path.write_text(json.dumps(document))
    return path


def flags(vllm_serve_args: str) -> list[str]:
    """The flags of a `vllm serve MODEL ...` line, as kvplan spells them."""
    words = shlex.split(vllm_serve_args)
    assert words[:3] == ["vllm", "serve", LLAMA]
    return ["--scheduling" if word == "--no-async-scheduling" else word for word in words[3:]]


def simulate_with(kvplan, workload: Path, gpu: str, vllm_serve_args: str, *more: str) -> dict:
    code, out, err = kvplan("simulate", str(workload), "--gpu", gpu, *flags(vllm_serve_args), *more, "--json")
    assert code == 0, err
    return json.loads(out)


@pytest.mark.slow
def test_what_fit_reports_simulate_confirms_both_ways(tmp_path, kvplan):
    workload = chat(tmp_path)
    report = tmp_path / "fit.html"
    code, out, err = kvplan(
        "fit", "--workload", str(workload), "--slo", f"ttft_p95={TTFT_P95 * 1000:g}ms",
        "--gpus", "l4-24gb,a100-sxm-80gb", "--kv-cache-dtype", "auto,fp8",
        "--price", "l4-24gb=0.8,a100-sxm-80gb=1.5", "--workers", "1", "--json", "--report", str(report))
    assert code == 0, err
    document = json.loads(out)
    jsonschema.validate(document, SCHEMA)
    # ranked by what serving the asked rate costs per hour: copies of a setup that cannot carry it alone
    assert document["ranked_by"] == "cost_per_hour_at_rate"
    configurations, rejected = document["configurations"], document["rejected"]
    assert configurations
    hourly_at_rate = [c["cost_per_hour_at_rate"] for c in configurations]
    assert hourly_at_rate == sorted(hourly_at_rate)
    for c in configurations:
        assert c["gpus_at_rate"] == c["replicas"] * c["num_gpus"]
        assert c["cost_per_hour_at_rate"] == pytest.approx(c["replicas"] * c["cost_per_hour"])
    # pruning: plans for every configuration, simulations only for those that fit
    counts = document["counts"]
    assert counts["simulated"] <= counts["planned"] < counts["configurations"]
    # the answer says how its latencies were priced: the step-time model simulate uses
    assert document["estimate_methods"]
    assert all(m.startswith("roofline with efficiency factors on ") for m in document["estimate_methods"])

    for configuration in configurations:
        copies = configuration["replicas"]
        # each copy serves its share of the rate: simulate that share
        share = workload if copies == 1 else chat(tmp_path / f"share{copies}", rate=5.0 / copies)
        simulated = simulate_with(kvplan, share, configuration["gpu"], configuration["vllm_serve_args"])
        ttft = simulated["latency"]["ttft_s_estimate"]["p95"]
        assert ttft <= TTFT_P95
        if copies == 1:
            assert ttft == pytest.approx(configuration["ttft_p95_s"], rel=1e-5)
            assert simulated["preemptions"]["total"] == configuration["preemptions"]
        else:
            assert configuration["max_sustained_rate"] * copies >= configuration["rate"]
        assert simulated["engine"]["num_gpu_blocks"] == configuration["num_gpu_blocks"]

    hourly = [r["cost_per_hour"] for r in rejected]
    assert hourly == sorted(hourly)
    for family in rejected:
        # rejected with a workload: it keeps the objectives at no rate tried, so no number of copies helps
        if family["reason"] == "slo_missed":
            assert "missed at every rate tried" in family["detail"]

    page = report.read_text()
    assert page.startswith("<!DOCTYPE html>") and "<svg" in page and "Pareto front" in page
    assert "<script" not in page and "http://" not in page.replace("http://www.w3.org/2000/svg", "")
    for configuration in configurations:
        assert configuration["vllm_serve_args"] in page


@pytest.mark.slow
def test_a_concurrency_goal_is_answered_by_plan_alone(kvplan):
    # 48 requests of 8,192 tokens: 6,144 blocks of 64 tokens (the default release's block size); an L4
    # holds far fewer
    code, out, err = kvplan("fit", "--model", LLAMA, "--concurrency", "48@8192", "--gpus",
                            "l4-24gb,h100-sxm-80gb", "--max-num-seqs", "64", "--workers", "1", "--json")
    assert code == 0, err
    document = json.loads(out)
    jsonschema.validate(document, SCHEMA)
    assert document["counts"]["simulated"] == 0 and document["ranked_by"] == "num_gpus"
    [passing] = document["configurations"]
    [rejected] = document["rejected"]
    assert passing["gpu"] == "h100-sxm-80gb" and passing["concurrency_at_target"] >= 48
    assert rejected["gpu"] == "l4-24gb" and rejected["reason"] in ("does_not_fit", "short_of_concurrency")
    for entry, holds in ((passing, True), (rejected["closest"], False)):
        code, out, err = kvplan("plan", "--model", LLAMA, "--gpu", entry["gpu"], *flags(entry["vllm_serve_args"]),
                                "--json")
        plan = json.loads(out)
        assert (plan["fits"] and plan["num_blocks"] - 1 >= 48 * 8192 // plan["block_size"]) is holds
    # the same search for people, with the closing note on what it planned
    code, out, err = kvplan("fit", "--model", LLAMA, "--concurrency", "48@8192", "--gpus",
                            "l4-24gb,h100-sxm-80gb", "--max-num-seqs", "64", "--workers", "1")
    assert code == 0, err
    assert "vllm serve meta-llama/Llama-3.1-8B-Instruct" in out and "Searched 4 configurations" in out
    assert "l4-24gb" in out.split("Rejected families")[1]


def test_nothing_meets_the_goal_is_exit_1(kvplan):
    code, out, err = kvplan("fit", "--model", LLAMA, "--concurrency", "64@131072", "--gpus", "l4-24gb",
                            "--kv-cache-memory", "4GiB,8GiB", "--workers", "1", "--json")
    assert code == 1, err
    document = json.loads(out)
    assert document["configurations"] == [] and document["rejected"][0]["reason"] == "does_not_fit"
    assert document["counts"] == {**document["counts"], "planned": 1, "inferred": 1}


@pytest.mark.parametrize(("args", "message"), [
    (("--gpus", "l4-24gb"), "give --model"),
    (("--model", LLAMA, "--concurrency", "4@1024"), "give --gpus"),
    (("--model", LLAMA, "--gpus", "l4-24gb"), "give the traffic"),
    (("--model", LLAMA, "--gpus", "l4-24gb", "--concurrency", "4@1024", "--slo", "ttft_p95=1s"), "--slo needs"),
    (("--model", LLAMA, "--gpus", "l4-24gb", "--concurrency", "4@1024", "--kv-cache-memory", "4GiB",
      "--gpu-memory-utilization", "0.9"), "give one of them"),
    (("--model", LLAMA, "--gpus", "l4-24gb", "--concurrency", "4@1024", "--executor", "slurm"), "--executor takes"),
])
def test_bad_input_is_one_line_and_exit_2(kvplan, args, message):
    code, out, err = kvplan("fit", *args)
    assert code == 2 and out == ""
    assert message in err and err.count("\n") == 1


def test_rate_scales_the_workload_and_objectives_judge_each_run(tmp_path, kvplan):
    from tests.usecases.simulate.factories import mix

    workload = tmp_path / "mix.json"
    workload.write_text(json.dumps(mix()))                  # 40 requests at 20/s, 10 ms per step
    common = ("fit", "--model", "Qwen/Qwen2-0.5B-Instruct", "--workload", str(workload), "--gpus", "l4-24gb",
              "--kv-cache-memory", "64MiB,1GiB", "--workers", "1", "--json")
    code, out, err = kvplan(*common, "--slo", "preemptions=0")
    assert code == 0, err
    own = json.loads(out)
    code, out, err = kvplan(*common, "--slo", "preemptions=0", "--rate", "20/s")
    assert json.loads(out)["configurations"] == own["configurations"]
    code, out, err = kvplan(*common, "--slo", "preemptions=0", "--rate", "10/s")
    slower = json.loads(out)
    assert [c["rate"] for c in own["configurations"]] == [20.0, 20.0]
    assert [c["rate"] for c in slower["configurations"]] == [10.0, 10.0]
    # the same highest rate, reached from another starting point (within the search's 10%)
    assert slower["configurations"][0]["max_sustained_rate"] == pytest.approx(
        own["configurations"][0]["max_sustained_rate"], rel=0.1)
    for configuration in own["configurations"]:
        assert configuration["slo_figures"] == {"preemptions": 0.0} and configuration["kv_cache_memory_bytes"]
        assert "--kv-cache-memory-bytes" in configuration["vllm_serve_args"]
    code, out, err = kvplan(*common, "--slo", "ttft_p50=1ms")      # 10 ms steps: never
    assert code == 1
    document = json.loads(out)
    assert document["configurations"] == [] and document["rejected"][0]["reason"] == "slo_missed"
    assert "missed at every rate tried" in document["rejected"][0]["detail"]


def test_tensor_parallel_families_plan_through_the_same_path(kvplan):
    # with the KV memory per GPU given, plan sizes TP ranks exactly (no profile run involved)
    code, out, err = kvplan("fit", "--model", LLAMA, "--concurrency", "32@8192", "--gpus", "h100-sxm-80gb",
                            "-tp", "1,2", "--kv-cache-memory", "8GiB,17GiB", "--max-num-seqs", "64", "--workers", "1",
                            "--json")
    assert code == 0, err
    document = json.loads(out)
    # 32 x 8,192 tokens: 16,384 blocks of 16; a block is 2 MiB on one GPU, 1 MiB per rank on two
    [passing] = document["configurations"]
    assert (passing["tensor_parallel_size"], passing["num_gpus"]) == (2, 2)
    assert passing["concurrency_at_target"] == 34.0
    assert "--tensor-parallel-size 2 --kv-cache-memory-bytes 18253611008" in passing["vllm_serve_args"]
    code, out, err = kvplan("plan", "--model", LLAMA, "--gpu", "h100-sxm-80gb", "--tensor-parallel-size", "2",
                            "--kv-cache-memory", "17GiB", "--max-model-len", str(passing["max_model_len"]),
                            "--max-num-seqs", "64", "--json")
    plan = json.loads(out)
    assert plan["num_blocks"] == passing["num_gpu_blocks"] and plan["gpu_kv_cache_tokens"] == passing["kv_cache_tokens"]
    [rejected] = document["rejected"]
    assert rejected["tensor_parallel_size"] == 1 and rejected["reason"] == "short_of_concurrency"
    # on an L4 the weights and 17 GiB of KV cache per GPU overflow it: vLLM would run out of memory
    code, out, err = kvplan("fit", "--model", LLAMA, "--concurrency", "32@8192", "--gpus", "l4-24gb", "-tp", "2",
                            "--kv-cache-memory", "17GiB", "--max-num-seqs", "64", "--workers", "1", "--json")
    [overflow] = json.loads(out)["rejected"]
    assert code == 1 and overflow["reason"] == "does_not_fit" and "need more than the GPU's" in overflow["detail"]


@pytest.mark.slow
def test_tensor_parallel_ranks_predicted_from_the_gpu(kvplan):
    # 16 requests of 8,192 tokens do not fit one L4's KV cache; two L4s (TP 2) hold half the heads each
    code, out, err = kvplan("fit", "--model", LLAMA, "--concurrency", "16@8192", "--gpus", "l4-24gb", "-tp", "1,2",
                            "--max-num-seqs", "64", "--workers", "1", "--json")
    assert code == 0, err
    document = json.loads(out)
    [passing] = document["configurations"]
    assert passing["tensor_parallel_size"] == 2 and passing["kv_cache_memory_source"].startswith("predicted")
    assert document["rejected"][0]["tensor_parallel_size"] == 1
    code, out, err = kvplan("plan", "--model", LLAMA, "--gpu", "l4-24gb", *flags(passing["vllm_serve_args"]), "--json")
    plan = json.loads(out)
    assert plan["num_blocks"] == passing["num_gpu_blocks"] and plan["kv_cache_memory_bytes"] == passing[
        "kv_cache_memory_bytes"]
