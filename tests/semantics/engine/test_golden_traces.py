"""Every golden trace, record for record, against what vLLM's own classes logged: each release
(0.17.1, 0.33.0, 0.34.0) in each scheduling mode (sync, async) for which records exist."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvplan.report.replay_records import RecordEncoder, step_record, summary_record
from kvplan.semantics.engine.replay import replay
from kvplan.semantics.engine.scheduler import Scheduler, StepResult
from kvplan.sources.traces import load_trace
from tests.golden import GOLDEN_CASES, PENDING_CASES, PENDING_RELEASES, GoldenCase, normalised

CASES = [*GOLDEN_CASES, *(pytest.param(case, marks=pytest.mark.xfail(reason=PENDING_RELEASES[case.vllm_version],
                                                                    strict=True))
                          for case in PENDING_CASES)]


def test_every_release_and_mode_has_golden_records() -> None:
    combinations = {(case.vllm_version, case.scheduling) for case in GOLDEN_CASES}
    assert combinations == {(version, mode) for version in ("0.17.1", "0.33.0", "0.34.0") for mode in ("sync", "async")}


@pytest.mark.parametrize("case", CASES, ids=[case.id for case in [*GOLDEN_CASES, *PENDING_CASES]])
def test_replay_reproduces_every_record(case: GoldenCase) -> None:
    golden = case.records()
    dump_free_queue = "free_queue" in golden[0]
    encoder = RecordEncoder(dump_free_queue)
    lines: list[str] = []
    dicts: list[dict[str, Any]] = []

    def observe(result: StepResult, scheduler: Scheduler, arrived: list[str]) -> None:
        lines.append(encoder.encode(result, scheduler, arrived))
        dicts.append(step_record(result, scheduler, arrived, dump_free_queue))

    summary = replay(load_trace(case.trace, case.engine), observe)
    ours = [json.loads(line) for line in lines] + [json.loads(json.dumps(summary_record(summary)))]

    assert len(ours) == len(golden)
    for mine, theirs in zip(ours, golden, strict=True):
        assert normalised(mine) == normalised(theirs), f"record {theirs.get('step', 'summary')} differs"
        if "usage" in theirs:
            assert mine["usage"] == pytest.approx(theirs["usage"], abs=1e-12)
    # The incremental encoder writes exactly what json.dumps of the plain record writes.
    assert lines == [json.dumps(record) for record in dicts]


def test_example_facts_from_the_contract(traces_dir: Path) -> None:
    summary = replay(load_trace(traces_dir / "example.json", {"vllm_version": "0.17.1", "scheduling": "sync"}))
    assert (summary.num_steps, summary.num_finished, summary.total_preemptions) == (32, 6, 2)
    assert (summary.prefix_cache_hits, summary.prefix_cache_queries) == (224, 634)
    assert (summary.preempted_hits, summary.preempted_queries) == (576, 1200)
    assert summary.max_used_blocks == 13
    assert summary.requests["r3"].num_preemptions == 2
    # r4's 48-token prompt equals a cached 3-block prefix whose tail was evicted first.
    assert summary.requests["r4"].num_cached_tokens == 16
