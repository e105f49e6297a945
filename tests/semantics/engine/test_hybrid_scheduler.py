"""The scheduler's two Mamba rules (docs/vllm/replay-hybrid.md §2): block-aligned prefill chunks
in "align" mode, and no hit on a state cached in the same step. The scenes' records were checked
against vLLM 0.17.1's own `Scheduler` driven the same way (identical)."""

from __future__ import annotations

import pytest

from kvplan.semantics.engine.config import EngineConfig
from kvplan.semantics.engine.groups import KVCacheGroup
from kvplan.semantics.engine.request import Request
from kvplan.semantics.engine.scheduler import Scheduler, StepResult, mamba_aligned_chunk, mamba_checkpoint_chunk
from kvplan.semantics.kv.specs import MambaSpec
from kvplan.semantics.releases import VLLM_0_17_1, VLLM_0_33_0


def mamba_scheduler(mode: str | None = None, budget: int = 40) -> Scheduler:
    groups = (KVCacheGroup(), KVCacheGroup(MambaSpec, mamba_cache_mode=mode))
    return Scheduler(EngineConfig(num_gpu_blocks=40, max_num_batched_tokens=budget, max_num_seqs=4,
                                  max_model_len=512, kv_cache_groups=groups, release=VLLM_0_17_1,
                                  scheduling="sync"))


def tables(scheduler: Scheduler) -> dict[str, list[list[int]]]:
    return scheduler.block_tables_by_group()


def steps(scheduler: Scheduler, count: int) -> list[StepResult]:
    return [scheduler.step() for _ in range(count)]


@pytest.mark.parametrize(("computed", "prompt", "num_new", "expected"), [
    (0, 100, 40, 32),  # ends before the last boundary (96): whole blocks only
    (64, 100, 36, 32),  # crosses the last boundary: stop on it
    (96, 100, 4, 4),  # past the last boundary: the tail as is
    (0, 100, 8, 0),  # less than a block before the boundary: nothing
    (0, 10, 8, 8),  # no boundary inside the prompt (last boundary 0)
])
def test_the_aligned_split(make_request, computed: int, prompt: int, num_new: int, expected: int) -> None:
    request = make_request("a", prompt)
    request.num_computed_tokens = computed
    assert mamba_aligned_chunk(request, num_new, 0, 16) == expected


def test_decodes_are_never_split(make_request) -> None:
    request = make_request("a", 20)
    request.num_computed_tokens = 20
    request.append_output_token()
    assert mamba_aligned_chunk(request, 1, 0, 16) == 1
    assert mamba_aligned_chunk(make_request("b", 40), 24, 16, 16) == 16  # a prefix hit counts as computed


def test_align_mode_prefills_in_whole_blocks_and_a_waiting_zero_stops_admission(make_request) -> None:
    scheduler = mamba_scheduler()
    scheduler.add_request(Request("a", list(range(100)), 2, [9000, 9001]))
    scheduler.add_request(Request("b", list(range(1000, 1020)), 2, [9002, 9003]))
    first = scheduler.step()
    # b's 8 leftover tokens hold no whole block before its boundary (16): admission stops.
    assert first.scheduled == {"a": 32} and [r.request_id for r in scheduler.waiting] == ["b"]
    second, third, fourth, fifth = steps(scheduler, 4)
    assert second.scheduled == {"a": 32} and second.admitted == []
    assert third.scheduled == {"a": 32}
    assert fourth.scheduled == {"a": 4, "b": 16} and fourth.admitted == ["b"]
    assert fifth.scheduled == {"a": 1, "b": 4}
    assert tables(scheduler) == {"b": [[12, 14], [13, 15]]}


def test_align_tables_keep_the_previous_state_until_the_next_allocation(make_request) -> None:
    scheduler = mamba_scheduler()
    scheduler.add_request(Request("a", list(range(100)), 2, [9000, 9001]))
    scheduler.step()
    assert tables(scheduler) == {"a": [[1, 2], [0, 3]]}
    scheduler.step()
    assert tables(scheduler) == {"a": [[1, 2, 4, 5], [0, 3, 0, 6]]}
    scheduler.step()
    assert tables(scheduler) == {"a": [[1, 2, 4, 5, 7, 8], [0, 0, 0, 6, 0, 9]]}


def test_a_hit_on_a_state_cached_this_step_waits_one_step_at_the_head() -> None:
    scheduler = mamba_scheduler("all", budget=256)
    scheduler.add_request(Request("a", list(range(64)), 2, [9000, 9001]))
    scheduler.add_request(Request("b", [*range(64), 7], 2, [9002, 9003]))
    scheduler.add_request(Request("c", list(range(5000, 5008)), 2, [9004, 9005]))
    first = scheduler.step()
    # b would hit a's 64 tokens, whose last state a wrote in this very step: refused, and c
    # (which would fit) waits behind it. No preemption.
    assert first.admitted == ["a"] and first.preempted == []
    assert [r.request_id for r in scheduler.waiting] == ["b", "c"]
    assert first.prefix_cache.requests == 2 and first.prefix_cache.hits == 64
    second = scheduler.step()
    assert second.admitted == ["b", "c"] and second.prefix_hit_tokens == {"b": 64, "c": 0}
    assert tables(scheduler) == {"b": [[1, 2, 3, 4, 11], [0, 0, 0, 8, 12]], "c": [[13], [14]]}


def test_each_group_reports_the_blocks_it_holds() -> None:
    scheduler = mamba_scheduler("all", budget=256)
    scheduler.add_request(Request("a", list(range(64)), 2, [9000, 9001]))
    step = scheduler.step()
    assert step.num_used_blocks_by_group == (4, 4) and step.num_used_blocks == 8


@pytest.mark.parametrize(("computed", "prompt", "num_new", "alignment", "expected"), [
    (0, 100, 100, None, 96),  # no checkpoint blocks: the prompt's last chunk stops at its boundary
    (0, 100, 100, 1, 100),  # the checkpoint at 96 is exported from inside the chunk
    (80, 100, 20, 1, 20),  # from a block before it on, still exported
    (88, 100, 12, 1, 8),  # a chunk starting inside a block exports nothing: it ends that block
    (0, 84, 84, 32, 80),  # the checkpoint (80) is off the 32-token alignment: split there
    (16, 84, 68, 32, 68),  # 80 - 16 is a multiple of 32: exported
    (0, 100, 40, 1, 32),  # a chunk that does not reach the prefill's end: whole blocks, as before
])
def test_prefill_checkpoints_let_the_last_chunk_run_through(make_request, computed: int, prompt: int, num_new: int,
                                                             alignment: int | None, expected: int) -> None:
    request = make_request("a", prompt)
    request.num_computed_tokens = computed
    assert mamba_checkpoint_chunk(request, num_new, 0, 16, 256, alignment) == expected


def test_a_checkpoint_chunk_takes_the_checkpoint_block_and_retires_it_cached(make_request) -> None:
    groups = (KVCacheGroup(), KVCacheGroup(MambaSpec, num_prefill_checkpoint_blocks=1, prefill_checkpoint_alignment=1))
    scheduler = Scheduler(EngineConfig(num_gpu_blocks=40, max_num_batched_tokens=256, max_num_seqs=4,
                                       max_model_len=512, kv_cache_groups=groups, release=VLLM_0_33_0,
                                       scheduling="sync"))
    scheduler.add_request(Request("a", list(range(100)), 3, [9000, 9001, 9002]))
    first = scheduler.step()
    assert first.scheduled == {"a": 100}
    # Seven attention blocks; Mamba: nulls, the checkpoint block (state at 96), the running state.
    assert tables(scheduler)["a"] == [[1, 2, 3, 4, 5, 6, 7], [0] * 5 + [8, 9]]
    checkpoint = scheduler.kv_cache_manager.managers[1].req_to_blocks["a"][5]
    assert checkpoint.block_hash is not None  # the block a resent prompt hits
    scheduler.step()
    # Retired behind the running state at the next step, still cached.
    assert tables(scheduler)["a"][1] == [0] * 6 + [9]
    assert checkpoint.ref_cnt == 0 and checkpoint.block_hash is not None
