"""`kvplan replay` as a use case: settings replace the trace's config, the release rides along,
and the run gives vLLM's own summary."""

from __future__ import annotations

import json

import pytest

from kvplan.semantics.engine.args import EngineArgs
from kvplan.semantics.releases import VLLM_0_17_1
from kvplan.usecases.replay import EngineSettings, ReplayRequest, load_replay, replay_trace


def golden_summary(traces_dir, name, mode=""):
    return json.loads((traces_dir / f"{name}.vllm-0.17.1{mode}.jsonl").read_text().splitlines()[-1])["summary"]


@pytest.mark.parametrize(("scheduling", "mode"), [("sync", ""), ("async", ".async")])
def test_the_trace_gives_vllms_summary_in_each_scheduling_mode(traces_dir, scheduling, mode):
    request = ReplayRequest(traces_dir / "example.json", EngineSettings(scheduling=scheduling), VLLM_0_17_1)
    summary = replay_trace(load_replay(request))
    golden = golden_summary(traces_dir, "example", mode)
    assert summary.config.release == VLLM_0_17_1
    assert (summary.num_steps, summary.total_preemptions, summary.prefix_cache_hits, summary.max_used_blocks) == (
        golden["num_steps"], golden["total_preemptions"], golden["prefix_cache_hits"], golden["max_used_blocks"])


def test_settings_replace_the_trace_config_and_none_keeps_it(traces_dir):
    trace = load_replay(ReplayRequest(traces_dir / "example.json",
                                      EngineSettings(EngineArgs(max_num_seqs=2), num_gpu_blocks=64)))
    golden = golden_summary(traces_dir, "example")["config"]
    assert (trace.config.num_gpu_blocks, trace.config.max_num_seqs) == (64, 2)
    assert (trace.config.block_size, trace.config.max_num_batched_tokens) == (
        golden["block_size"], golden["max_num_batched_tokens"])
    summary = replay_trace(trace)
    assert summary.total_preemptions == 0 and summary.num_finished == summary.num_requests

