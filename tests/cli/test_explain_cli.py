"""`kvplan explain` from the command line: exit codes, standard input, malformed input in one line,
and the saved profile reused by `plan --profile`, `simulate` and `check`."""

from __future__ import annotations

import io
import json
import math
import sys

import pytest

LLAMA_LOG = "vllm-0.19.0-llama-3.1-8b-h100-tp1.log"
OOM_LOG = "vllm-0.19.0-gpt-oss-20b-h100-oom.log"


@pytest.fixture
def logs(data_dir):
    return data_dir / "logs"


def test_a_log_that_started_exits_0_and_one_that_did_not_exits_1(kvplan, logs):
    code, out, _ = kvplan("explain", str(logs / LLAMA_LOG), "--no-predict")
    assert code == 0
    assert "vLLM 0.17.1 semantics" in out.splitlines()[0]
    assert "476,016" in out and "476,032" in out     # logged, and kvplan's sizing of the logged memory
    code, out, _ = kvplan("explain", str(logs / OOM_LOG), "--no-predict")
    assert code == 1
    assert "What ran out" in out and "--gpu-memory-utilization 0.9452" in out


def test_standard_input(kvplan, logs, monkeypatch):
    data = (logs / LLAMA_LOG).read_bytes()
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))
    code, out, _ = kvplan("explain", "-", "--no-predict", "--json")
    assert code == 0
    record = json.loads(out)
    assert record["log"]["path"] == "stdin" and record["log"]["vllm_version"] == "0.19.0"


@pytest.mark.parametrize(("content", "message"), [
    (b"just some text\n", "not a vLLM log"),
    (b"\x00\x01\x02binary", "NUL bytes"),
    (b"(APIServer pid=1) INFO 04-22 01:36:34 [entrypoints/launcher.py:46] Route: /health, Methods: GET\n",
     "without a start-up"),
])
def test_malformed_input_is_exit_2_with_one_line(kvplan, tmp_path, content, message):
    path = tmp_path / "x.log"
    path.write_bytes(content)
    code, out, err = kvplan("explain", str(path), "--no-predict")
    assert code == 2 and out == ""
    assert message in err and len(err.strip().splitlines()) == 1


def test_flags_fill_in_and_replace_what_the_log_says(kvplan, logs):
    code, out, _ = kvplan("explain", str(logs / LLAMA_LOG), "--no-predict", "--json", "--gpu", "a100-sxm-80gb",
                          "--max-num-seqs", "256")
    assert code == 0
    settings = {setting["name"]: setting for setting in json.loads(out)["settings"]}
    assert settings["gpu"]["source"] == "flag" and settings["gpu"]["value"] == "a100-sxm-80gb"
    assert settings["max_num_seqs"] == {"name": "max_num_seqs", "value": 256, "source": "flag", "line": None,
                                        "note": "the log says 1024 (line 35)"}


def test_a_switch_turned_off_on_the_command_line_replaces_the_logs_value(kvplan, logs):
    """--no-enable-... is a setting too: False must reach the prediction, not read as "not given"."""
    code, out, _ = kvplan("explain", str(logs / "synthetic-0.34.0-extensible-kv-cache.log"), "--no-predict",
                          "--json", "--no-enable-prefix-caching", "--no-enable-extensible-kv-cache")
    assert code == 0
    settings = {setting["name"]: setting for setting in json.loads(out)["settings"]}
    assert settings["enable_prefix_caching"]["value"] is False and settings["enable_prefix_caching"]["source"] == "flag"
    assert settings["enable_extensible_kv_cache"]["value"] is False


def test_the_saved_profile_feeds_plan_simulate_and_check(kvplan, logs, tmp_path):
    profile = tmp_path / "llama-h100.json"
    code, out, _ = kvplan("explain", str(logs / LLAMA_LOG), "--no-predict", "--save-profile", str(profile))
    assert code == 0 and f"saved {profile}" in out
    record = json.loads(profile.read_text())
    assert record["backend"] == "vllm-log" and record["available_kv_bytes"] == round(58.11 * 2**30)

    code, out, _ = kvplan("plan", "--profile", str(profile), "--json")
    assert code == 0 and json.loads(out)["kv_cache_memory_bytes"] == round(58.11 * 2**30)
    code, out, _ = kvplan("plan", "--profile", str(profile), "--gpu-memory-utilization", "0.9", "--json")
    total = record["total_bytes"]
    expected = math.ceil(total * 0.9) - (math.ceil(total * 0.95) - round(58.11 * 2**30))
    assert code == 0 and json.loads(out)["kv_cache_memory_bytes"] == expected

    workload = tmp_path / "w.json"
    workload.write_text(json.dumps({
        "schema_version": 1, "seed": 1, "engine": {"profile": profile.name},
        "classes": [{"name": "chat", "prompt_tokens": 1000, "output_tokens": 50}],
        "arrival": {"process": "poisson", "rate": 20, "count": 20},
    }))
    code, out, err = kvplan("simulate", str(workload), "--json", "--vllm-version", "0.17.1")
    assert code == 0, err
    assert json.loads(out)["engine"]["num_gpu_blocks"] == record["num_blocks"]

    spec = tmp_path / "check.toml"
    spec.write_text(f'name = "from-a-log"\nvllm_version = "0.17.1"\n[target]\nprofile = "{profile.name}"\n'
                    '[[assert]]\nfits = true\nmin_kv_tokens = 400_000\n')
    code, out, err = kvplan("check", str(spec))
    assert code == 0, out + err


def test_save_profile_refuses_to_overwrite_the_log_or_a_foreign_file(kvplan, logs, tmp_path):
    foreign = tmp_path / "notes.json"
    foreign.write_text("[1]")
    code, _, err = kvplan("explain", str(logs / LLAMA_LOG), "--no-predict", "--save-profile", str(foreign))
    assert code == 2 and "refusing to overwrite" in err
    assert foreign.read_text() == "[1]"
