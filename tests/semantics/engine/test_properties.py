"""Invariants of the block manager and scheduler on random traces (hypothesis)."""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from kvplan.report.replay_records import RecordEncoder, step_record
from kvplan.semantics.engine.config import EngineConfig
from kvplan.semantics.engine.groups import KVCacheGroup
from kvplan.semantics.engine.hashing import none_hash
from kvplan.semantics.engine.kv_cache_manager import KVCacheManager
from kvplan.semantics.engine.replay import replay
from kvplan.semantics.engine.request import Request
from kvplan.semantics.engine.scheduler import Scheduler, StepResult
from kvplan.semantics.engine.trace import Trace
from kvplan.semantics.kv.specs import SlidingWindowSpec
from tests.references import hash_block_tokens
from tests.semantics.engine.strategies import engine_knobs, trace_requests

SETTINGS = settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def traces(draw: st.DrawFn) -> Trace:
    knobs = draw(engine_knobs(40))
    groups = draw(st.one_of(st.none(), st.integers(1, 64).map(
        lambda window: (KVCacheGroup(SlidingWindowSpec, sliding_window=window),))))
    config = EngineConfig(**knobs, kv_cache_groups=groups)
    return Trace(config, draw(trace_requests(config.max_model_len, 10)))


def expected_hashes(request: Request, config: EngineConfig) -> list[bytes]:
    """The chain recomputed from the request's tokens alone."""
    size = config.block_size
    parent, chain = none_hash(config.hash_seed), []
    for i in range(request.num_tokens // size):
        parent = hash_block_tokens(parent, request.token_ids(i * size, (i + 1) * size))
        chain.append(parent)
    return chain


def check_step(result: StepResult, scheduler: Scheduler, arrived: list[str]) -> None:
    config = scheduler.config
    pool = scheduler.block_pool
    manager = scheduler.kv_cache_manager.manager
    free_ids = pool.free_block_ids()
    free = set(free_ids)
    assert len(free) == len(free_ids) == result.num_free_blocks and 0 not in free

    # Only running requests hold blocks; a block's ref count is the number of tables holding it.
    assert set(manager.req_to_blocks) == {r.request_id for r in scheduler.running}
    # Sliding-window tables hold the null block (0) for positions out of the window.
    holders = Counter(b.block_id for blocks in manager.req_to_blocks.values() for b in blocks if b.block_id)
    for block in pool.blocks[1:]:
        assert block.ref_cnt == holders[block.block_id]
        assert (block.ref_cnt == 0) == (block.block_id in free)  # never both free and referenced
    assert len(free) + len(holders) == config.num_gpu_blocks - 1  # conservation
    assert result.num_used_blocks == config.num_gpu_blocks - 1 - result.num_free_blocks

    hashed = [b for b in pool.blocks if b.block_hash is not None]
    assert len(hashed) == result.num_cached_blocks
    assert sum(b.ref_cnt == 0 for b in hashed) == result.num_evictable_cached_blocks
    assert all(pool.get_cached_block(b.block_hash) is not None for b in hashed)
    if not config.enable_prefix_caching:
        assert not hashed

    for request in scheduler.running:
        assert request.num_tokens == request.num_prompt_tokens + request.num_output_tokens
        # Under async scheduling computed tokens include those whose output is still in flight.
        assert request.num_computed_tokens <= request.num_tokens + request.num_output_placeholders
        # At the end of a step only the newest batch is in flight.
        assert request.num_output_placeholders <= (1 if config.scheduling == "async" else 0)
        blocks = manager.req_to_blocks[request.request_id]
        assert len(blocks) * config.block_size >= request.num_computed_tokens
        if config.enable_prefix_caching:
            chain = expected_hashes(request, config)
            assert request.block_hashes == chain
            num_cached = manager.num_cached_block.get(request.request_id, 0)
            for block, block_hash in zip(blocks[:num_cached], chain, strict=False):
                if manager.caches_reachable_only and block.block_hash is None:
                    continue  # a window block no later request can hit stays unhashed
                assert block.block_hash == (None if block.is_null else block_hash)
            assert all(b.block_hash is None for b in blocks[num_cached:])
    for request in scheduler.waiting:
        assert request.num_computed_tokens == 0
        assert request.num_tokens == request.num_prompt_tokens + request.num_output_tokens

    stats = scheduler.prefix_cache_stats
    assert 0 <= stats.hits <= stats.queries and 0 <= stats.preempted_hits <= stats.preempted_queries
    assert result.num_scheduled_tokens == sum(result.scheduled.values()) <= config.max_num_batched_tokens


@SETTINGS
@given(traces())
def test_invariants_hold_at_every_step(trace: Trace) -> None:
    created: dict[str, Request] = {}
    original_add = Scheduler.add_request

    def add_and_remember(self: Scheduler, request: Request) -> None:
        created[request.request_id] = request
        original_add(self, request)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(Scheduler, "add_request", add_and_remember)
        summary = replay(trace, check_step)

    assert summary.stalled or summary.num_finished == len(trace.requests)
    config = trace.config
    for spec in trace.requests:
        request = created.get(spec.request_id)
        outcome = summary.requests[spec.request_id]
        if outcome.finish_step is None:
            assert summary.stalled
            continue
        # No token lost: exactly max_tokens, or up to the model length.
        assert request is not None
        assert request.num_output_tokens == min(spec.max_tokens, config.max_model_len - spec.prompt_len)
        assert request.num_prompt_tokens == spec.prompt_len


def run_records(trace: Trace) -> list[dict[str, Any]]:
    records: list[dict[str, Any]] = []
    encoder = RecordEncoder(dump_free_queue=True)

    def observe(result: StepResult, scheduler: Scheduler, arrived: list[str]) -> None:
        record = step_record(result, scheduler, arrived, dump_free_queue=True)
        assert encoder.encode(result, scheduler, arrived) == json.dumps(record)
        records.append(record)

    replay(trace, observe)
    return records


@SETTINGS
@given(traces())
def test_shortcuts_change_nothing(trace: Trace) -> None:
    """With full attention, the fast path of allocate_slots and the scheduler's skip of no-op
    allocations give exactly the records of the general path; the incremental encoder gives
    exactly json.dumps of the record."""
    fast = run_records(trace)
    original_init = KVCacheManager.__init__

    def general_only(self: KVCacheManager, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        self._full_attention = False

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(KVCacheManager, "__init__", general_only)
        general = run_records(trace)
    assert fast == general
