import csv
import json
import os
import subprocess
import sys
from pathlib import Path

from kvplan.sources.installed import default_release
from tests.no_torch import kvplan_process
from tests.usecases.simulate.factories import mix


def kvplan(*args, hash_seed="0"):
    # a different PYTHONHASHSEED per run shows that nothing depends on Python's string hashing
    return kvplan_process("simulate", *map(str, args), env={**os.environ, "PYTHONHASHSEED": hash_seed})


def write(tmp_path: Path, document, name="workload.json") -> Path:
    path = tmp_path / name
    path.write_text(json.dumps(document))
    return path


def test_json_is_data_only_deterministic_and_torch_free(tmp_path):
    workload = write(tmp_path, mix())
    first = kvplan(workload, "--json", hash_seed="1")
    second = kvplan(workload, "--json", hash_seed="2")
    assert first.returncode == 0, first.stderr
    assert first.stdout == second.stdout
    document = json.loads(first.stdout)
    assert document["schema_version"] == 1 and document["kind"] == "kvplan.simulation"
    # vllm serve of the default release unless the workload or --vllm-version / --scheduling say otherwise
    assert document["vllm_semantics"] == document["engine"]["vllm_version"] == default_release().version
    assert document["engine"]["scheduling"] == "async"
    assert document["timing"]["estimate"] is True
    assert document["num_finished"] == document["num_requests"] == 40
    assert "HEAVY=\n" in first.stderr


def test_a_saved_profile_runs_without_torch(tmp_path):
    profile = {"schema_version": 1, "kind": "kvplan.profile", "provenance": {"vllm_semantics": "0.17.1"}, "plan": {
        "model": "Qwen/Qwen2-0.5B-Instruct", "num_blocks": 300, "block_size": 16, "max_model_len": 2048,
        "max_num_batched_tokens": 1024, "max_num_seqs": 16, "enable_prefix_caching": True,
        "kv_bytes_per_token": 12288, "weights_bytes": 988065536, "gpu": None}}
    write(tmp_path, profile, "profile.json")
    workload = write(tmp_path, mix(engine={"profile": "profile.json"}, timing={}))
    result = kvplan(workload, "--json", "--gpu", "l4-24gb", "--vllm-version", "0.17.1")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)
    assert document["engine"]["source"] == "profile" and document["engine"]["num_gpu_blocks"] == 300
    assert document["timing"]["model"] == "roofline" and document["timing"]["gpu"] == "l4-24gb"
    assert "HEAVY=\n" in result.stderr


def test_bad_workloads_exit_2_with_one_line_naming_the_field(tmp_path):
    bad = mix(classes=[{"name": "a", "prompt_tokens": {"dist": "gaussian"}, "output_tokens": 3}])
    result = kvplan(write(tmp_path, bad), "--json")
    assert result.returncode == 2 and result.stdout == ""
    (line,) = [x for x in result.stderr.splitlines() if not x.startswith("HEAVY=")]
    assert line.startswith("kvplan: error: workload.json: classes[0].prompt_tokens.dist: expected one of: constant")
    missing = kvplan(write(tmp_path, mix(engine={"profile": "gone.json"})))
    assert missing.returncode == 2 and "engine.profile (gone.json): no such file" in missing.stderr


def test_a_stalled_run_exits_3_and_still_reports(tmp_path):
    # 3 usable blocks of 16 tokens cannot hold the request's 70 (block size given: any release)
    document = {"schema_version": 1, "engine": {"num_gpu_blocks": 4, "block_size": 16}, "timing": {"step_time_ms": 10},
                "requests": [{"arrival_time": 0.0, "unique_len": 40, "max_tokens": 30}]}
    result = kvplan(write(tmp_path, document), "--json")
    assert result.returncode == 3
    assert json.loads(result.stdout)["stalled"] is True
    assert "stalled" in result.stderr


def test_output_files_and_overrides(tmp_path):
    workload = write(tmp_path, mix())
    out, timeline, report = tmp_path / "out.json", tmp_path / "steps.csv", tmp_path / "report.html"
    result = kvplan(workload, "--json", "-o", out, "--timeline", timeline, "--report", report,
                    "--num-gpu-blocks", "40", "--max-num-seqs", "4", "--no-enable-prefix-caching",
                    "--step-time-ms", "20", "--seed", "5")
    assert result.returncode == 0, result.stderr
    assert result.stdout == ""
    document = json.loads(out.read_text())
    engine = document["engine"]
    assert (engine["num_gpu_blocks"], engine["max_num_seqs"], engine["enable_prefix_caching"]) == (40, 4, False)
    assert document["timing"] == {"estimate": True, "model": "constant", "source": "--step-time-ms",
                                  "step_time_ms": 20.0}
    assert document["workload"]["seed"] == 5
    rows = list(csv.DictReader(timeline.open()))
    assert len(rows) == document["num_steps"]
    assert sum(int(r["num_scheduled_tokens"]) for r in rows) > 0
    assert float(rows[1]["start_s_estimate"]) == 0.02 + float(rows[0]["start_s_estimate"])
    assert "<svg" in report.read_text()


def test_the_workload_file_is_never_overwritten(tmp_path):
    workload = write(tmp_path, mix())
    before = workload.read_text()
    result = kvplan(workload, "-o", workload)
    assert result.returncode == 2 and "this command reads that file" in result.stderr
    assert workload.read_text() == before
    log = tmp_path / "log.jsonl"
    log.write_text('{"arrival_time": 0, "unique_len": 8, "max_tokens": 2}\n')
    listed = write(tmp_path, {"schema_version": 1, "engine": {"num_gpu_blocks": 16}, "timing": {"step_time_ms": 5},
                              "requests": "log.jsonl"}, "listed.json")
    result = kvplan(listed, "--timeline", log)
    assert result.returncode == 2 and "log.jsonl: this command reads that file" in result.stderr
    assert log.read_text().count("\n") == 1


def test_the_text_report_labels_estimates(tmp_path):
    result = kvplan(write(tmp_path, mix()))
    assert result.returncode == 0, result.stderr
    text = result.stdout
    for expected in ("KV-cache usage over time", "prefix cache", "preemptions", "Per class", "zero preemptions",
                     "(est.)", "estimate"):
        assert expected in text


def test_find_max_rate_reports_an_estimate(tmp_path):
    result = kvplan(write(tmp_path, mix(arrival={"process": "poisson", "rate": 5, "count": 60})), "--json",
                    "--find-max-rate")
    assert result.returncode == 0, result.stderr
    rate = json.loads(result.stdout)["capacity"]["max_rate"]
    assert rate["max_sustained_rate_rps_estimate"] > 0 and rate["trials"]


def test_the_release_and_the_scheduling_mode_are_options(tmp_path):
    workload = write(tmp_path, mix())
    sync = json.loads(kvplan(workload, "--json", "--vllm-version", "0.17.1", "--scheduling", "sync").stdout)
    served = json.loads(kvplan(workload, "--json", "--vllm-version", "0.17.1").stdout)
    assert (sync["vllm_semantics"], sync["engine"]["scheduling"]) == ("0.17.1", "sync")
    assert served["engine"]["scheduling"] == "async" and served["num_finished"] == sync["num_finished"]
    # async: a request's last token is known one step after it was scheduled
    assert served["num_steps"] > sync["num_steps"]
    bad = kvplan(workload, "--scheduling", "later")
    assert bad.returncode == 2 and "--scheduling: expected one of: sync, async, got 'later'" in bad.stderr
    # the workload may name its release; the command line wins
    engine = {**mix()["engine"], "vllm_version": "0.33.0", "scheduling": "sync"}
    named = write(tmp_path, mix(engine=engine), "named.json")
    document = json.loads(kvplan(named, "--json").stdout)
    assert (document["vllm_semantics"], document["engine"]["scheduling"]) == ("0.33.0", "sync")
    assert json.loads(kvplan(named, "--json", "--vllm-version", "0.17.1").stdout)["vllm_semantics"] == "0.17.1"
    wrong = kvplan(write(tmp_path, mix(engine={**engine, "vllm_version": "0.2"}), "wrong.json"))
    assert wrong.returncode == 2
    assert "engine.vllm_version: expected one of: 0.17.1, 0.33.0, 0.34.0, got '0.2'" in wrong.stderr


def test_the_zero_preemption_advice_fed_back_gives_zero_preemptions():
    """The advice counts the null block: its kv_bytes, given to `plan --kv-cache-memory`, sizes the
    very pool it advises, and simulating on that pool preempts nothing."""
    chat = Path(__file__).resolve().parents[2] / "examples" / "checks" / "workloads" / "chat.json"
    first = kvplan(chat, "--json")
    assert first.returncode == 0, first.stderr
    result = json.loads(first.stdout)
    advice = result["capacity"]["zero_preemption"]
    assert advice["num_gpu_blocks"] == advice["peak_used_blocks"] + 1
    assert advice["kv_tokens"] == advice["num_gpu_blocks"] * result["engine"]["block_size"]
    # planned under the release the workload ran (chat.json names 0.17.1)
    planned = subprocess.run([sys.executable, "-m", "kvplan", "plan", "--model", result["engine"]["model"],
                              "--kv-cache-memory", str(advice["kv_bytes"]), "--json",
                              "--vllm-version", result["vllm_semantics"]],
                             capture_output=True, text=True, check=True)
    num_blocks = json.loads(planned.stdout)["num_blocks"]
    assert num_blocks == advice["num_gpu_blocks"]
    again = kvplan(chat, "--num-gpu-blocks", num_blocks, "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["preemptions"]["total"] == 0
    # one block fewer is not enough: the advice is the smallest pool
    short = kvplan(chat, "--num-gpu-blocks", num_blocks - 1, "--json")
    assert json.loads(short.stdout)["preemptions"]["total"] > 0
