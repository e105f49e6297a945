"""simulate's figures with the scheduler's bulk fast path (`semantics/engine/cruise.py`) and without
it: the same metrics (every figure, percentile, series point) and the same per-request records, on
the example workloads and on random ones, in both scheduling modes and every release."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvplan.semantics.releases import RELEASES
from kvplan.usecases.replay import BULK_DECODE_VARIABLE
from kvplan.usecases.simulate.driver import EngineOverrides, RunOutcome, SimOptions, prepare, run
from kvplan.usecases.simulate.metrics import RequestRecord
from kvplan.usecases.simulate.workload import load_workload, parse_workload

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = [*sorted((REPO / "examples" / "workloads").glob("*.json")), REPO / "examples/checks/workloads/chat.json"]
# The longest runs are compared in their own release's mode only here (both modes, byte for byte
# through the CLI: scripts/compare_bulk_decode.sh).
LONG = ("chat-5rps", "multi-turn-agent", "rag-long-context")
CASES = [(path, mode) for path in EXAMPLES for mode in ("sync", "async") if mode == "async" or path.stem not in LONG]


def record_fields(record: RequestRecord) -> tuple[Any, ...]:
    """Every field but the run's working count of computed tokens, which the recorder stops
    following while the engine advances the request in bulk (`StepResult.rejoined` restores it)."""
    return tuple(getattr(record, name) for name in RequestRecord.__slots__ if name != "computed")


def both_paths(setup: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[RunOutcome, RunOutcome]:
    outcomes = []
    for flag in ("0", "1"):
        monkeypatch.setenv(BULK_DECODE_VARIABLE, flag)
        outcomes.append(run(setup))
    return outcomes[0], outcomes[1]


def assert_same(per_step: RunOutcome, in_bulk: RunOutcome) -> None:
    assert in_bulk.metrics == per_step.metrics
    assert [record_fields(r) for r in in_bulk.records] == [record_fields(r) for r in per_step.records]
    assert (in_bulk.num_rejected, in_bulk.num_conversations_cut, in_bulk.pool_was_short) == (
        per_step.num_rejected, per_step.num_conversations_cut, per_step.pool_was_short)


@pytest.mark.parametrize(("path", "scheduling"), CASES, ids=[f"{path.stem}-{mode}" for path, mode in CASES])
def test_example_workloads_give_the_same_figures(path: Path, scheduling: str, monkeypatch: pytest.MonkeyPatch) -> None:
    setup = prepare(load_workload(path), SimOptions(EngineOverrides(scheduling=scheduling)))
    assert_same(*both_paths(setup, monkeypatch))


SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                             HealthCheck.function_scoped_fixture])


@st.composite
def workloads(draw: st.DrawFn) -> dict[str, Any]:
    """Small pools (preemptions, evictions, landings), long outputs (runs of steady decodes), a
    shared prefix, sometimes conversations whose next turn arrives after the last one finished;
    timed by a roofline, so that each step's duration depends on its batch."""
    max_model_len = draw(st.integers(300, 1200))
    classes: list[dict[str, Any]] = [{
        "name": "chat", "weight": 3, "shared_prefix": {"name": "system", "tokens": draw(st.integers(1, 80))},
        "prompt_tokens": {"dist": "uniform", "min": 1, "max": draw(st.integers(1, 150))},
        "output_tokens": {"dist": "uniform", "min": 1, "max": draw(st.integers(1, 200))},
    }]
    if draw(st.booleans()):
        classes.append({"name": "agent", "weight": 1, "prompt_tokens": {"dist": "uniform", "min": 4, "max": 60},
                        "output_tokens": {"dist": "uniform", "min": 2, "max": 80},
                        "turns": {"count": draw(st.integers(2, 4)), "user_tokens": 20, "think_time_s": 0.05}})
    return {
        "schema_version": 1, "seed": draw(st.integers(0, 1000)),
        "engine": {"num_gpu_blocks": draw(st.integers(30, 400)), "block_size": draw(st.sampled_from([8, 16])),
                   "max_num_seqs": draw(st.integers(1, 24)), "max_num_batched_tokens": draw(st.integers(256, 1024)),
                   "max_model_len": max_model_len, "enable_prefix_caching": draw(st.booleans()),
                   "vllm_version": draw(st.sampled_from(sorted(RELEASES))),
                   "scheduling": draw(st.sampled_from(["sync", "async"]))},
        "timing": {"weights_bytes": 2 * 10**9, "kv_bytes_per_token": 131072, "gpu": "l4-24gb"},
        "classes": classes,
        "arrival": {"process": "poisson", "rate": draw(st.floats(2.0, 80.0)), "count": draw(st.integers(1, 40))},
    }


@SETTINGS
@given(document=workloads())
def test_random_workloads_give_the_same_figures(document: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    setup = prepare(parse_workload(json.loads(json.dumps(document)), REPO), SimOptions())
    assert_same(*both_paths(setup, monkeypatch))
