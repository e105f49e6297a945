"""One options model for the engine settings: the same vLLM spelling on every command, the old
spellings as hidden aliases, and the typed request the commands build from it."""

from __future__ import annotations

import json

import pytest
from typer.main import get_command

from kvplan.cli import app
from kvplan.cli.options import EngineOptions
from kvplan.semantics.engine.args import EXPLAINS, PLANS, EngineArgs, named
from kvplan.usecases.plan import PlanRequest
from kvplan.usecases.replay import EngineSettings
from kvplan.usecases.simulate.engine_source import EngineOverrides


def _options(command: str) -> dict[str, tuple[tuple[str, ...], bool]]:
    params = get_command(app).commands[command].params  # type: ignore[attr-defined]
    return {param.name: (tuple(param.opts) + tuple(param.secondary_opts), param.hidden) for param in params}


@pytest.mark.parametrize("setting", ["enable_prefix_caching", "enable_chunked_prefill", "max_num_seqs",
                                     "max_num_batched_tokens", "max_model_len", "block_size"])
def test_every_command_spells_a_setting_as_vllm_does(setting):
    spellings = {command: _options(command)[setting] for command in ("plan", "profile", "simulate", "replay")}
    assert len(set(spellings.values())) == 1, spellings
    (flags, hidden), = set(spellings.values())
    assert flags[0] == "--" + setting.replace("_", "-") and not hidden


def test_old_spellings_are_hidden_aliases():
    for command in ("plan", "profile", "simulate", "replay"):
        options = _options(command)
        assert options["prefix_caching_alias"] == (("--prefix-caching",), True)
        assert options["enable_chunked_prefill_alias"] == (("--chunked-prefill", "--no-chunked-prefill"), True)
    for command in ("plan", "profile", "simulate"):
        options = _options(command)
        assert options["tensor_parallel_size"] == (("--tensor-parallel-size", "-tp"), False)
        assert options["tensor_parallel_size_alias"] == (("--tp",), True)
        assert options["pipeline_parallel_size_alias"] == (("--pp",), True)
        assert options["kv_cache_memory_bytes"] == (("--kv-cache-memory-bytes",), False)
        assert options["kv_cache_memory_bytes_prefix"] == (("--kv-cache-memory",), True)


def test_unset_settings_are_vllms_defaults():
    assert EngineOptions(args=EngineArgs(model="m")).plan_request() == PlanRequest.of(model="m")


def test_plan_takes_both_spellings(kvplan):
    base = ("plan", "Qwen/Qwen2-0.5B-Instruct", "--json", "--max-num-batched-tokens", "40000")
    records, notes = [], []
    for flags in (("--kv-cache-memory-bytes", "24GiB", "--no-enable-chunked-prefill", "--no-enable-prefix-caching"),
                  ("--kv-cache-memory", "24GiB", "--no-chunked-prefill", "--prefix-caching", "off")):
        code, out, err = kvplan(*base, *flags)
        assert code == 0, err
        records.append(json.loads(out))
        notes.append(err.splitlines())
    assert records[0] == records[1]
    assert notes[0] == []
    assert sorted(notes[1]) == [
        "kvplan: --chunked-prefill/--no-chunked-prefill is deprecated: give "
        "--enable-chunked-prefill/--no-enable-chunked-prefill (vLLM's spelling)",
        "kvplan: --prefix-caching is deprecated: give --enable-prefix-caching/--no-enable-prefix-caching "
        "(vLLM's spelling)"]
    assert records[0]["enable_chunked_prefill"] is False and records[0]["enable_prefix_caching"] is False


def test_a_bad_utilization_is_one_line(kvplan):
    code, out, err = kvplan("plan", "--kv-cache-memory-bytes", "1GiB", "--gpu-memory-utilization", "1.5")
    assert code == 2 and out == "" and err.strip() == (
        "kvplan: error: --gpu-memory-utilization: 1.5 is out of range: expected a number above 0 and at most 1")


def test_replay_and_simulate_take_the_settings_their_use_case_names():
    engine = EngineOptions(args=EngineArgs(max_num_seqs=2, enable_prefix_caching=False), num_gpu_blocks=3,
                           gpu="l4-24gb")
    args = EngineArgs(max_num_seqs=2, enable_prefix_caching=False)
    assert engine.pick(EngineSettings) == EngineSettings(args, num_gpu_blocks=3)
    overrides = engine.pick(EngineOverrides)
    assert overrides == EngineOverrides(args, num_gpu_blocks=3, gpu="l4-24gb")
    assert overrides.trace_config() == {"num_gpu_blocks": 3, "max_num_seqs": 2, "enable_prefix_caching": False}


def test_explain_takes_the_flags_of_the_settings_a_log_may_leave_unsaid():
    # a setting given the EXPLAINS role is an explain flag with no list to extend; the others are not
    shown = {name for name, (_, hidden) in _options("explain").items() if not hidden}
    explained = set(named(EXPLAINS))
    assert explained <= shown
    assert not (set(named(PLANS)) - explained) & shown       # quantization, --kv-cache-memory-bytes, ...
    assert {"gpu", "gpu_memory", "offline", "vllm_version"} <= shown


def test_every_command_declares_json_once_and_alike():
    """One --json option (cli/root.py's json_option): the same spelling and wording on every command."""
    helps = {}
    for name, command in get_command(app).commands.items():  # type: ignore[attr-defined]
        for sub in getattr(command, "commands", {}).values() or [command]:
            for param in sub.params:
                if "--json" in param.opts:
                    helps[f"{name} {sub.name}"] = param.help
    assert len(helps) >= 10
    assert all(text.startswith("Print ") and text.endswith(" on stdout and nothing else.") for text in helps.values())


def test_vllms_async_scheduling_switch_is_the_scheduling_mode(kvplan, traces_dir):
    """--no-async-scheduling (an engine argument added as one EngineArgs field) runs the sync loop."""
    trace = str(traces_dir / "example.json")
    runs = {flags: kvplan("replay", trace, "--summary-only", *flags)
            for flags in (("--no-async-scheduling",), ("--scheduling", "sync"), ("--async-scheduling",), ())}
    assert all(code == 0 for code, _, _ in runs.values())
    assert runs[("--no-async-scheduling",)][1] == runs[("--scheduling", "sync")][1]
    assert runs[("--async-scheduling",)][1] == runs[()][1] != runs[("--scheduling", "sync")][1]
    code, out, err = kvplan("replay", trace, "--no-async-scheduling", "--scheduling", "async")
    assert code == 2 and out == "" and "disagree" in err
