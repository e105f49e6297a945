"""KVCacheManager: lookups, the exact allocate_slots arithmetic, freeing (docs/vllm/kv-semantics.md §8)."""

from __future__ import annotations

import pytest

from kvplan.semantics.engine.hashing import RequestBlockHasher
from kvplan.semantics.engine.kv_cache_manager import KVCacheManager
from kvplan.semantics.releases import VLLM_0_17_1
from tests.references import block_ids

BLOCK = 16


def manager(num_gpu_blocks: int, caching: bool = True, max_model_len: int = 4096) -> KVCacheManager:
    return KVCacheManager(num_gpu_blocks, BLOCK, max_model_len, enable_caching=caching, release=VLLM_0_17_1)


def hashed(request):
    request.install_block_hasher(RequestBlockHasher(BLOCK, "0"))
    return request


def run_prefill(kv: KVCacheManager, request) -> list[int]:
    """Admit a request with its prefix hit and compute its whole prompt, as the scheduler does."""
    hits, num_hit = kv.get_computed_blocks(request)
    assert kv.allocate_slots(request, request.num_tokens - num_hit, num_hit, hits) is not None
    request.num_computed_tokens = request.num_tokens
    return block_ids(kv, request.request_id)


def test_a_fully_cached_block_multiple_prompt_recomputes_its_last_block(make_request) -> None:
    kv = manager(10)
    first = hashed(make_request("a", 48))
    run_prefill(kv, first)
    kv.free(first)
    hits, num_hit = kv.get_computed_blocks(hashed(make_request("b", 48)))
    assert num_hit == 32 and [b.block_id for b in hits[0]] == [1, 2]


def test_every_lookup_is_counted_and_preempted_lookups_apart(make_request) -> None:
    kv = manager(10)
    request = hashed(make_request("a", 40))
    kv.get_computed_blocks(request)
    kv.get_computed_blocks(request)  # a blocked head is looked up again each step
    request.num_preemptions = 1
    kv.get_computed_blocks(request)
    stats = kv.make_prefix_cache_stats()
    assert (stats.requests, stats.queries, stats.hits) == (2, 80, 0)
    assert (stats.preempted_requests, stats.preempted_queries) == (1, 40)
    assert kv.make_prefix_cache_stats().queries == 0  # a new interval starts


def test_without_prefix_caching_nothing_hits_and_nothing_is_counted(make_request) -> None:
    kv = manager(10, caching=False)
    request = make_request("a", 40)
    assert run_prefill(kv, request) == [1, 2, 3]
    assert kv.get_computed_blocks(make_request("b", 40)) == (([],), 0)
    assert kv.make_prefix_cache_stats().requests == 0
    assert kv.block_pool.num_cached_blocks == 0


def test_evictable_hit_blocks_count_against_free_capacity(make_request) -> None:
    kv = manager(6)  # 5 usable blocks
    run_prefill(kv, first := hashed(make_request("a", 32)))
    kv.free(first)  # blocks 1, 2 stay cached, evictable
    too_long = hashed(make_request("b", 96))  # 2 hit blocks + 4 new blocks > 5 free
    hits, num_hit = kv.get_computed_blocks(too_long)
    assert num_hit == 32
    assert kv.allocate_slots(too_long, 64, num_hit, hits) is None
    assert kv.block_pool.free_block_ids() == [3, 4, 5, 2, 1] and hits[0][0].ref_cnt == 0
    fits = hashed(make_request("c", 80))  # 2 hit blocks + 3 new blocks = 5
    assert run_prefill(kv, fits) == [1, 2, 3, 4, 5]
    assert kv.block_pool.num_free_blocks == 0


def test_lookahead_slots_are_allocated_but_never_cached(make_request) -> None:
    kv = manager(10)
    request = hashed(make_request("a", 16))
    new_blocks = kv.allocate_slots(request, 16, num_lookahead_tokens=8)
    assert new_blocks is not None and [b.block_id for b in new_blocks[0]] == [1, 2]
    assert kv.block_pool.num_cached_blocks == 1
    capped = manager(10, max_model_len=20)
    capped_blocks = capped.allocate_slots(hashed(make_request("b", 16)), 16, num_lookahead_tokens=8)
    assert capped_blocks is not None and len(capped_blocks[0]) == 2


def test_external_tokens_get_blocks_before_the_new_tokens(make_request) -> None:
    kv = manager(10)
    request = hashed(make_request("a", 40))
    kv.allocate_slots(request, 8, num_external_computed_tokens=32)
    assert block_ids(kv, "a") == [1, 2, 3]
    assert kv.block_pool.num_cached_blocks == 2
    with pytest.raises(ValueError):
        kv.allocate_slots(request, 0)


def test_free_releases_the_tail_first_and_keeps_shared_blocks(make_request) -> None:
    kv = manager(12)
    a = hashed(make_request("a", 40))
    b = hashed(make_request("b", 40))
    run_prefill(kv, a)  # [1, 2, 3]
    assert run_prefill(kv, b) == [1, 2, 4]  # shares the two full blocks
    kv.free(a)
    assert kv.block_pool.free_block_ids()[-1] == 3  # 1 and 2 are still held by b
    kv.free(b)
    assert kv.block_pool.free_block_ids()[-3:] == [4, 2, 1]


def test_running_requests_grow_one_block_per_block_of_tokens(make_request) -> None:
    kv = manager(10)
    request = hashed(make_request("a", 16))
    run_prefill(kv, request)
    request.append_output_token()
    assert kv.allocate_slots(request, 1) == ([kv.block_pool.blocks[2]],)  # token 17 needs block 2
    request.num_computed_tokens += 1
    for _ in range(15):
        request.append_output_token()
        assert kv.allocate_slots(request, 1) == ([],)
        request.num_computed_tokens += 1
    assert kv.block_pool.num_cached_blocks == 2  # the 32nd token filled block 2
