"""The sliding-window manager against the worked example of docs/vllm/kv-semantics.md §9 (window 32, block 16)."""

from __future__ import annotations

from kvplan.semantics.engine.groups import KVCacheGroup
from kvplan.semantics.engine.hashing import RequestBlockHasher
from kvplan.semantics.engine.kv_cache_manager import KVCacheManager
from kvplan.semantics.engine.window_managers import SlidingWindowManager
from kvplan.semantics.kv.specs import SlidingWindowSpec
from kvplan.semantics.releases import VLLM_0_17_1
from tests.references import block_ids


def window(tokens: int, block_size: int | None = None) -> KVCacheGroup:
    return KVCacheGroup(SlidingWindowSpec, sliding_window=tokens, block_size=block_size)


def hashed(request):
    request.install_block_hasher(RequestBlockHasher(16, "0"))
    return request


def test_the_worked_example(make_request) -> None:
    kv = KVCacheManager(20, 16, 4096, enable_caching=True, kv_cache_groups=(window(32),), release=VLLM_0_17_1)
    first = hashed(make_request("a", 80, max_tokens=50))

    # An 80-token prefill holds blocks 1-5.
    hits, num_hit = kv.get_computed_blocks(first)
    assert num_hit == 0
    kv.allocate_slots(first, 80)
    first.num_computed_tokens = 80
    first.append_output_token()
    assert block_ids(kv, "a") == [1, 2, 3, 4, 5]

    # Next step: 80 - 32 + 1 = 49 skipped tokens = 3 blocks go back, still hashed, in reverse order.
    kv.allocate_slots(first, 1)
    assert block_ids(kv, "a") == [0, 0, 0, 4, 5, 6]
    assert kv.block_pool.free_block_ids()[-3:] == [3, 2, 1]
    assert kv.block_pool.num_evictable_cached_blocks == 3

    # A 90-token request with the same first 80 tokens hits [0, 0, 0, 4, 5] = 80 tokens.
    second = hashed(make_request("b", [*range(80), *range(500, 510)]))
    hits, num_hit = kv.get_computed_blocks(second)
    assert [b.block_id for b in hits[0]] == [0, 0, 0, 4, 5] and num_hit == 80
    assert kv.allocate_slots(second, 10, num_hit, hits) is not None
    assert block_ids(kv, "b") == [0, 0, 0, 4, 5, 7]
    assert [kv.block_pool.blocks[i].ref_cnt for i in (4, 5)] == [2, 2]


def test_without_a_full_window_run_the_hit_is_the_leading_blocks(make_request) -> None:
    kv = KVCacheManager(20, 16, 4096, enable_caching=True, kv_cache_groups=(window(64),), release=VLLM_0_17_1)
    first = hashed(make_request("a", 32))
    kv.allocate_slots(first, 32)
    first.num_computed_tokens = 32
    kv.free(first)
    # The window needs cdiv(63, 16) = 4 contiguous cached blocks; only blocks 1-2 exist.
    hits, num_hit = kv.get_computed_blocks(hashed(make_request("b", 60)))
    assert [b.block_id for b in hits[0]] == [1, 2] and num_hit == 32


def test_the_right_most_full_run_wins_and_earlier_positions_are_null() -> None:
    from kvplan.semantics.engine.block_pool import BlockPool

    pool = BlockPool(10, enable_caching=True)
    manager = SlidingWindowManager(window(9, block_size=4), pool)  # runs of cdiv(8, 4) = 2 blocks
    blocks = pool.get_new_blocks(6)
    hashes = [bytes([i]) * 32 for i in range(6)]
    # Cache positions 0, 2, 3 and 5 only.
    for position in (0, 2, 3, 5):
        pool.cache_full_blocks(blocks, hashes, position, position + 1)
    (hit,) = manager.find_longest_cache_hit(hashes, 6 * 4)
    assert [b.block_id for b in hit] == [0, 0, blocks[2].block_id, blocks[3].block_id]
