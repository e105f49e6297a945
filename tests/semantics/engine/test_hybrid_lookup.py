"""The prefix hit across KV cache groups (docs/vllm/replay-hybrid.md §4): the longest prefix
every group can serve, found by vLLM 0.17.1's fixed point; groups of one spec looked up together;
groups whose blocks span several hash blocks. Checked against vLLM's coordinator on the same
cache contents."""

from __future__ import annotations

from kvplan.semantics.engine.coordinator import KVCacheCoordinator
from kvplan.semantics.engine.groups import KVCacheGroup, resolve_groups
from kvplan.semantics.engine.hashing import MergedBlockHashes
from kvplan.semantics.kv.specs import SlidingWindowSpec
from kvplan.semantics.releases import VLLM_0_17_1

FULL = KVCacheGroup()
HASHES = [bytes([i]) * 32 for i in range(8)]


def swa(window: int, block_size: int | None = None) -> KVCacheGroup:
    return KVCacheGroup(SlidingWindowSpec, sliding_window=window, block_size=block_size)


def coordinator(*groups: KVCacheGroup) -> KVCacheCoordinator:
    return KVCacheCoordinator(resolve_groups(groups, 16, True, 1024, release=VLLM_0_17_1), 64, 16, True,
                              release=VLLM_0_17_1)


def cache(kv: KVCacheCoordinator, group_id: int, positions: list[int]) -> list[int]:
    """Cache blocks of `group_id` at the given positions of HASHES; their ids by position."""
    pool = kv.block_pool
    blocks = pool.get_new_blocks(len(HASHES), group_id)
    for position in positions:
        pool.cache_full_blocks(blocks, HASHES, position, position + 1, group_id)
    pool.free_blocks(blocks)
    return [b.block_id for b in blocks]


def ids(blocks: list) -> list[int]:
    return [b.block_id for b in blocks]


def test_three_kinds_repeat_the_pass_until_no_kind_shortens_the_hit() -> None:
    kv = coordinator(FULL, swa(32), swa(64))
    full = cache(kv, 0, list(range(8)))
    short = cache(kv, 1, [1, 2, 5, 6])  # runs of 2 blocks fill a 32-token window
    long = cache(kv, 2, [0, 1, 2, 3, 5, 6])  # runs of 4 for 64 tokens
    hits, length = kv.find_longest_cache_hit(HASHES, 128)
    # Pass 1: full 128, window 32 -> 112 (run at 5-6), window 64 -> 64 (run at 0-3).
    # Pass 2: window 32 within 64 -> 48 (run at 1-2); window 64 within 48 has no run of 4, so the
    # leading 3 blocks. Pass 3 changes nothing.
    assert length == 48
    assert ids(hits[0]) == full[:3]
    assert ids(hits[1]) == [0, short[1], short[2]]
    assert ids(hits[2]) == long[:3]


def test_one_full_and_one_other_kind_take_the_other_kinds_hit() -> None:
    kv = coordinator(FULL, swa(32))
    full = cache(kv, 0, list(range(6)))
    window = cache(kv, 1, [2, 3])
    hits, length = kv.find_longest_cache_hit(HASHES, 127)
    assert length == 64  # full would serve 96; the window's only run ends at block 3
    assert ids(hits[0]) == full[:4] and ids(hits[1]) == [0, 0, window[2], window[3]]


def test_groups_of_one_spec_hit_only_where_every_one_of_them_is_cached() -> None:
    kv = coordinator(FULL, swa(32), swa(32))
    cache(kv, 0, list(range(8)))
    first = cache(kv, 1, [0, 1, 2, 3, 4, 5])
    second = cache(kv, 2, [0, 1, 2, 3])  # positions 4-5 only in the first window group
    hits, length = kv.find_longest_cache_hit(HASHES, 127)
    assert length == 64
    assert ids(hits[1]) == [0, 0, first[2], first[3]] and ids(hits[2]) == [0, 0, second[2], second[3]]
    assert kv.lookup_order == [[0], [1, 2]]


def test_full_attention_is_looked_up_first_wherever_it_is() -> None:
    kv = coordinator(swa(32), FULL)
    assert kv.lookup_order == [[1], [0]]
    cache(kv, 1, [0, 1, 2])
    window = cache(kv, 0, [0, 1, 2, 3])
    hits, length = kv.find_longest_cache_hit(HASHES, 127)
    assert length == 48 and ids(hits[0]) == [0, window[1], window[2]] and len(hits[1]) == 3


def test_a_group_with_double_blocks_keys_them_by_two_hashes_and_aligns_the_hit() -> None:
    kv = coordinator(FULL, swa(64, block_size=32))
    assert kv.alignment == 32 and kv.managers[1].hash_factor == 2
    full = cache(kv, 0, list(range(5)))  # 80 tokens of full attention
    pool = kv.block_pool
    merged = MergedBlockHashes(HASHES, 2)
    window = pool.get_new_blocks(4, 1)
    pool.cache_full_blocks(window, merged, 0, 2, 1)  # 64 tokens at block size 32
    pool.free_blocks(window)
    hits, length = kv.find_longest_cache_hit(HASHES, 127)
    # Full attention's 5 blocks are cut to 4 (a multiple of 32 tokens); the window needs 2 blocks.
    assert length == 64
    assert ids(hits[0]) == full[:4] and ids(hits[1]) == ids(window[:2])
    assert pool.get_cached_block(HASHES[0] + HASHES[1], 1) is window[0]


def test_without_caching_nothing_hits() -> None:
    kv = KVCacheCoordinator(resolve_groups((FULL, swa(32)), 16, False, 1024, release=VLLM_0_17_1), 64, 16, False,
                            release=VLLM_0_17_1)
    assert kv.find_longest_cache_hit(HASHES, 127) == (([], []), 0)
