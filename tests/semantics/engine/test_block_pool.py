"""The block pool against vLLM's documented behaviour (docs/vllm/kv-semantics.md §6; docs/vllm/changes-0.33.md §3.1)."""

from __future__ import annotations

import pytest

from kvplan.semantics.engine.block_pool import BlockPool


def h(n: int) -> bytes:
    return n.to_bytes(32, "big")


def test_block_zero_is_the_null_block_and_never_handed_out() -> None:
    pool = BlockPool(5, enable_caching=True)
    assert pool.null_block.block_id == 0 and pool.null_block.is_null
    assert pool.free_block_ids() == [1, 2, 3, 4]
    assert [b.block_id for b in pool.get_new_blocks(4)] == [1, 2, 3, 4]
    with pytest.raises(ValueError, match="Cannot get 1 free blocks"):
        pool.get_new_blocks(1)


def test_freed_blocks_join_the_tail_in_the_given_order() -> None:
    pool = BlockPool(8, enable_caching=True)
    first = pool.get_new_blocks(3)  # 1, 2, 3
    pool.free_blocks(reversed(first))
    assert pool.free_block_ids() == [4, 5, 6, 7, 3, 2, 1]
    assert pool.num_free_blocks == 7 and pool.num_used_blocks == 0


def test_usage_counts_cached_free_blocks_as_free() -> None:
    pool = BlockPool(11, enable_caching=True)
    blocks = pool.get_new_blocks(4)
    pool.cache_full_blocks(blocks, [h(1), h(2), h(3)], 0, 3)
    assert pool.get_usage() == pytest.approx(0.4)
    pool.free_blocks(blocks)
    assert pool.get_usage() == 0.0
    assert (pool.num_cached_blocks, pool.num_evictable_cached_blocks) == (3, 3)


def test_hash_survives_free_until_the_block_is_reused() -> None:
    pool = BlockPool(4, enable_caching=True)
    a, b, c = pool.get_new_blocks(3)
    pool.cache_full_blocks([a, b], [h(10), h(11)], 0, 2)
    pool.free_blocks([c, b, a])
    assert pool.get_cached_block(h(10)) is a
    assert pool.free_block_ids() == [3, 2, 1]
    # Reusing the head (c, never hashed) keeps both hashes; reusing b evicts its hash only.
    assert pool.get_new_blocks(2) == [c, b]
    assert pool.get_cached_block(h(11)) is None and b.block_hash is None
    assert pool.get_cached_block(h(10)) is a
    assert (pool.num_cached_blocks, pool.num_evictable_cached_blocks) == (1, 1)


def test_touch_resurrects_an_evictable_block_without_copying() -> None:
    pool = BlockPool(5, enable_caching=True)
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks(blocks, [h(1), h(2)], 0, 2)
    pool.free_blocks(reversed(blocks))
    assert pool.free_block_ids() == [3, 4, 2, 1]
    pool.touch([blocks[0]])
    assert blocks[0].ref_cnt == 1 and pool.free_block_ids() == [3, 4, 2]
    assert pool.num_evictable_cached_blocks == 1
    pool.touch([blocks[0]])  # shared by a second request: no queue change
    assert blocks[0].ref_cnt == 2 and pool.num_free_blocks == 3


def test_identical_full_blocks_are_not_merged_and_the_first_inserted_hits() -> None:
    pool = BlockPool(6, enable_caching=True)
    a = pool.get_new_blocks(1)
    b = pool.get_new_blocks(1)
    pool.cache_full_blocks(a, [h(7)], 0, 1)
    pool.cache_full_blocks(b, [h(7)], 0, 1)
    assert pool.num_cached_blocks == 2
    assert pool.get_cached_block(h(7)) is a[0]
    pool.free_blocks(a)
    pool.get_new_blocks(4)  # 3, 4, 5 then a's block 1: evicts a only
    assert pool.get_cached_block(h(7)) is b[0]


def test_cache_full_blocks_skips_already_cached_prefix_and_null_blocks() -> None:
    pool = BlockPool(6, enable_caching=True)
    blocks = [pool.null_block, *pool.get_new_blocks(2)]
    pool.cache_full_blocks(blocks, [h(1), h(2), h(3)], 0, 3)
    assert pool.null_block.block_hash is None
    assert pool.num_cached_blocks == 2
    with pytest.raises(AssertionError):
        pool.cache_full_blocks(blocks, [h(1), h(2), h(3)], 1, 2)


def test_reset_prefix_cache_only_when_no_block_is_in_use() -> None:
    pool = BlockPool(4, enable_caching=True)
    blocks = pool.get_new_blocks(2)
    pool.cache_full_blocks(blocks, [h(1), h(2)], 0, 2)
    assert pool.reset_prefix_cache() is False
    pool.free_blocks(blocks)
    assert pool.reset_prefix_cache() is True
    assert pool.get_cached_block(h(1)) is None
    assert (pool.num_cached_blocks, pool.num_evictable_cached_blocks) == (0, 0)
    assert all(block.block_hash is None for block in pool.blocks)


def test_unhashed_freed_blocks_go_to_the_head_under_0_33_0() -> None:
    pool = BlockPool(10, enable_caching=True, freed_unhashed_blocks="head")
    blocks = pool.get_new_blocks(4)  # 1, 2, 3, 4
    pool.cache_full_blocks(blocks, [h(1), h(2)], 0, 2)
    pool.free_blocks(reversed(blocks))  # released 4, 3 (unhashed), then 2, 1 (hashed)
    # vLLM 0.33.0's `prepend_n` keeps the unhashed blocks' release order at the head; hashed ones
    # join the tail (LRU), as in 0.17.1.
    assert pool.free_block_ids() == [4, 3, 5, 6, 7, 8, 9, 2, 1]
    assert pool.get_new_blocks(1)[0].block_id == 4  # the request's partial last block is reused next
    assert (pool.num_cached_blocks, pool.num_evictable_cached_blocks) == (2, 2)


def test_with_caching_off_the_0_33_0_free_queue_is_a_stack() -> None:
    pool = BlockPool(6, enable_caching=False, freed_unhashed_blocks="head")
    first = pool.get_new_blocks(2)
    second = pool.get_new_blocks(2)
    pool.free_blocks(reversed(first))
    pool.free_blocks(reversed(second))
    assert pool.free_block_ids() == [4, 3, 2, 1, 5]


def test_evicted_hashes_are_kept_until_the_run_is_known_to_be_short() -> None:
    """A lookup that misses an evicted hash makes the run short of blocks (a larger pool would have
    hit); from then on the pool forgets evicted hashes, which a long run has millions of."""
    pool = BlockPool(3, enable_caching=True)
    first = pool.get_new_blocks(2)
    pool.cache_full_blocks(first, [b"a" * 32, b"b" * 32], 0, 2)
    pool.free_blocks(first)
    pool.get_new_blocks(1)  # evicts "a"
    assert pool.tracks_evictions and len(pool.evicted) == 1
    assert [block.block_id for block in pool.cached_prefix([b"b" * 32])] == [2]
    assert pool.num_misses_on_evicted == 0
    assert pool.cached_prefix([b"a" * 32]) == []
    assert pool.num_misses_on_evicted == 1
    assert not pool.tracks_evictions and not pool.evicted
    pool.get_new_blocks(1)  # evicts "b", no longer remembered
    assert not pool.evicted and pool.num_misses_on_evicted == 1
