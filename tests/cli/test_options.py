"""One options model for the engine settings: the same vLLM spelling on every command, the old
spellings as hidden aliases, and the typed request the commands build from it."""

from __future__ import annotations

import json

import pytest
from typer.main import get_command

from kvplan.cli import app
from kvplan.cli.options import EngineOptions
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
        assert options["chunked_prefill_alias"] == (("--chunked-prefill", "--no-chunked-prefill"), True)


def test_unset_settings_are_vllms_defaults():
    assert EngineOptions(model="m").plan_request() == PlanRequest(model="m")


def test_plan_takes_both_spellings(kvplan):
    base = ("plan", "Qwen/Qwen2-0.5B-Instruct", "--kv-cache-memory", "24GiB", "--json",
            "--max-num-batched-tokens", "40000")
    records = []
    for flags in (("--no-enable-chunked-prefill", "--no-enable-prefix-caching"),
                  ("--no-chunked-prefill", "--prefix-caching", "off")):
        code, out, err = kvplan(*base, *flags)
        assert code == 0, err
        records.append(json.loads(out))
    assert records[0] == records[1]
    assert records[0]["enable_chunked_prefill"] is False and records[0]["enable_prefix_caching"] is False


def test_a_bad_utilization_is_one_line(kvplan):
    code, out, err = kvplan("plan", "--kv-cache-memory", "1GiB", "--gpu-memory-utilization", "1.5")
    assert code == 2 and out == "" and err.strip() == (
        "kvplan: error: --gpu-memory-utilization: 1.5 is out of range: expected a number above 0 and at most 1")


def test_replay_and_simulate_take_the_settings_their_use_case_names():
    engine = EngineOptions(num_gpu_blocks=3, max_num_seqs=2, gpu="l4-24gb", enable_prefix_caching=False)
    assert engine.pick(EngineSettings) == EngineSettings(num_gpu_blocks=3, max_num_seqs=2, enable_prefix_caching=False)
    overrides = engine.pick(EngineOverrides)
    assert overrides == EngineOverrides(num_gpu_blocks=3, max_num_seqs=2, gpu="l4-24gb", enable_prefix_caching=False)
    assert overrides.settings() == {"max_num_seqs": 2, "enable_prefix_caching": False}
