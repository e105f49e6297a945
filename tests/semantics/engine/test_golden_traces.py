"""Every golden trace, record for record, against what vLLM 0.17.1's own classes logged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kvplan.report.replay_records import RecordEncoder, step_record, summary_record
from kvplan.semantics.engine.replay import replay
from kvplan.semantics.engine.scheduler import Scheduler, StepResult
from kvplan.semantics.engine.trace import load_trace

GOLDEN = ["example", "public-501", "public-502", "public-503"]
TRACES = Path(__file__).parents[2] / "data" / "traces"
# Several KV cache groups on one pool (trace-replay-hybrid.md); groups with their own block sizes.
HYBRID = sorted(p.stem for pattern in ("hybrid-*.json", "group-block-sizes-*.json") for p in TRACES.glob(pattern))
# Informational keys (trace-replay.md section 4); `usage` is compared approximately.
IGNORED_SUMMARY_KEYS = {"config", "vllm_version", "driver", "driver_check", "schema_version"}


def normalised(record: dict[str, Any]) -> dict[str, Any]:
    if "summary" in record:
        return {k: v for k, v in record["summary"].items() if k not in IGNORED_SUMMARY_KEYS}
    return {k: v for k, v in record.items() if k != "usage"}


def golden_records(traces_dir: Path, name: str) -> list[dict[str, Any]]:
    text = (traces_dir / f"{name}.vllm-0.17.1.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines()]


@pytest.mark.parametrize("name", GOLDEN + HYBRID)
def test_replay_reproduces_every_record(traces_dir: Path, name: str) -> None:
    golden = golden_records(traces_dir, name)
    dump_free_queue = "free_queue" in golden[0]
    encoder = RecordEncoder(dump_free_queue)
    lines: list[str] = []
    dicts: list[dict[str, Any]] = []

    def observe(result: StepResult, scheduler: Scheduler, arrived: list[str]) -> None:
        lines.append(encoder.encode(result, scheduler, arrived))
        dicts.append(step_record(result, scheduler, arrived, dump_free_queue))

    summary = replay(load_trace(traces_dir / f"{name}.json"), observe)
    ours = [json.loads(line) for line in lines] + [json.loads(json.dumps(summary_record(summary)))]

    assert len(ours) == len(golden)
    for mine, theirs in zip(ours, golden, strict=True):
        assert normalised(mine) == normalised(theirs), f"record {theirs.get('step', 'summary')} differs"
        if "usage" in theirs:
            assert mine["usage"] == pytest.approx(theirs["usage"], abs=1e-12)
    # The incremental encoder writes exactly what json.dumps of the plain record writes.
    assert lines == [json.dumps(record) for record in dicts]


def test_example_facts_from_the_contract(traces_dir: Path) -> None:
    summary = replay(load_trace(traces_dir / "example.json"))
    assert (summary.num_steps, summary.num_finished, summary.total_preemptions) == (32, 6, 2)
    assert (summary.prefix_cache_hits, summary.prefix_cache_queries) == (224, 634)
    assert (summary.preempted_hits, summary.preempted_queries) == (576, 1200)
    assert summary.max_used_blocks == 13
    assert summary.requests["r3"].num_preemptions == 2
    # r4's 48-token prompt equals a cached 3-block prefix whose tail was evicted first.
    assert summary.requests["r4"].num_cached_tokens == 16
