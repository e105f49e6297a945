"""Issue 12's classes of bad input, one example each as the issue found it: every one is now exit 2
with one line naming the field (or the finding it is), and no input is ever written over."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import xml.dom.minidom
from pathlib import Path
from typing import Any

import pytest

from tests.edge import offline_home, run_cli, snapshot
from tests.usecases.simulate.factories import mix

REPO = Path(__file__).resolve().parents[2]
EXAMPLE_TRACE = REPO / "tests" / "data" / "traces" / "example.json"
FAILING_SPEC = REPO / "examples" / "checks" / "fail-tight-kv-cache.toml"
TINY = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
        "intermediate_size": 128, "num_attention_heads": 4, "num_key_value_heads": 2, "vocab_size": 1000,
        "max_position_embeddings": 2048, "torch_dtype": "bfloat16"}


def one_line_exit_2(argv: list[str], says: str) -> None:
    code, out, err = run_cli(argv)
    assert code == 2 and out == "", (code, err)
    assert err.count("\n") == 1 and err.startswith("kvplan: error: ") and says in err, err


def write(path: Path, document: Any) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(document if isinstance(document, str) else json.dumps(document))
    return path


def trace_with(**changes: Any) -> dict[str, Any]:
    trace = json.loads(EXAMPLE_TRACE.read_text())
    for key, value in changes.items():
        if key in trace["config"] or key == "num_gpu_blocks":
            trace["config"][key] = value
        else:
            trace["requests"][0][key] = value
    return trace


@pytest.fixture(autouse=True)
def offline():
    with offline_home():
        yield


# ---------------------------------------------------------------------------- numbers outside any sane range

@pytest.mark.parametrize(("argv", "says"), [
    (["plan", "--kv-cache-memory", "9" * 5000], "--kv-cache-memory: cannot read"),
    (["plan", "--kv-cache-memory", "1e400"], "--kv-cache-memory: cannot read '1e400'"),
    (["plan", "Qwen/Qwen2-0.5B-Instruct", "--kv-cache-memory", "1GiB", "-pp", "100"],
     "a pipeline stage holds no layer"),
    (["plan", "--kv-cache-memory", "1GiB", "-tp", str(2**70)], "--tensor-parallel-size: 1180591620717411303424 is out"),
    (["plan", "--kv-cache-memory", "1GiB", "--num-gpu-blocks-override", "1"], "--num-gpu-blocks-override: 1 is out"),
    # gpt-oss splits its 8 KV heads without replicating them: 64 ranks would hold none (a ZeroDivisionError)
    (["plan", "--model", "openai/gpt-oss-20b", "--kv-cache-memory", "1GiB", "-tp", "64"],
     "with tensor parallel size 64 a rank holds none"),
    (["replay", str(EXAMPLE_TRACE), "--vllm-version", "0.2"],
     "--vllm-version: expected one of: 0.17.1, 0.33.0, 0.34.0"),
    (["replay", str(EXAMPLE_TRACE), "--scheduling", "\ud800"], "--scheduling: '\\ud800' holds"),
    (["replay", str(EXAMPLE_TRACE), "--num-gpu-blocks", "0"], "--num-gpu-blocks: 0 is out of range"),
])
def test_numbers_on_the_command_line(argv, says):
    one_line_exit_2(argv, says)


FIT = ["fit", "-w", str(REPO / "examples" / "workloads" / "chat-5rps.json"), "--gpus", "l4-24gb"]


@pytest.mark.parametrize(("argv", "says"), [
    ([*FIT, "-tp", "99999999999999999999999"], "--tensor-parallel-size: 99999999999999999999999 is out of range"),
    ([*FIT, "--concurrency", "2@99999999999999999999999"], "--concurrency (tokens): 99999999999999999999999 is out"),
    ([*FIT, "--rate", "1e30/s"], "--rate: 1e+30 is out of range"),
    ([*FIT, "--slo", "ttft_p95=1e30s"], "--slo: 1e+30 is out of range"),
    ([*FIT, "--max-num-seqs", "10000000"], "--max-num-seqs: 10000000 is out of range"),
    ([*FIT, "--seed", str(2**70)], "--seed: 1180591620717411303424 is out of range"),
    # a local pool forks every worker at its first task: 99,999,999 were as many processes
    ([*FIT, "--workers", "99999999"], "--workers: 99999999 is out of range"),
])
def test_numbers_of_fit(argv, says):
    one_line_exit_2(argv, says)


@pytest.mark.parametrize(("changes", "says"), [
    ({"prefix_id": 2**70}, "requests[0].prefix_id: 1180591620717411303424 is out of range"),
    ({"num_gpu_blocks": 2**70}, "config.num_gpu_blocks: 1180591620717411303424 is out of range"),
    ({"num_gpu_blocks": 1e9}, "config.num_gpu_blocks: 1000000000.0 is out of range"),
    ({"arrival_step": 10**12}, "requests[0].arrival_step: 1000000000000 is out of range"),
])
def test_numbers_in_a_trace(tmp_path, changes, says):
    one_line_exit_2(["replay", str(write(tmp_path / "t.json", trace_with(**changes))), "--summary-only"], says)


@pytest.mark.parametrize(("change", "says"), [
    ({"engine": {"model": "Qwen/Qwen2-0.5B-Instruct", "kv_cache_memory": "9" * 5000}}, "engine.kv_cache_memory"),
    ({"engine": {"model": "Qwen/Qwen2-0.5B-Instruct", "kv_cache_memory": "1e400"}}, "engine.kv_cache_memory"),
    ({"classes": [{"prompt_tokens": {"dist": "lognormal", "mean": 100, "std": 1e300}, "output_tokens": 4}]},
     "classes[0].prompt_tokens.std: 1e+300 is out of range"),
    ({"classes": [{"prompt_tokens": {"dist": "uniform", "min": 1, "max": 1e300}, "output_tokens": 4}]},
     "classes[0].prompt_tokens.max: 1e+300 is out of range: expected an integer from 1 to 10**8"),
    ({"classes": [{"prompt_tokens": {"dist": "normal", "mean": float("nan"), "std": 1}, "output_tokens": 4}]},
     "classes[0].prompt_tokens.mean: nan is not a finite number"),
])
def test_numbers_in_a_workload(tmp_path, change, says):
    one_line_exit_2(["simulate", str(write(tmp_path / "w.json", mix(**change)))], says)
    one_line_exit_2(["simulate", str(tmp_path / "w.json"), "--step-time-ms", "nan"], "--step-time-ms: nan")


@pytest.mark.parametrize("size", ["9" * 5000, "1e400", "1,5GiB"])
def test_numbers_in_a_check_spec(tmp_path, size):
    spec = write(tmp_path / "spec.toml", f'[target]\nmodel = "Qwen/Qwen2-0.5B-Instruct"\nkv_cache_memory = "{size}"\n'
                                         "[[assert]]\nfits = true\n")
    one_line_exit_2(["check", str(spec)], "spec.toml: target.kv_cache_memory: cannot read")


# ---------------------------------------------------------------------------- model configs that cannot be real

@pytest.mark.parametrize(("change", "says"), [
    ({"num_attention_heads": 0}, "num_attention_heads: 0 is out of range"),
    ({"num_key_value_heads": 0}, "num_key_value_heads: 0 is out of range"),
    ({"max_position_embeddings": 0}, "max_position_embeddings: 0 is out of range"),
    ({"num_hidden_layers": 10**9}, "num_hidden_layers: 1000000000 is out of range"),
    ({"hidden_size": "NaN"}, "hidden_size: expected an integer from 1 to 10**7, got nan"),
    ({"rope_scaling": {"rope_type": "yarn", "factor": 4.0}},
     "a yarn rope scaling needs original_max_position_embeddings"),
    ({"torch_dtype": "bogus"}, "torch_dtype: 'bogus' is not a torch dtype"),
    ({"text_config": {"dtype": "float4"}}, "text_config.dtype: 'float4' is not a torch dtype"),
])
def test_model_configs_that_cannot_be_real(tmp_path, change, says):
    config = {**TINY, **change}
    text = json.dumps(config).replace('"NaN"', "NaN")       # a bare NaN, as Python's json writes one
    write(tmp_path / "model" / "config.json", text)
    code, out, err = run_cli(["plan", "--model", str(tmp_path / "model"), "--kv-cache-memory", "1GiB"])
    assert code == 2 and out == "" and err.count("\n") == 1 and says in err and "config.json" in err, err


# ---------------------------------------------------------------------------- deeply nested JSON or TOML

DEEP_JSON = "[" * 100_000 + "]" * 100_000


@pytest.mark.parametrize(("files", "argv", "says"), [
    ({"w.json": DEEP_JSON}, ["simulate", "w.json"], "w.json: nests too deeply"),
    ({"t.json": DEEP_JSON}, ["replay", "t.json"], "t.json: nests too deeply"),
    ({"spec.json": DEEP_JSON}, ["check", "spec.json", "--json"], "spec.json: nests too deeply"),
    ({"spec.toml": "a = " + "[" * 100_000 + "]" * 100_000}, ["check", "spec.toml"], "spec.toml: nests too deeply"),
    ({"spec.toml": "a = " + "{b = " * 5000 + "1" + "}" * 5000}, ["check", "spec.toml"], "spec.toml: nests too deeply"),
    ({"model/config.json": '{"a": ' + DEEP_JSON + "}"}, ["plan", "--model", "model", "--kv-cache-memory", "1GiB"],
     "model/config.json: nests too deeply"),
    ({"p.json": DEEP_JSON, "spec.toml": '[target]\nprofile = "p.json"\n[[assert]]\nfits = true\n'},
     ["check", "spec.toml"], "target.profile: nests too deeply"),
    ({"r.jsonl": DEEP_JSON + "\n", "w.json": json.dumps({"schema_version": 1, "engine": {"num_gpu_blocks": 16},
                                                         "requests": "r.jsonl"})},
     ["simulate", "w.json"], "r.jsonl: line 1: nests too deeply"),
])
def test_deeply_nested_inputs(tmp_path, monkeypatch, files, argv, says):
    for name, text in files.items():
        write(tmp_path / name, text)
    monkeypatch.chdir(tmp_path)
    one_line_exit_2(argv, says)


# ---------------------------------------------------------------------------- text that is not data-safe

def test_a_lone_surrogate_is_refused_where_it_is_read(tmp_path):
    workload = write(tmp_path / "w.json", json.dumps(mix(classes=[{"name": "\ud800", "prompt_tokens": 8,
                                                                   "output_tokens": 2}])))
    one_line_exit_2(["simulate", str(workload), "--json"], "classes[0].name: '\\ud800' holds '\\ud800', which is not "
                                                            "valid Unicode")
    spec = write(tmp_path / "spec.json", json.dumps({"name": "\ud800", "assert": [{"completes": True,
                                                                                   "workload": "w.json"}]}))
    one_line_exit_2(["check", str(spec), "--json"], "spec.json: name: ")


def test_control_characters_in_a_spec_name_give_well_formed_junit_and_exit_1(tmp_path):
    spec = FAILING_SPEC.read_text().replace('name = "fail-tight-kv-cache"', 'name = "odd\\u0007[/]\\u001b <&> name"')
    (tmp_path / "workloads").mkdir()
    (tmp_path / "workloads" / "chat.json").write_text(
        (REPO / "examples" / "checks" / "workloads" / "chat.json").read_text())
    (tmp_path / "profiles").symlink_to(REPO / "examples" / "checks" / "profiles")
    write(tmp_path / "odd.toml", spec)
    junit = tmp_path / "out" / "check.xml"
    code, out, err = run_cli(["check", str(tmp_path / "odd.toml"), "--junit", str(junit), "--json"])
    assert code == 1, err
    assert json.loads(out)["name"] == "odd\x07[/]\x1b <&> name"
    root = xml.dom.minidom.parse(str(junit)).documentElement
    assert root.getAttribute("name") == "kvplan check odd\\x07[/]\\x1b <&> name"


def test_markup_in_user_text_is_printed_as_written(tmp_path):
    for name in ("[/] x", "[bold red]x"):
        workload = write(tmp_path / "w.json", mix(classes=[{"name": name, "prompt_tokens": 8, "output_tokens": 2}]))
        code, out, err = run_cli(["simulate", str(workload)])
        # printed as written (the table may wrap a name at its space), never styled
        assert code == 0 and name.split()[-1] in out and "\x1b[" not in out, err
    one_line_exit_2(["plan", "--kv-cache-memory", "1GiB", "--model", "[/] x"], "--model '[/] x': no such file")


def test_markup_in_a_model_path_on_the_profile_progress_line(tmp_path, monkeypatch):
    write(tmp_path / "[/] x" / "config.json", TINY)
    monkeypatch.chdir(tmp_path)
    code, out, err = run_cli(["profile", "--model", "[/] x", "--gpu", "l4-24gb", "--backend", "fake"])
    semantics, title = out.splitlines()[:2]
    assert code == 0 and semantics.endswith(" semantics") and title.startswith("[/] x on NVIDIA L4"), err


def test_a_terminal_that_cannot_print_a_name_gets_its_escape(tmp_path):
    spec = write(tmp_path / "spec.toml", FAILING_SPEC.read_text().replace('"fail-tight-kv-cache"', '"名前 é"')
                 .split("[[assert]]\nworkload")[0])
    ascii_terminal = {**os.environ, "PYTHONIOENCODING": "ascii", "HF_HUB_OFFLINE": "1"}
    done = subprocess.run([sys.executable, "-m", "kvplan", "check", str(spec)], capture_output=True, text=True,
                          env=ascii_terminal, encoding="ascii")
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert "kvplan check \\u540d\\u524d \\xe9" in done.stdout
    as_json = subprocess.run([sys.executable, "-m", "kvplan", "check", str(spec), "--json"], capture_output=True,
                             text=True, env=ascii_terminal, encoding="ascii")
    assert as_json.returncode == 1 and json.loads(as_json.stdout)["name"] == "名前 é"


def test_a_library_error_of_many_lines_is_one_line():
    from kvplan.cli import MAX_ERROR_CHARS, one_line

    listed = "Unrecognized configuration class.\nModel type should be one of " + ", ".join(["GPT2Config"] * 500)
    line = one_line(listed)
    assert "\n" not in line and len(line) == MAX_ERROR_CHARS and line.endswith(" ...")
    assert one_line("a\n  b") == "a b"


# ---------------------------------------------------------------------------- outputs written over inputs

@pytest.fixture
def spec_with_inputs(tmp_path: Path) -> Path:
    """A spec whose target is a local model directory and whose workload reads a request list."""
    write(tmp_path / "model" / "config.json", TINY)
    write(tmp_path / "requests.jsonl", '{"arrival_time": 0, "unique_len": 8, "max_tokens": 2}\n')
    write(tmp_path / "workload.json", {"schema_version": 1, "engine": {"num_gpu_blocks": 16},
                                       "timing": {"step_time_ms": 5}, "requests": "requests.jsonl"})
    spec = write(tmp_path / "spec.toml", '[target]\nmodel = "model"\nkv_cache_memory = "1GiB"\n\n'
                                         '[[assert]]\nfits = true\n\n[[assert]]\nworkload = "workload.json"\n'
                                         "max_preemptions = 0\n")
    os.link(spec, tmp_path / "hardlink.toml")
    return spec


@pytest.mark.parametrize("target", ["requests.jsonl", "model/config.json", "hardlink.toml", "workload.json"])
def test_junit_never_lands_on_what_the_check_reads(spec_with_inputs, target):
    directory = spec_with_inputs.parent
    before = snapshot(directory)
    code, _, err = run_cli(["check", str(spec_with_inputs), "--junit", str(directory / target)])
    assert code == 2 and "this command reads" in err and err.count("\n") == 1, err
    assert snapshot(directory) == before


def test_simulate_outputs_never_land_on_inputs_or_each_other(tmp_path):
    write(tmp_path / "model" / "config.json", TINY)
    workload = write(tmp_path / "w.json", mix(engine={"model": "model", "kv_cache_memory": "64MiB",
                                                      "max_model_len": 1024}))
    before = snapshot(tmp_path)
    for flags in (["-o", str(tmp_path / "model" / "config.json")],
                  ["--timeline", str(tmp_path / "x.csv"), "-o", str(tmp_path / "x.csv")]):
        code, out, err = run_cli(["simulate", str(workload), *flags])
        assert code == 2 and err.count("\n") == 1, err
    assert snapshot(tmp_path) == before
    # the model directory beside the workload is found from any working directory
    code, out, err = run_cli(["simulate", str(workload), "--json"])
    assert code == 0, err
    assert json.loads(out)["engine"]["source"] == "plan"


def test_a_model_path_in_a_file_is_never_read_from_the_working_directory(tmp_path, monkeypatch):
    write(tmp_path / "model" / "config.json", TINY)                 # beside the working directory only
    workload = write(tmp_path / "sub" / "w.json", mix(engine={"model": "model", "kv_cache_memory": "64MiB"}))
    spec = write(tmp_path / "sub" / "spec.toml", '[target]\nmodel = "model"\nkv_cache_memory = "1GiB"\n'
                                                 "[[assert]]\nfits = true\n")
    monkeypatch.chdir(tmp_path)
    one_line_exit_2(["simulate", str(workload)], "w.json: engine.model: 'model' is not beside the file")
    one_line_exit_2(["check", str(spec)], "spec.toml: target.model: 'model' is not beside the file")


def test_an_interrupted_replay_leaves_the_old_output(tmp_path, monkeypatch):
    import kvplan.cli.replay as replay_cli

    out = write(tmp_path / "out.jsonl", "the old records\n")

    def interrupted(trace, observe=None):
        raise KeyboardInterrupt

    monkeypatch.setattr(replay_cli, "replay_trace", interrupted)
    code, _, _ = run_cli(["replay", str(EXAMPLE_TRACE), "-o", str(out)])
    assert code == 130 and out.read_text() == "the old records\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["out.jsonl"]


@pytest.mark.skipif(signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL, reason="the runner handles SIGTERM")
def test_a_terminated_run_leaves_the_old_output(tmp_path):
    from kvplan.cli import _terminate_like_interrupt
    from kvplan.files import atomic_output

    out = write(tmp_path / "timeline.csv", "the old timeline\n")
    with pytest.raises(SystemExit) as stop, _terminate_like_interrupt(), atomic_output(out) as stream:
        stream.write("step,usage\n")
        os.kill(os.getpid(), signal.SIGTERM)
        time.sleep(10)  # the handler raises in this thread before the sleep ends
    assert stop.value.code == 128 + signal.SIGTERM and out.read_text() == "the old timeline\n"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["timeline.csv"]
    assert signal.getsignal(signal.SIGTERM) is signal.SIG_DFL


@pytest.mark.skipif(signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL, reason="the runner handles SIGTERM")
def test_a_forked_worker_still_dies_on_sigterm():
    """sweep and fit fork their workers from the command; the pool ends a worker with SIGTERM and
    expects it gone, so the handler acts in the command's own process only."""
    from kvplan.cli import _terminate_like_interrupt

    with _terminate_like_interrupt():
        child = os.fork()
        if child == 0:                              # the worker: a SystemExit here would exit 99
            try:
                time.sleep(30)
            except BaseException:
                os._exit(99)
            os._exit(0)
        time.sleep(0.2)
        os.kill(child, signal.SIGTERM)
        _, status = os.waitpid(child, 0)
    assert os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGTERM


# ---------------------------------------------------------------------------- values that mean nothing

@pytest.mark.parametrize(("argv", "says"), [
    (["--gpu", ""], "--gpu: expected a non-empty string"),
    (["--gpu", "bogus"], "--gpu: unknown GPU 'bogus'"),
    (["--num-gpu-blocks", "0"], "--num-gpu-blocks: 0 is out of range"),
])
def test_simulate_options_that_mean_nothing(tmp_path, argv, says):
    one_line_exit_2(["simulate", str(write(tmp_path / "w.json", mix())), *argv], says)


@pytest.mark.parametrize(("change", "says"), [
    ({"engine": {"num_gpu_blocks": 64, "max_model_len": 1}}, "engine.max_model_len: 1 is out of range"),
    ({"timing": {"calibration": [{"num_tokens": 8, "ms": 5}, {"num_tokens": 8, "ms": 6}]}},
     "timing.calibration[1].num_tokens: 8 is measured twice"),
])
def test_workload_values_that_mean_nothing(tmp_path, change, says):
    one_line_exit_2(["simulate", str(write(tmp_path / "w.json", mix(**change)))], says)


def test_a_string_where_a_boolean_belongs(tmp_path):
    spec = write(tmp_path / "spec.toml", '[target]\nmodel = "Qwen/Qwen2-0.5B-Instruct"\nkv_cache_memory = "1GiB"\n'
                                         '[[assert]]\nfits = "yes"\n')
    one_line_exit_2(["check", str(spec)], "assert[0].fits: expected true or false, got 'yes'")


def test_a_pool_too_small_for_any_request_is_a_finding_with_nothing_on_stdout(tmp_path):
    workload = write(tmp_path / "w.json", mix(engine={"model": "Qwen/Qwen2-0.5B-Instruct", "kv_cache_memory": "1MiB"}))
    code, out, err = run_cli(["simulate", str(workload), "--json"])
    assert code == 1 and out == "" and "does not fit" in err


@pytest.mark.parametrize("command", ["simulate", "replay"])
def test_a_pool_the_host_cannot_hold_is_refused_before_the_run(tmp_path, monkeypatch, command):
    import kvplan.hostmem

    monkeypatch.setattr(kvplan.hostmem, "available_memory_bytes", lambda: 1 << 20)   # 1 MiB free
    source = write(tmp_path / "w.json", mix()) if command == "simulate" else EXAMPLE_TRACE
    # the only line: no progress line of a run that never starts
    one_line_exit_2([command, str(source), "--num-gpu-blocks", "100000", "--json"],
                    "simulating a pool of 100,000 blocks needs about 0.0 GiB of memory and 0.0 GiB are free")


def test_a_request_list_that_never_ends(tmp_path):
    workload = write(tmp_path / "w.json", {"schema_version": 1, "engine": {"num_gpu_blocks": 16},
                                           "requests": "/dev/zero"})
    one_line_exit_2(["simulate", str(workload)], "/dev/zero: not a regular file")


# ---------------------------------------------------------------------------- exit codes

def test_an_unwritable_step_summary_warns_and_keeps_the_verdict(tmp_path, monkeypatch):
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(tmp_path))          # a directory
    code, _, err = run_cli(["check", str(REPO / "examples" / "checks" / "l4-chat.toml")])
    assert code == 0 and "kvplan: warning: cannot append to $GITHUB_STEP_SUMMARY" in err
    code, _, err = run_cli(["check", str(FAILING_SPEC), "--json"])
    assert code == 1 and "warning" in err
