"""Invariants of the shared block pool on random traces with several KV cache groups (hypothesis):
every block is free or referenced, never both; a block serves one group at a time; the null
block is never freed, hashed or handed out; each group's tables cover its computed tokens."""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

from kvplan.errors import KvplanError
from kvplan.report.replay_records import RecordEncoder, step_record
from kvplan.semantics.engine.config import EngineConfig
from kvplan.semantics.engine.coordinator import KVCacheCoordinator
from kvplan.semantics.engine.groups import KVCacheGroup
from kvplan.semantics.engine.replay import replay
from kvplan.semantics.engine.scheduler import Scheduler, StepResult
from kvplan.semantics.engine.trace import Trace
from kvplan.semantics.kv.specs import GROUP_TYPES, ChunkedLocalAttentionSpec, MambaSpec, SlidingWindowSpec
from tests.semantics.engine.strategies import engine_knobs, trace_requests

SETTINGS = settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@st.composite
def groups(draw: st.DrawFn, block_size: int, mamba_mode: str | None) -> KVCacheGroup:
    spec = draw(st.sampled_from(GROUP_TYPES))
    # vLLM's page-size unification can give a group blocks of several hash blocks.
    own_size = draw(st.sampled_from([None, None, None, 2 * block_size]))
    if spec is SlidingWindowSpec:
        return KVCacheGroup(spec, sliding_window=draw(st.integers(1, 64)), block_size=own_size)
    if spec is ChunkedLocalAttentionSpec:
        return KVCacheGroup(spec, attention_chunk_size=draw(st.integers(1, 64)), block_size=own_size)
    if spec is MambaSpec:
        return KVCacheGroup(spec, mamba_cache_mode=mamba_mode, block_size=own_size)
    return KVCacheGroup(block_size=own_size)


@st.composite
def hybrid_traces(draw: st.DrawFn) -> Trace:
    knobs = draw(engine_knobs(60))
    mamba_mode = draw(st.sampled_from([None, "align", "all"]))
    group_lists = st.lists(groups(knobs["block_size"], mamba_mode), min_size=1, max_size=4)
    try:
        config = EngineConfig(**knobs, kv_cache_groups=tuple(draw(group_lists)))
    except KvplanError:
        assume(False)  # a combination vLLM refuses (tested in test_hybrid_config)
        raise
    return Trace(config, draw(trace_requests(config.max_model_len, 8)))


def check_step(result: StepResult, scheduler: Scheduler, arrived: list[str]) -> None:
    config = scheduler.config
    pool = scheduler.block_pool
    managers = scheduler.kv_cache_manager.managers
    running = {r.request_id for r in scheduler.running}
    free = set(pool.free_block_ids())
    assert len(free) == result.num_free_blocks and 0 not in free
    null = pool.null_block
    assert null.ref_cnt == 0 and null.block_hash is None

    holders: Counter[int] = Counter()
    owner: dict[int, int] = {}
    for group_id, manager in enumerate(managers):
        assert set(manager.req_to_blocks) == running
        held = {b.block_id for blocks in manager.req_to_blocks.values() for b in blocks if not b.is_null}
        for block_id in held:
            assert owner.setdefault(block_id, group_id) == group_id  # one group at a time
            assert pool.blocks[block_id].group_id == group_id
        assert result.num_used_blocks_by_group[group_id] == len(held)
        holders.update(b.block_id for blocks in manager.req_to_blocks.values() for b in blocks if not b.is_null)
    for block in pool.blocks[1:]:
        assert block.ref_cnt == holders[block.block_id]
        assert (block.ref_cnt == 0) == (block.block_id in free)
    assert len(free) + len(holders) == config.num_gpu_blocks - 1
    assert sum(result.num_used_blocks_by_group) == result.num_used_blocks

    hashed = [b for b in pool.blocks if b.block_hash is not None]
    assert len(hashed) == result.num_cached_blocks
    assert sum(b.ref_cnt == 0 for b in hashed) == result.num_evictable_cached_blocks
    assert all(pool.get_cached_block(b.block_hash, b.group_id) is not None for b in hashed)  # type: ignore[arg-type]
    if not config.enable_prefix_caching:
        assert not hashed

    for request in scheduler.running:
        computed = request.num_computed_tokens
        for manager in managers:
            table = manager.req_to_blocks[request.request_id]
            assert len(table) * manager.block_size >= computed
            if manager.group.mamba_cache_mode == "none":
                assert len(table) == 1
            if computed:
                # The block of the last computed token is always kept, in every kind of group.
                assert not table[(computed - 1) // manager.block_size].is_null


@SETTINGS
@given(hybrid_traces())
def test_pool_accounting_holds_at_every_step_with_several_groups(trace: Trace) -> None:
    encoder = RecordEncoder(dump_free_queue=True)

    def observe(result: StepResult, scheduler: Scheduler, arrived: list[str]) -> None:
        check_step(result, scheduler, arrived)
        record = step_record(result, scheduler, arrived, dump_free_queue=True)
        assert encoder.encode(result, scheduler, arrived) == json.dumps(record)
        assert {k: tables[0] for k, tables in record["block_tables_by_group"].items()} == record["block_tables"]

    summary = replay(trace, observe)
    assert summary.stalled or summary.num_finished == len(trace.requests)


def records(trace: Trace) -> list[dict]:
    collected: list[dict] = []
    replay(trace, lambda result, scheduler, arrived: collected.append(
        step_record(result, scheduler, arrived, dump_free_queue=True)))
    return collected


@SETTINGS
@given(hybrid_traces())
def test_skipping_no_op_allocations_changes_nothing(trace: Trace) -> None:
    """The scheduler skips `allocate_slots` below each request's no-op limit; calling it every time
    gives exactly the same records."""
    fast = records(trace)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(KVCacheCoordinator, "noop_limit", lambda self, request: 0)
        always = records(trace)
    assert fast == always
