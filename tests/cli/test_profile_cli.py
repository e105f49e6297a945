"""`kvplan profile` from the command line: output modes, --save, exit codes, lazy imports."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from kvplan.sources.installed import default_release

REQUIRED = (
    "schema_version", "weights_bytes", "activation_peak_bytes", "non_torch_bytes", "requested_bytes",
    "available_kv_bytes", "num_blocks", "page_size_bytes", "plan", "backend", "provenance",
)


# 2 GiB: the default release's measured path keeps at least 1 GiB free (docs/vllm/changes-0.34.md §1.4)
DEFAULT_FITS = "2GiB"


def test_json_is_the_whole_record_and_nothing_else(kvplan, tiny_model_dir):
    code, out, _err = kvplan("profile", "--model", str(tiny_model_dir), "--backend", "fake",
                             "--gpu-memory", DEFAULT_FITS, "--json")
    assert code == 0
    record = json.loads(out)
    assert all(key in record for key in REQUIRED)
    assert isinstance(record["schema_version"], int) and record["kind"] == "kvplan.profile"
    assert record["plan"]["kind"] == "kvplan.plan" and record["plan"]["num_blocks"] == record["num_blocks"]
    provenance = record["provenance"]
    assert provenance["vllm_semantics"] == default_release().version and len(provenance["config_sha256"]) == 64
    assert provenance["torch_version"] and provenance["transformers_version"]


def test_human_report_shows_breakdown_layout_log_and_check(kvplan, tiny_model_dir):
    code, out, _err = kvplan("profile", "--model", str(tiny_model_dir), "--backend", "cpu", "--gpu-memory",
                             "32MiB", "--load-format", "auto", "--attention-backend", "flashinfer",
                             "--vllm-version", "0.17.1")
    assert code == 0
    for text in ("MEASURED", "activation peak", "KV cache groups", "flashinfer layout", "allocated in RAM",
                 "round trip PASSED", "Model loading took", "Available KV cache memory", "GPU KV cache size",
                 "Maximum concurrency for 4,096 tokens", "Largest max_model_len that fits"):
        assert text in out, text


def test_the_0_33_0_report_shows_its_terms_and_the_graph_estimate(kvplan, tiny_model_dir):
    code, out, _err = kvplan("profile", "--model", str(tiny_model_dir), "--backend", "fake", "--gpu-memory",
                             "512MiB", "--vllm-version", "0.33.0")
    assert code == 0
    flat = " ".join(out.split())
    assert out.splitlines()[0] == "vLLM 0.33.0 semantics"
    for text in ("vLLM 0.33.0 accounting", "= consumed", "transient peak", "CUDA graphs (ESTIMATE)",
                 "predicted: the", "CUDA graph memory profiling is enabled", "regions",
                 "GPU KV cache size:", "tokens, Maximum concurrency for 4,096 tokens per request"):
        assert text in flat, text
    code, out, _err = kvplan("profile", "--model", str(tiny_model_dir), "--backend", "fake", "--gpu-memory",
                             "512MiB", "--vllm-version", "0.33.0", "--json")
    record = json.loads(out)
    graphs = record["cuda_graph_estimate"]
    assert record["vllm_semantics"] == "0.33.0" and graphs["method"] == "predicted" and graphs["estimate"]
    assert record["cuda_graph_estimate_bytes"] == graphs["bytes"] > 0
    assert record["available_kv_bytes"] == (record["requested_bytes"] - record["total_consumed_bytes"]
                                            - record["transient_peak_bytes"] - graphs["bytes"])


def test_save_writes_a_profile_and_never_clobbers_other_files(kvplan, tiny_model_dir, tmp_path):
    target = tmp_path / "profile.json"
    args = ("profile", "--model", str(tiny_model_dir), "--backend", "fake", "--gpu-memory", DEFAULT_FITS,
            "--no-allocate")
    code, _out, _err = kvplan(*args, "--save", str(target))
    assert code == 0
    saved = json.loads(target.read_text())
    assert saved["kind"] == "kvplan.profile" and saved["provenance"]["knobs"]["allocate"] is False
    code, _out, _err = kvplan(*args, "--save", str(target))   # a profile may be replaced
    assert code == 0
    notes = tmp_path / "notes.json"
    notes.write_text('{"mine": true}')
    code, out, err = kvplan(*args, "--save", str(notes), "--json")
    assert code == 2 and out == ""
    # the progress lines of the profile run, then one line saying what is wrong
    *progress, error = err.strip().splitlines()
    assert "not a kvplan profile; refusing to overwrite" in error and "error" not in "".join(progress)
    assert notes.read_text() == '{"mine": true}'


def test_save_checks_its_path_before_profiling(kvplan, tiny_model_dir, tmp_path):
    """Issue 9 part 5: `--save profiles/x.json` creates profiles/; a path onto the model's own files is
    refused before anything runs."""
    args = ("profile", "--model", str(tiny_model_dir), "--backend", "fake", "--gpu-memory", DEFAULT_FITS,
            "--no-allocate")
    code, _out, err = kvplan(*args, "--save", str(tmp_path / "profiles" / "x.json"))
    assert code == 0, err
    assert json.loads((tmp_path / "profiles" / "x.json").read_text())["kind"] == "kvplan.profile"
    config = (tiny_model_dir / "config.json").read_text()
    code, out, err = kvplan(*args, "--save", str(tiny_model_dir / "config.json"), "--json")
    assert code == 2 and out == "" and "this command reads" in err and "profile run" not in err
    assert (tiny_model_dir / "config.json").read_text() == config


def test_does_not_fit_is_exit_1_with_vllms_text(kvplan, tiny_model_dir):
    code, out, _err = kvplan("profile", "--model", str(tiny_model_dir), "--backend", "fake", "--gpu-memory", "2MiB")
    assert code == 1
    assert "No available memory for the cache blocks" in out


def test_bad_input_is_one_line_and_exit_2(kvplan, tiny_model_dir, tmp_path):
    broken = tmp_path / "broken"
    broken.mkdir()
    (broken / "config.json").write_text('{"model_type": "qwen2", "architectures": ["Qwen2ForCausalLM"]}')
    cases = [
        ("--model", str(tmp_path / "missing")),
        ("--model", str(broken)),
        ("--model", str(tiny_model_dir), "--gpu-memory-utilization", "0"),
        ("--model", str(tiny_model_dir), "--gpu", "no-such-gpu"),
        ("--model", str(tiny_model_dir), "--backend", "tpu"),
    ]
    for args in cases:
        code, out, err = kvplan("profile", "--backend", "fake", *args) if "--backend" not in args else kvplan(
            "profile", *args)
        assert code == 2, (args, err)
        assert out == "" and len(err.strip().splitlines()) == 1 and "Traceback" not in err, (args, err)


def test_cli_and_saved_profiles_do_not_import_torch():
    code = (
        "import sys\n"
        "from kvplan.cli import app\n"
        "import kvplan.usecases.profile_summary\n"
        "import kvplan.usecases.check.target\n"
        "assert 'torch' not in sys.modules and 'transformers' not in sys.modules, 'torch imported'\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_quick_assertions_judge_the_profile_record(kvplan, tiny_model_dir):
    args = ("profile", "--model", str(tiny_model_dir), "--backend", "fake", "--gpu-memory", DEFAULT_FITS,
            "--no-allocate", "--json")
    code, out, _err = kvplan(*args, "--assert-min-kv-tokens=1000")
    assert code == 0 and json.loads(out)["gpu_kv_cache_tokens"] >= 1000
    code, out, err = kvplan(*args, "--assert-min-kv-tokens=100000000")
    assert code == 1 and json.loads(out)["kind"] == "kvplan.profile" and "min_kv_tokens" in err


def test_profiling_the_same_inputs_twice_saves_the_same_bytes(kvplan, tiny_model_dir, tmp_path):
    args = ("profile", "--model", str(tiny_model_dir), "--backend", "fake", "--gpu-memory", DEFAULT_FITS)
    first, second = tmp_path / "first.json", tmp_path / "second.json"
    assert kvplan(*args, "--save", str(first))[0] == 0
    assert kvplan(*args, "--save", str(second))[0] == 0
    assert first.read_bytes() == second.read_bytes()

    def keys(node):
        if isinstance(node, dict):
            for key, value in node.items():
                yield key
                yield from keys(value)
        elif isinstance(node, list):
            for value in node:
                yield from keys(value)

    record = json.loads(first.read_text())
    assert not {"timings", "created_at", "seconds"} & set(keys(record))
    assert not any("seconds" in line for line in record["vllm_log"])


SUGGESTION = "vLLM's own suggestion"
PROFILE_SCHEMA = jsonschema.Draft202012Validator(
    json.loads((Path(__file__).resolve().parents[2] / "docs" / "schemas" / "profile.json").read_text()))
REDUNDANCY_BUFFER = 150 * (1 << 20)
SUGGESTION_LEVEL = {"0.17.1": "DEBUG", "0.33.0": "INFO"}


def suggestion_non_kv(record: dict) -> int:
    """The non-KV sum of `compile_or_warm_up_model`'s suggestion, from the record's own terms."""
    if record["vllm_semantics"] == "0.17.1":      # weights + peak activation + non-torch + graphs (0 here)
        return record["non_kv_bytes"]
    # consumed + peak activation as logged (with the graph estimate in it) + the graphs again
    return record["total_consumed_bytes"] + record["peak_activation_logged_bytes"] + record["cuda_graph_estimate_bytes"]


@pytest.mark.parametrize("release", ["0.17.1", "0.33.0"])
def test_vllms_suggestion_is_shown_only_where_vllm_logs_it(kvplan, tiny_model_dir, release):
    """vLLM logs its --kv-cache-memory suggestion in `compile_or_warm_up_model`, which runs after the KV
    cache was created: a configuration vLLM refuses (no memory for the blocks, or too little for one
    max_model_len request) never reaches it. kvplan's own advice stays."""
    args = ("profile", "--model", str(tiny_model_dir), "--backend", "fake", "--no-allocate", "--vllm-version", release)

    code, out, _err = kvplan(*args, "--gpu-memory", "512MiB", "--json")
    fitting = json.loads(out)
    suggestion = fitting["target"]["vllm_suggestion"]
    assert code == 0 and fitting["fits"]
    PROFILE_SCHEMA.validate(fitting)
    non_kv = suggestion_non_kv(fitting)
    assert suggestion["to_requested_limit_bytes"] == fitting["requested_bytes"] - non_kv - REDUNDANCY_BUFFER > 0
    assert suggestion["to_gpu_limit_bytes"] == fitting["free_at_start_bytes"] - non_kv - REDUNDANCY_BUFFER
    assert suggestion["log_level"] == SUGGESTION_LEVEL[release]
    assert f"`--kv-cache-memory={suggestion['to_requested_limit_bytes']}`" in suggestion["line"]
    code, out, _err = kvplan(*args, "--gpu-memory", "512MiB")
    assert code == 0
    assert (f"{SUGGESTION} (logged at {SUGGESTION_LEVEL[release]}; CUDA graphs taken as "
            in " ".join(out.split()))
    assert (f"--kv-cache-memory={suggestion['to_requested_limit_bytes']} to fit into requested memory, "
            f"--kv-cache-memory={suggestion['to_gpu_limit_bytes']} to use the whole GPU") in " ".join(out.split())

    # the same model with half of one request's KV memory left, and with none at all
    needed = fitting["target"]["kv_cache_memory_bytes"]
    non_kv_and_graphs = fitting["requested_bytes"] - fitting["available_kv_bytes"]
    half_a_request = int((non_kv_and_graphs + needed // 2) / fitting["gpu_memory_utilization"])
    refusals = {str(half_a_request): "To serve at least one request with the", "2MiB": "No available memory"}
    for gpu_memory, refusal in refusals.items():
        code, out, _err = kvplan(*args, "--gpu-memory", gpu_memory, "--json")
        record = json.loads(out)
        assert code == 1 and not record["fits"] and refusal in record["error"], record["error"]
        assert record["target"]["vllm_suggestion"] is None
        PROFILE_SCHEMA.validate(record)
        assert record["target"]["kv_cache_memory_bytes"] == needed
        code, out, _err = kvplan(*args, "--gpu-memory", gpu_memory)
        flat = " ".join(out.split())
        assert code == 1 and SUGGESTION not in flat and "--kv-cache-memory=" not in flat
        assert f"One 4,096-token request needs {needed:,} B of KV cache: --kv-cache-memory {needed}" in flat
