"""`kvplan plan` has one parser, `plan_args`: it reads every command line as typer reads the same
declarations (the settings below are those typer gives a command declared with them), says what
is wrong in one line, leaves only the help to typer, and imports no typer, pydantic, simulator,
engine or check code for a plain plan."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from kvplan.cli.options import PLANNING, EngineOptions, engine_options
from kvplan.cli.plan_args import PROFILE, PlanArgs, parse_plan_args
from kvplan.cli.root import JSON
from kvplan.errors import KvplanError
from kvplan.usecases.check.quick import QUICK_ASSERTS, parse_quick_asserts

QWEN = "Qwen/Qwen2-0.5B-Instruct"
COMMAND_LINES = [
    ["--model", QWEN, "--kv-cache-memory", "24GiB", "--json"],
    ["-m", "meta-llama/Llama-3.1-8B-Instruct", "--kv-cache-memory=25938100224"],
    ["--kv-cache-memory", "1GiB", "--gpu", "l4-24gb", "--gpu-memory-utilization", "0.85", "--block-size", "32"],
    ["--kv-cache-memory", "1GiB", "--max-model-len", "auto", "--max-num-seqs", "64", "-tp", "2", "-pp", "2"],
    ["--kv-cache-memory", "1GiB", "--max-model-len", "-1", "--max-num-batched-tokens", "8K"],
    ["--kv-cache-memory", "1GiB", "--max-model-len=32k", "--gpu-memory-utilization=.5", "--max-num-seqs=+7"],
    ["--kv-cache-memory", "1GiB", "--no-enable-prefix-caching", "--enable-chunked-prefill", "--dtype", "float16"],
    ["--kv-cache-memory", "1GiB", "--prefix-caching", "off", "--no-chunked-prefill", "--trust-remote-code"],
    ["--kv-cache-memory", "1GiB", "--gpu-memory", "80GiB", "--kv-cache-dtype", "fp8", "--offline"],
    ["--kv-cache-memory", "1GiB", "--num-gpu-blocks-override", "100", "--max-num-batched-tokens", "4096"],
    [QWEN, "--kv-cache-memory", "1GiB", "-tp", "2"],                       # vllm serve MODEL
    ["--kv-cache-memory-bytes", "1GiB", "--tp", "2", "--pp", "1", QWEN],
    ["--kv-cache-memory", "1GiB", "--enforce-eager", "--quantization", "fp8", "--vllm-version", "0.17.1"],
    ["--kv-cache-memory", "1GiB", "--tp=2", "-tp", "2", "--revision", "main", "--prompt-len", "100,200"],
    ["-mQwen/Qwen2-0.5B-Instruct", "-qfp8", "--no-enable-extensible-kv-cache"],
    ["--assert-min-kv-tokens", "10", QWEN, "--kv-cache-memory", "20GiB", "--assert-fits", "--json"],
    ["--profile", "p.json", "--gpu-memory-utilization", "0.9", "--assert-min-kv-tokens=10", "--assert-fits=false"],
    ["--kv-cache-memory", "1GiB", "--", QWEN],
    [],
]


def _as_typer_reads(args: list[str]) -> PlanArgs:
    """The command line read by typer from the same declarations (the parser plan had beside this one)."""
    app = typer.Typer()
    seen = []

    @app.command(context_settings=QUICK_ASSERTS)
    @engine_options(*PLANNING, positional_model=True)
    def plan(ctx: typer.Context, engine: EngineOptions, profile: Path | None = PROFILE.typer_option(),
             json_output: bool = JSON) -> None:
        seen.append(PlanArgs(engine, json_output, parse_quick_asserts(ctx.args, "plan"), profile))

    app.command("other")(lambda: None)          # two commands: `plan` is named, as in kvplan
    done = CliRunner().invoke(app, ["plan", *args], catch_exceptions=False)
    assert done.exit_code == 0 and len(seen) == 1, done.output
    return seen[0]


@pytest.mark.parametrize("args", COMMAND_LINES)
def test_a_command_line_is_read_as_typer_reads_the_same_declarations(args):
    assert parse_plan_args(args) == _as_typer_reads(args)


@pytest.mark.parametrize("args", [["--help"], ["-h"], ["--kv-cache-memory", "x", "-h"], ["--bad", "--help"]])
def test_help_is_left_to_typer(args):
    assert parse_plan_args(args) is None


def test_help_is_typers_from_the_declarations(kvplan):
    code, out, err = kvplan("plan", "--help")
    assert code == 0 and err == "" and "--max-num-seqs" in out and "--profile" in out and "--tp " not in out
    assert kvplan("plan", "-h") == (code, out, err)
    assert kvplan("plan", QWEN, "--max-num-seqs", "x", "--help") == (code, out, err)


# what typer said before (its boxed usage error, or no error at all) -> the one line of kvplan
BAD = [
    (["--max-num-seqs", "x"], "--max-num-seqs takes an integer, got 'x'"),
    (["--max-num-seqs", "1e3"], "--max-num-seqs takes an integer, got '1e3'"),
    (["-tp", "two"], "-tp takes an integer, got 'two'"),
    (["--gpu-memory-utilization", "most"], "--gpu-memory-utilization takes a number, got 'most'"),
    (["--gpu-memory-utilization", "1.5"], "--gpu-memory-utilization: 1.5 is out of range"),
    (["--max-num-seqs=0"], "--max-num-seqs: 0 is out of range: expected an integer from 1 to 10**6"),
    (["--kv-cache-memory", "24 parsecs"], "--kv-cache-memory"),
    (["--max-model-len", "-2"], "--max-model-len"),
    (["--json=1"], "--json takes no value, got '--json=1': give --json alone"),
    (["--no-enable-prefix-caching=1"], "--no-enable-prefix-caching takes no value, got "
     "'--no-enable-prefix-caching=1': give --enable-prefix-caching or --no-enable-prefix-caching"),
    (["--max-num-seqs"], "--max-num-seqs needs a value, e.g. --max-num-seqs VALUE"),
    (["--max-num-seqs", "--json"], "--max-num-seqs needs a value, e.g. --max-num-seqs VALUE"),
    (["--profile"], "--profile needs a value, e.g. --profile P.json"),
    (["--foo"], "no such option: --foo (see `kvplan plan --help`)"),
    (["--max-num-seq", "4"], "no such option: --max-num-seq; did you mean --max-num-seqs? (see `kvplan plan --help`)"),
    (["-x"], "no such option: -x (see `kvplan plan --help`)"),
    (["--version"], "--version is an option of kvplan itself, not of plan: give `kvplan --version`"),
    (["extra"], "unexpected argument: extra (see `kvplan plan --help`)"),
    (["--assert-nope=1"], "--assert-nope: no such assertion"),
    (["--assert-max-preemptions=0"], "--assert-max-preemptions applies to `kvplan simulate`, not `kvplan plan`"),
    (["--prefix-caching", "maybe"], "--prefix-caching takes on or off, got 'maybe'"),
    (["--enable-prefix-caching", "--enable-chunked-prefill", "--no-chunked-prefill"],
     "--enable-chunked-prefill and its old spelling disagree: give one of them"),
    (["--model", "meta-llama/Llama-3.1-8B-Instruct"], "the model is given twice"),
]


@pytest.mark.parametrize(("words", "message"), BAD)
def test_bad_input_is_one_line(kvplan, words, message):
    code, out, err = kvplan("plan", QWEN, "--kv-cache-memory", "1GiB", *words, "--json")
    assert (code, out) == (2, "")
    error = err.splitlines()[-1]           # after the deprecation line of an old spelling
    assert error.startswith("kvplan: error: ") and message in error and "Traceback" not in err, err
    assert err.count("\n") == 1 + err.count(" is deprecated: ")


def test_a_flag_given_again_overrides_as_in_vllm_serve(kvplan):
    again = kvplan("plan", QWEN, "--kv-cache-memory", "1GiB", "--no-enable-prefix-caching", "--json",
                   "--kv-cache-memory", "2GiB", "--enable-prefix-caching", "--json")
    once = kvplan("plan", QWEN, "--kv-cache-memory", "2GiB", "--enable-prefix-caching", "--json")
    other = kvplan("plan", QWEN, "--kv-cache-memory", "1GiB", "--json")
    assert again == once and once[0] == 0 and once[1] != other[1]


def test_an_old_spelling_says_so_and_plans_the_same(kvplan):
    old = kvplan("plan", QWEN, "--kv-cache-memory", "1GiB", "--tp", "2", "--no-chunked-prefill", "--json")
    new = kvplan("plan", QWEN, "--kv-cache-memory", "1GiB", "-tp", "2", "--no-enable-chunked-prefill", "--json")
    assert old[:2] == new[:2] and old[0] == 0
    assert "kvplan: --tp is deprecated: give --tensor-parallel-size (vLLM's spelling)" in old[2]
    assert "--chunked-prefill/--no-chunked-prefill is deprecated" in old[2] and "deprecated" not in new[2]


def test_the_app_run_directly_reads_plan_with_the_same_parser():
    from kvplan.cli import app

    done = CliRunner().invoke(app, ["plan", QWEN, "--max-num-seqs", "x"])
    assert isinstance(done.exception, KvplanError) and "--max-num-seqs takes an integer" in str(done.exception)
    done = CliRunner().invoke(app, ["plan", QWEN, "--kv-cache-memory", "1GiB", "--json"])
    assert done.exit_code == 0 and '"kind": "kvplan.plan"' in done.stdout
    assert CliRunner().invoke(app, ["plan", "-h"]).exit_code == 0


HEAVY = ("'torch', 'transformers', 'typer', 'click', 'pydantic', 'kvplan.semantics.engine.scheduler', "
         "'kvplan.semantics.engine.block_pool', 'kvplan.semantics.engine.kv_cache_manager', 'kvplan.usecases.simulate'")

TYPER = "'torch', 'transformers', 'typer', 'click', 'pydantic'"


def _imported(args: list[str], heavy: str) -> subprocess.CompletedProcess[str]:
    code = (
        "import sys\n"
        "from kvplan.cli import run_app\n"
        "try:\n"
        f"    run_app({['plan', *args]!r})\n"
        "except SystemExit:\n"
        "    pass\n"
        f"print(sorted(m for m in sys.modules if m.startswith(({heavy},))), file=sys.stderr)\n"
    )
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)


def test_plan_imports_only_what_it_needs():
    # the plan names the engine's KV cache groups (a dataclass), never runs the engine
    done = _imported(["--model", QWEN, "--kv-cache-memory", "24GiB", "--json"],
                     HEAVY + ", 'rich', 'kvplan.usecases.check', 'kvplan.usecases.profile'")
    assert done.stderr.strip() == "[]"
    assert '"kind": "kvplan.plan"' in done.stdout


def test_assertions_and_a_profile_skip_typer_too(kvplan, tmp_path):
    done = _imported([QWEN, "--kv-cache-memory", "24GiB", "--json", "--assert-min-kv-tokens=1000"], TYPER)
    assert done.stderr.strip().endswith("[]") and "min_kv_tokens" in done.stderr
    assert '"kind": "kvplan.plan"' in done.stdout
    profile = tmp_path / "profile.json"
    log = Path(__file__).resolve().parents[1] / "data" / "logs" / "vllm-0.19.0-llama-3.1-8b-h100-tp1.log"
    assert kvplan("explain", str(log), "--no-predict", "--save-profile", str(profile))[0] == 0
    done = _imported(["--profile", str(profile), "--gpu-memory-utilization", "0.85", "--json"], TYPER)
    assert done.stderr.strip().endswith("[]") and '"kind": "kvplan.plan"' in done.stdout
