"""What vLLM 0.33.0's hybrid KV cache manager does differently from 0.17.1's, one small scene each.
Every figure here is what vLLM's own classes logged for the same trace (0.33.0: the hybrid harness
of tests/data/README.md; 0.17.1: its harnesses), in the mode named."""

from __future__ import annotations

import pytest

from kvplan.semantics.engine.config import EngineConfig
from kvplan.semantics.engine.groups import KVCacheGroup
from kvplan.semantics.engine.replay import replay
from kvplan.semantics.engine.scheduler import Scheduler, StepResult
from kvplan.semantics.engine.trace import Trace, TraceRequest
from kvplan.semantics.kv.specs import MambaSpec, SlidingWindowSpec
from kvplan.semantics.releases import release_named

FULL = KVCacheGroup()


def swa(window: int) -> KVCacheGroup:
    return KVCacheGroup(SlidingWindowSpec, sliding_window=window)


def engine(version: str, scheduling: str, *groups: KVCacheGroup, **settings) -> EngineConfig:
    return EngineConfig(kv_cache_groups=groups, release=release_named(version), scheduling=scheduling,
                        **{"max_num_seqs": 4, "max_model_len": 1024, **settings})


def steps(config: EngineConfig, *requests: TraceRequest) -> list[tuple[StepResult, dict[str, list[list[int]]]]]:
    """Each step's result and every group's block tables at its end."""
    seen: list[tuple[StepResult, dict[str, list[list[int]]]]] = []

    def observe(result: StepResult, scheduler: Scheduler, arrived: list[str]) -> None:
        seen.append((result, scheduler.block_tables_by_group()))

    replay(Trace(config, requests), observe)
    return seen


SHARED = list(range(1000, 1400))


@pytest.mark.parametrize(("version", "scheduling", "r1_hit", "cached_at_end"), [
    ("0.17.1", "sync", 400, 165), ("0.33.0", "sync", 0, 140), ("0.33.0", "async", 0, 140)])
def test_window_groups_hash_only_blocks_a_later_request_can_hit(version, scheduling, r1_hit, cached_at_end):
    """r0 is 600 tokens; r1 shares its first 400; r2 resends r0; r3 shares the 400 again. 0.33.0's
    window groups hashed only r0's last window, so r1 misses; r1's lookup found the junction at
    400 (full attention hit it, the windows did not), so r1 keeps the window ending there and r3 hits."""
    r0 = [*SHARED, *range(5000, 5200)]
    requests = (TraceRequest("r0", 0, 0, 1, prompt_token_ids=tuple(r0)),
                TraceRequest("r1", 1, 5, 1, prompt_token_ids=(*SHARED, *range(6000, 6200))),
                TraceRequest("r2", 2, 10, 1, prompt_token_ids=tuple(r0)),
                TraceRequest("r3", 3, 15, 1, prompt_token_ids=(*SHARED, *range(7000, 7100))))
    config = engine(version, scheduling, FULL, swa(128), swa(128), num_gpu_blocks=200, max_num_batched_tokens=1024)
    seen = steps(config, *requests)
    hits = {rid: hit for result, _ in seen for rid, hit in result.prefix_hit_tokens.items()}
    assert hits == {"r0": 0, "r1": r1_hit, "r2": 592, "r3": 400}
    assert seen[-1][0].num_cached_blocks == cached_at_end


@pytest.mark.parametrize(("version", "scheduling", "admitted"), [
    ("0.17.1", "async", True), ("0.33.0", "sync", True), ("0.33.0", "async", False)])
def test_whole_prompt_admission_counts_a_window_group_up_to_its_cap(version, scheduling, admitted):
    """A 600-token prompt on 25 usable blocks of 32 tokens: full attention needs 19. The sliding
    window (64) counts at most ceil((63 + in flight) / 32) + 1 blocks: 5 with 64 tokens in flight
    (sync), 7 with 128 (async, two batches), one too many."""
    config = engine(version, scheduling, FULL, swa(64), num_gpu_blocks=26, block_size=32, max_num_batched_tokens=64)
    summary = replay(Trace(config, (TraceRequest("r0", 0, 0, 2, unique_len=600),)))
    assert summary.stalled is not admitted
    assert summary.num_finished == (1 if admitted else 0)


@pytest.mark.parametrize(("version", "scheduling", "freed_at"), [
    ("0.17.1", "sync", 3), ("0.17.1", "async", 3), ("0.33.0", "sync", 3), ("0.33.0", "async", 4)])
def test_window_blocks_are_freed_once_their_batch_is_processed(version, scheduling, freed_at):
    """64 prompt tokens in chunks of 16, window 32: the chunk at 48 computed tokens no longer reads
    block 0. 0.33.0 judges that on processed tokens, so under async it frees it a step later."""
    config = engine(version, scheduling, FULL, swa(32), num_gpu_blocks=20, max_num_batched_tokens=16)
    seen = steps(config, TraceRequest("r0", 0, 0, 3, unique_len=64))
    window_tables = [tables["r0"][1] for _, tables in seen if "r0" in tables]
    assert [table[0] == 0 for table in window_tables[:5]] == [step >= freed_at for step in range(5)]


@pytest.mark.parametrize(("version", "chunks"), [("0.17.1", [96, 1]), ("0.33.0", [80, 16, 1])])
def test_a_mamba_align_prefill_stops_at_the_last_boundary_before_its_last_token(version, chunks):
    """A 96-token prompt with a Mamba "align" group: 0.17.1 computes it whole (96 is a boundary);
    0.33.0 stops at 80, the last state a resent prompt (hit at most 95 tokens) can use."""
    config = engine(version, "sync", FULL, KVCacheGroup(MambaSpec), num_gpu_blocks=20, max_num_batched_tokens=128)
    seen = steps(config, TraceRequest("r0", 0, 0, 2, unique_len=96))
    assert [result.scheduled["r0"] for result, _ in seen] == chunks
    assert seen[0][1]["r0"][1][-1] != 0 and set(seen[0][1]["r0"][1][:-1]) == {0}


def test_0_33_0_has_no_mamba_all_mode() -> None:
    """A model that ran "all" under 0.17.1 runs "align" under 0.33.0: the same records."""
    def records(mode: str | None) -> list[StepResult]:
        config = engine("0.33.0", "sync", FULL, KVCacheGroup(MambaSpec, mamba_cache_mode=mode),
                        num_gpu_blocks=20, max_num_batched_tokens=64)
        return [result for result, _ in steps(config, TraceRequest("a", 0, 0, 4, prefix_len=100, unique_len=7),
                                              TraceRequest("b", 1, 3, 4, prefix_len=100, unique_len=9))]

    assert records("all") == records("align") == records(None)
