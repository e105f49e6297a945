"""Several KV cache groups on one pool: each manager's tables, the order blocks are freed in, and
the contract's worked example (docs/vllm/replay-hybrid.md §6), one small scene each. Every
table and free-queue value here was checked against vLLM 0.17.1's own `KVCacheManager` driven
through the same calls."""

from __future__ import annotations

from kvplan.semantics.engine.groups import KVCacheGroup
from kvplan.semantics.engine.hashing import RequestBlockHasher
from kvplan.semantics.engine.kv_cache_manager import KVCacheManager
from kvplan.semantics.engine.request import Request
from kvplan.semantics.kv.specs import ChunkedLocalAttentionSpec, MambaSpec, SlidingWindowSpec
from kvplan.semantics.releases import VLLM_0_17_1

FULL = KVCacheGroup()


def swa(window: int) -> KVCacheGroup:
    return KVCacheGroup(SlidingWindowSpec, sliding_window=window)


def chunked(chunk: int) -> KVCacheGroup:
    return KVCacheGroup(ChunkedLocalAttentionSpec, attention_chunk_size=chunk)


def mamba(mode: str | None = None) -> KVCacheGroup:
    return KVCacheGroup(MambaSpec, mamba_cache_mode=mode)


def manager(*groups: KVCacheGroup, num_gpu_blocks: int = 40, caching: bool = True,
            max_model_len: int = 1024) -> KVCacheManager:
    return KVCacheManager(num_gpu_blocks, 16, max_model_len, enable_caching=caching, kv_cache_groups=groups,
                          release=VLLM_0_17_1)


def hashed(request: Request) -> Request:
    request.install_block_hasher(RequestBlockHasher(16, "0"))
    return request


def admit(kv: KVCacheManager, request: Request, num_new: int | None = None) -> int:
    """Look the request up and allocate its first chunk (all of it by default); the hit tokens."""
    hits, num_hit = kv.get_computed_blocks(request)
    num_new = request.num_tokens - num_hit if num_new is None else num_new
    assert kv.allocate_slots(request, num_new, num_hit, hits) is not None
    compute(request, num_hit + num_new - request.num_computed_tokens)
    return num_hit


def grow(kv: KVCacheManager, request: Request, num_new: int) -> None:
    assert kv.allocate_slots(request, num_new) is not None
    compute(request, num_new)


def compute(request: Request, num_new: int) -> None:
    request.num_computed_tokens += num_new
    if request.num_computed_tokens == request.num_tokens:
        request.append_output_token()


def tables(kv: KVCacheManager, request_id: str) -> tuple[list[int], ...]:
    return kv.get_block_ids_by_group(request_id)


def test_the_worked_example_of_the_contract(make_request) -> None:
    kv = manager(FULL, swa(32))
    first = hashed(make_request("a", 80))
    admit(kv, first, 48)
    assert tables(kv, "a") == ([1, 2, 3], [4, 5, 6])  # group 0 first, from the queue head
    # Chunk 2 is judged on the 48 tokens computed before it: 17 skipped tokens free swa's block 4.
    grow(kv, first, 32)
    assert tables(kv, "a") == ([1, 2, 3, 7, 8], [0, 5, 6, 9, 10])
    assert kv.block_pool.free_block_ids()[-1] == 4
    # The first decode skips 49 tokens: the walk frees 6 then 5 and stops at the null block.
    grow(kv, first, 1)
    assert tables(kv, "a") == ([1, 2, 3, 7, 8, 11], [0, 0, 0, 9, 10, 12])
    assert kv.block_pool.free_block_ids()[-3:] == [4, 6, 5]
    # Finish: group by group, each table from its tail.
    kv.free(first)
    assert kv.block_pool.free_block_ids()[-9:] == [11, 8, 7, 3, 2, 1, 12, 10, 9]
    # Same 80 tokens plus 20: full hits 5 blocks, swa needs 2 cached blocks ending there (9, 10).
    second = hashed(make_request("b", [*range(80), *range(500, 520)]))
    assert admit(kv, second) == 80
    assert tables(kv, "b") == ([1, 2, 3, 7, 8, 13, 14], [0, 0, 0, 9, 10, 15, 16])


def test_a_failed_allocation_still_frees_what_left_the_window(make_request) -> None:
    kv = manager(FULL, swa(32), num_gpu_blocks=13)
    request = hashed(make_request("a", 80))
    admit(kv, request, 48)  # 6 of 12 blocks
    blocker = hashed(make_request("b", 64, start=1000))
    assert kv.allocate_slots(blocker, 48) is not None  # 6 more: the pool is empty
    assert kv.block_pool.num_free_blocks == 0
    assert kv.allocate_slots(request, 32) is None  # needs 4, gets only swa's block 4 back
    assert tables(kv, "a") == ([1, 2, 3], [0, 5, 6])
    assert kv.block_pool.free_block_ids() == [4]


def test_chunked_local_attention_nulls_whole_blocks_before_the_current_chunk(make_request) -> None:
    kv = manager(FULL, chunked(32))
    request = hashed(make_request("a", 70))
    admit(kv, request, 40)
    assert tables(kv, "a") == ([1, 2, 3], [4, 5, 6])
    grow(kv, request, 30)  # judged on 40 computed: the chunk starts at 32, so blocks 0-1 go
    assert tables(kv, "a") == ([1, 2, 3, 7, 8], [0, 0, 6, 9, 10])
    grow(kv, request, 1)  # 70 computed: the chunk starts at 64 = block 4
    assert tables(kv, "a") == ([1, 2, 3, 7, 8], [0, 0, 0, 0, 10])


def test_chunked_local_hits_count_blocks_before_the_chunk_without_looking_them_up(make_request) -> None:
    kv = manager(FULL, chunked(32))
    admit(kv, first := hashed(make_request("a", 80)))
    kv.free(first)
    hits, num_hit = kv.get_computed_blocks(hashed(make_request("b", [*range(80), 7777])))
    assert num_hit == 80
    assert [b.block_id for b in hits[0]] == [1, 2, 3, 4, 5]
    assert [b.block_id for b in hits[1]] == [0, 0, 0, 0, 10]  # 80 // 32 * 32 = 64 tokens: 4 nulls


def test_mamba_all_keeps_the_block_of_the_last_computed_token(make_request) -> None:
    kv = manager(FULL, mamba("all"))
    request = hashed(make_request("a", 50))
    admit(kv, request, 32)
    assert tables(kv, "a") == ([1, 2], [3, 4])
    grow(kv, request, 18)  # judged on 32 computed: skip 31 tokens -> block 0 freed
    assert tables(kv, "a") == ([1, 2, 5, 6], [0, 4, 7, 8])
    assert kv.block_pool.blocks[3].block_hash is not None  # a state snapshot, evictable
    grow(kv, request, 1)  # 50 computed: the state of token 49 is in block 3
    assert tables(kv, "a")[1] == [0, 0, 0, 8]


def test_mamba_all_hits_the_rightmost_cached_state(make_request) -> None:
    kv = manager(FULL, mamba("all"))
    admit(kv, first := hashed(make_request("a", 64)))
    kv.free(first)
    hits, num_hit = kv.get_computed_blocks(hashed(make_request("b", [*range(64), 9])))
    assert num_hit == 64
    assert [b.block_id for b in hits[0]] == [1, 2, 3, 4] and [b.block_id for b in hits[1]] == [0, 0, 0, 8]


def test_mamba_align_keeps_one_running_state_and_frees_the_previous_one_a_step_later(make_request) -> None:
    kv = manager(FULL, mamba("align"))
    request = hashed(make_request("a", 100))
    admit(kv, request, 32)
    assert tables(kv, "a") == ([1, 2], [0, 3])  # nulls, then the newest state block
    grow(kv, request, 32)
    assert tables(kv, "a") == ([1, 2, 4, 5], [0, 3, 0, 6])  # block 3 is the copy source
    grow(kv, request, 32)
    # Block 3 (two allocations ago) is freed now, still a cached state.
    assert tables(kv, "a") == ([1, 2, 4, 5, 7, 8], [0, 0, 0, 6, 0, 9])
    assert kv.block_pool.free_block_ids()[-1] == 3 and kv.block_pool.blocks[3].block_hash is not None


def test_mamba_align_needs_one_block_whatever_the_chunk(make_request) -> None:
    kv = manager(FULL, mamba("align"), num_gpu_blocks=6)
    request = hashed(make_request("a", 64))
    # 4 full-attention blocks + 1 Mamba block = the 5 free blocks.
    assert kv.allocate_slots(request, 64) is not None
    assert tables(kv, "a") == ([1, 2, 3, 4], [0, 0, 0, 5])


def test_mamba_without_caching_holds_one_block_of_the_model_length(make_request) -> None:
    kv = manager(FULL, mamba(), caching=False, max_model_len=256)
    request = make_request("a", 100)
    admit(kv, request, 64)
    grow(kv, request, 36)
    for _ in range(20):
        grow(kv, request, 1)
    assert tables(kv, "a") == ([1, 2, 3, 4, 6, 7, 8, 9], [5])  # one Mamba block, never skipped
    assert kv.coordinator.managers[1].block_size == 256


def test_mamba_refuses_a_hit_on_a_state_cached_in_the_same_step(make_request) -> None:
    kv = manager(FULL, mamba("all"))
    kv.new_step_starts()
    admit(kv, hashed(make_request("a", 64)))
    late = hashed(make_request("b", [*range(64), 5]))
    hits, num_hit = kv.get_computed_blocks(late)
    assert num_hit == 64
    assert kv.allocate_slots(late, 1, num_hit, hits) is None  # as if the pool were too small
    kv.new_step_starts()
    assert kv.allocate_slots(late, 1, num_hit, hits) is not None


def test_free_order_is_group_by_group_each_from_its_tail(make_request) -> None:
    kv = manager(FULL, swa(32), chunked(64))
    admit(kv, request := hashed(make_request("a", 40)))
    assert tables(kv, "a") == ([1, 2, 3], [4, 5, 6], [7, 8, 9])
    kv.free(request)
    assert kv.block_pool.free_block_ids()[-9:] == [3, 2, 1, 6, 5, 4, 9, 8, 7]


def test_usage_is_pool_wide_and_each_group_counts_the_blocks_it_holds(make_request) -> None:
    kv = manager(FULL, swa(32))
    admit(kv, a := hashed(make_request("a", 80)))
    admit(kv, hashed(make_request("b", [*range(80), 1])))  # shares a's full blocks and 2 swa blocks
    pool = kv.block_pool
    assert pool.num_used_blocks_by_group() == (6, 6)
    assert sum(pool.num_used_blocks_by_group()) == pool.num_used_blocks
    assert kv.usage == pool.num_used_blocks / 39
    kv.free(a)
    assert pool.num_used_blocks_by_group() == (6, 3)
