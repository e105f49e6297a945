"""`kvplan plan` with plain flags runs without typer: it reads them as typer does (the same
settings for every command line below), leaves anything else to typer, and imports no typer,
pydantic, simulator, engine or check code."""

from __future__ import annotations

import subprocess
import sys

import pytest

from kvplan.cli.options import EngineOptions
from kvplan.cli.plan_plain import parse_plain

PLAIN = [
    ["--model", "Qwen/Qwen2-0.5B-Instruct", "--kv-cache-memory", "24GiB", "--json"],
    ["-m", "meta-llama/Llama-3.1-8B-Instruct", "--kv-cache-memory=25938100224"],
    ["--kv-cache-memory", "1GiB", "--gpu", "l4-24gb", "--gpu-memory-utilization", "0.85", "--block-size", "32"],
    ["--kv-cache-memory", "1GiB", "--max-model-len", "auto", "--max-num-seqs", "64", "-tp", "2", "-pp", "2"],
    ["--kv-cache-memory", "1GiB", "--no-enable-prefix-caching", "--enable-chunked-prefill", "--dtype", "float16"],
    ["--kv-cache-memory", "1GiB", "--prefix-caching", "off", "--no-chunked-prefill", "--trust-remote-code"],
    ["--kv-cache-memory", "1GiB", "--gpu-memory", "80GiB", "--kv-cache-dtype", "fp8", "--gpu-memory-utilization=.5"],
    ["--kv-cache-memory", "1GiB", "--num-gpu-blocks-override", "100", "--max-num-batched-tokens", "4096"],
    ["Qwen/Qwen2-0.5B-Instruct", "--kv-cache-memory", "1GiB", "-tp", "2"],       # vllm serve MODEL
    ["--kv-cache-memory-bytes", "1GiB", "--tp", "2", "--pp", "1", "Qwen/Qwen2-0.5B-Instruct"],
    ["--kv-cache-memory", "1GiB", "--enforce-eager", "--quantization", "fp8", "-q", "fp8"][:5],
    [],
]
TO_TYPER = [
    ["--help"],
    ["--kv-cache-memory", "1GiB", "--assert-min-kv-tokens=10"],
    ["--kv-cache-memory", "1GiB", "--max-model-len", "-1"],           # a value that looks like a flag
    ["--kv-cache-memory", "1GiB", "--max-num-seqs", "1e3"],           # not a plain integer
    ["--kv-cache-memory", "1GiB", "--kv-cache-memory", "2GiB"],       # given twice
    ["--kv-cache-memory", "1GiB", "--json=1"],
    ["--kv-cache-memory", "1GiB", "extra", "words"],                    # two models
    ["--kv-cache-memory"],
    ["-mQwen/Qwen2-0.5B-Instruct"],
]


def _through_typer(args: list[str], monkeypatch: pytest.MonkeyPatch) -> tuple[EngineOptions, bool]:
    import kvplan.cli.plan as plan_cli
    from kvplan.cli import run_app

    seen = []
    monkeypatch.setattr(plan_cli, "run_plan", lambda engine, json_output, assertions, **_: seen.append(
        (engine, json_output)) or 0)
    monkeypatch.setattr("kvplan.cli.plan_plain.parse_plain", lambda args: None)
    with pytest.raises(SystemExit) as done:
        run_app(["plan", *args])
    assert done.value.code in (0, None) and len(seen) == 1
    return seen[0]


@pytest.mark.parametrize("args", PLAIN)
def test_plain_flags_read_as_typer_reads_them(args, monkeypatch):
    assert parse_plain(args) == _through_typer(args, monkeypatch)


@pytest.mark.parametrize("args", TO_TYPER)
def test_anything_else_goes_to_typer(args):
    assert parse_plain(args) is None


def test_an_old_spelling_that_disagrees_is_refused_on_both_paths(kvplan, monkeypatch):
    args = ("plan", "--kv-cache-memory", "1GiB", "--enable-prefix-caching", "--prefix-caching", "off")
    plain = kvplan(*args)
    monkeypatch.setattr("kvplan.cli.plan_plain.parse_plain", lambda args: None)
    assert kvplan(*args) == plain and plain[0] == 2 and "disagree" in plain[2]


def test_plan_imports_only_what_it_needs():
    code = (
        "import sys\n"
        "from kvplan.cli import run_app\n"
        "try:\n"
        "    run_app(['plan', '--model', 'Qwen/Qwen2-0.5B-Instruct', '--kv-cache-memory', '24GiB', '--json'])\n"
        "except SystemExit:\n"
        "    pass\n"
        # the plan names the engine's KV cache groups (a dataclass), never runs the engine
        "heavy = ('torch', 'transformers', 'typer', 'pydantic', 'rich', 'kvplan.semantics.engine.scheduler',\n"
        "         'kvplan.semantics.engine.block_pool', 'kvplan.semantics.engine.kv_cache_manager',\n"
        "         'kvplan.usecases.simulate', 'kvplan.usecases.check', 'kvplan.usecases.profile')\n"
        "print(sorted(m for m in sys.modules if m.startswith(heavy)), file=sys.stderr)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stderr.strip() == "[]"
    assert '"kind": "kvplan.plan"' in done.stdout
