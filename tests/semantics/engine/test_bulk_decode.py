"""The scheduler's bulk fast path (`cruise.py`) against the per-step path: at every step the same
batch sizes, arrivals, admissions, preemptions and finishes, the same free queue (block for block,
in order), the same block tables and prefix-cache entries; the same summary at the end."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvplan.semantics.engine.config import EngineConfig
from kvplan.semantics.engine.replay import ReplaySummary, replay
from kvplan.semantics.engine.scheduler import Scheduler, StepResult
from kvplan.semantics.engine.trace import Trace, TraceRequest
from kvplan.semantics.releases import RELEASES
from kvplan.sources.traces import load_trace
from tests.golden import GOLDEN_CASES, GoldenCase
from tests.semantics.engine.strategies import engine_knobs


def pool_state(result: StepResult, scheduler: Scheduler) -> tuple[Any, ...]:
    """What one step did and left, read without the requests' counters (cruising requests keep
    theirs stale until they land; reading `running` would land them)."""
    pool = scheduler.block_pool
    tables = {
        request_id: [(block.block_id, block.block_hash) for block in blocks]
        for request_id, blocks in sorted(scheduler.kv_cache_manager.manager.req_to_blocks.items())
    }
    return (
        result.step, result.num_scheduled_tokens, len(result.scheduled) + result.num_bulk_scheduled,
        result.admitted, result.resumed, result.prefix_hit_tokens, result.preempted, result.finished,
        result.free_blocks_after_schedule, result.num_free_blocks, result.num_used_blocks, result.num_cached_blocks,
        result.num_evictable_cached_blocks, result.prefix_cache, result.output_of_earlier_batch,
        pool.free_block_ids(), tables, scheduler.num_running, len(scheduler.waiting),
        sum(scheduled for scheduled in result.scheduled.values()) + result.num_bulk_scheduled,
    )


def run(trace: Trace, bulk: bool) -> tuple[list[tuple[Any, ...]], ReplaySummary, int]:
    states: list[tuple[Any, ...]] = []
    bulk_steps = [0]

    def observe(result: StepResult, scheduler: Scheduler, arrived: list[str]) -> None:
        states.append((pool_state(result, scheduler), tuple(arrived)))
        bulk_steps[0] += result.num_bulk_scheduled

    summary = replay(trace, observe, bulk_decode=bulk)
    return states, summary, bulk_steps[0]


def assert_same(trace: Trace) -> int:
    """Both paths, step for step; how many request-steps the fast path advanced in bulk."""
    per_step, per_step_summary, none = run(trace, bulk=False)
    in_bulk, bulk_summary, advanced = run(trace, bulk=True)
    assert none == 0
    assert len(in_bulk) == len(per_step)
    for mine, theirs in zip(in_bulk, per_step, strict=True):
        assert mine == theirs, f"step {theirs[0][0]} differs"
    assert bulk_summary == per_step_summary
    return advanced


@pytest.mark.parametrize("case", GOLDEN_CASES, ids=[case.id for case in GOLDEN_CASES])
def test_every_golden_trace_gives_the_same_steps(case: GoldenCase) -> None:
    assert_same(load_trace(case.trace, case.engine))


def long_decodes(num_requests: int, max_tokens: int, spacing: int, prompt: int = 40) -> tuple[TraceRequest, ...]:
    return tuple(TraceRequest(f"r{i}", i, i * spacing, max_tokens, prefix_id=0, prefix_len=prompt // 2,
                              unique_len=prompt - prompt // 2) for i in range(num_requests))


@pytest.mark.parametrize("release", sorted(RELEASES))
@pytest.mark.parametrize("scheduling", ["sync", "async"])
@pytest.mark.parametrize("caching", [True, False])
def test_steady_decodes_advance_in_bulk(release: str, scheduling: str, caching: bool) -> None:
    """Long decodes with staggered arrivals: most request-steps cruise, in both modes and releases,
    and both paths agree; a pool too small for them all makes the cruising requests land."""
    config = EngineConfig(num_gpu_blocks=400, block_size=16, enable_prefix_caching=caching, max_num_batched_tokens=256,
                          max_num_seqs=8, max_model_len=1024, release=RELEASES[release], scheduling=scheduling)
    requests = long_decodes(12, 200, 7)
    advanced = assert_same(Trace(config, requests))
    assert advanced > 0.8 * 12 * 200
    # 60 blocks: preemptions while requests cruise
    assert assert_same(Trace(replace(config, num_gpu_blocks=60), requests)) > 0


SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def decode_heavy_traces(draw: st.DrawFn) -> Trace:
    """Random engines (small pools: preemptions, evictions; any release and mode) and requests with
    long outputs arriving over the first 60 steps, so that runs of steady decodes form and break."""
    knobs = draw(engine_knobs(120))
    max_model_len = draw(st.integers(100, 400))
    budget = knobs["max_num_batched_tokens"] if knobs["enable_chunked_prefill"] else max_model_len
    config = EngineConfig(**{**knobs, "max_model_len": max_model_len, "max_num_batched_tokens": budget})
    requests = []
    for ordinal in range(draw(st.integers(1, 12))):
        prefix_len = draw(st.integers(0, 40))
        unique_len = draw(st.integers(0 if prefix_len else 1, 40))
        requests.append(TraceRequest(f"q{ordinal}", ordinal, draw(st.integers(0, 60)), draw(st.integers(1, 120)),
                                     prefix_id=draw(st.integers(0, 2)), prefix_len=prefix_len, unique_len=unique_len))
    return Trace(config, tuple(requests))


@SETTINGS
@given(decode_heavy_traces())
def test_random_workloads_give_the_same_steps(trace: Trace) -> None:
    assert_same(trace)
