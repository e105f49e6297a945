"""Per-attention-type block bookkeeping (vLLM 0.17.1 `v1/core/single_type_kv_cache_manager.py`).

A manager owns the block table of each request (null blocks included) and how many of its blocks
are registered in the prefix cache; the block pool is shared."""

from __future__ import annotations

from collections.abc import Sequence
from itertools import islice
from typing import TYPE_CHECKING

from kvplan.semantics.engine.block_pool import BlockHash, BlockPool, KVCacheBlock
from kvplan.units import cdiv

if TYPE_CHECKING:
    from kvplan.semantics.engine.request import Request


class SingleTypeKVCacheManager:
    def __init__(self, block_pool: BlockPool, block_size: int, enable_caching: bool) -> None:
        self.block_pool = block_pool
        self.block_size = block_size
        self.enable_caching = enable_caching
        self.null_block = block_pool.null_block
        self.req_to_blocks: dict[str, list[KVCacheBlock]] = {}
        # Running requests only: how many leading blocks are already in the prefix cache.
        self.num_cached_block: dict[str, int] = {}

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        """Leading tokens that attention no longer reads once `num_computed_tokens` are computed."""
        return 0

    def find_longest_cache_hit(self, block_hashes: Sequence[BlockHash],
                               max_length: int) -> list[KVCacheBlock]:
        raise NotImplementedError

    def get_num_blocks_to_allocate(self, request_id: str, num_tokens: int,
                                   new_computed_blocks: Sequence[KVCacheBlock],
                                   total_computed_tokens: int) -> int:
        num_required = cdiv(num_tokens, self.block_size)
        num_req_blocks = len(self.req_to_blocks.get(request_id, ()))
        if request_id in self.num_cached_block:
            # A running request never gains prefix hits.
            return max(num_required - num_req_blocks, 0)
        num_skipped_blocks = self.get_num_skipped_tokens(total_computed_tokens) // self.block_size
        num_new = max(num_required - max(num_skipped_blocks, len(new_computed_blocks) + num_req_blocks), 0)
        # Hit blocks sitting in the free queue leave it when touched, so they use free capacity.
        first_kept = max(0, num_skipped_blocks - num_req_blocks)
        num_evictable = sum(
            1 for block in new_computed_blocks[first_kept:] if block.ref_cnt == 0 and not block.is_null
        )
        return num_new + num_evictable

    def allocate_new_computed_blocks(self, request_id: str, new_computed_blocks: Sequence[KVCacheBlock],
                                     num_local_computed_tokens: int,
                                     num_external_computed_tokens: int) -> None:
        """Pin a new request's prefix hits (null-padding skipped positions) and allocate blocks
        for tokens computed elsewhere (a KV connector)."""
        if request_id in self.num_cached_block:
            assert not new_computed_blocks
            return
        req_blocks = self.req_to_blocks.setdefault(request_id, [])
        assert not req_blocks
        num_total_computed = num_local_computed_tokens + num_external_computed_tokens
        num_skipped_tokens = self.get_num_skipped_tokens(num_total_computed)
        num_skipped_blocks = num_skipped_tokens // self.block_size
        if num_skipped_blocks > 0:
            new_computed_blocks = new_computed_blocks[num_skipped_blocks:]
            num_external_computed_tokens = min(num_total_computed - num_skipped_tokens,
                                               num_external_computed_tokens)
        if self.enable_caching:
            self.block_pool.touch(new_computed_blocks)
        req_blocks.extend([self.null_block] * num_skipped_blocks)
        req_blocks.extend(new_computed_blocks)
        self.num_cached_block[request_id] = len(req_blocks)
        if num_external_computed_tokens > 0:
            req_blocks.extend(
                self.block_pool.get_new_blocks(cdiv(num_total_computed, self.block_size) - len(req_blocks))
            )

    def allocate_new_blocks(self, request_id: str, num_tokens: int) -> list[KVCacheBlock]:
        req_blocks = self.req_to_blocks.setdefault(request_id, [])
        num_new = cdiv(num_tokens, self.block_size) - len(req_blocks)
        if num_new <= 0:
            return []
        new_blocks = self.block_pool.get_new_blocks(num_new)
        req_blocks.extend(new_blocks)
        return new_blocks

    def cache_blocks(self, request: Request, num_tokens: int) -> None:
        """Register the request's blocks that `num_tokens` tokens fill completely."""
        num_cached = self.num_cached_block.get(request.request_id, 0)
        num_full = num_tokens // self.block_size
        if num_cached >= num_full:
            return
        self.block_pool.cache_full_blocks(
            self.req_to_blocks[request.request_id], request.block_hashes, num_cached, num_full
        )
        self.num_cached_block[request.request_id] = num_full

    def free(self, request_id: str) -> None:
        """Release a request's blocks tail first, so its last block is evicted first."""
        req_blocks = self.req_to_blocks.pop(request_id, [])
        self.block_pool.free_blocks(reversed(req_blocks))
        self.num_cached_block.pop(request_id, None)

    def remove_skipped_blocks(self, request_id: str, total_computed_tokens: int) -> None:
        """Free the blocks attention will never read again, replacing them by the null block."""
        num_skipped_tokens = self.get_num_skipped_tokens(total_computed_tokens)
        if num_skipped_tokens <= 0:
            return
        blocks = self.req_to_blocks.get(request_id)
        if not blocks:
            return
        removed: list[KVCacheBlock] = []
        for i in range(min(num_skipped_tokens // self.block_size, len(blocks)) - 1, -1, -1):
            if blocks[i] is self.null_block:
                # Earlier calls already replaced everything before it.
                break
            removed.append(blocks[i])
            blocks[i] = self.null_block
        self.block_pool.free_blocks(removed)


class FullAttentionManager(SingleTypeKVCacheManager):
    def find_longest_cache_hit(self, block_hashes: Sequence[BlockHash],
                               max_length: int) -> list[KVCacheBlock]:
        """Leading blocks whose hashes are cached; hashes chain, so the first miss ends the hit."""
        return self.block_pool.cached_prefix(islice(block_hashes, max_length // self.block_size))


class SlidingWindowManager(SingleTypeKVCacheManager):
    def __init__(self, block_pool: BlockPool, block_size: int, enable_caching: bool,
                 sliding_window: int) -> None:
        super().__init__(block_pool, block_size, enable_caching)
        self.sliding_window = sliding_window
        # The token being computed is itself inside the window, hence the - 1.
        self.contiguous_blocks_needed = cdiv(sliding_window - 1, block_size)

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        return max(0, num_computed_tokens - self.sliding_window + 1)

    def find_longest_cache_hit(self, block_hashes: Sequence[BlockHash],
                               max_length: int) -> list[KVCacheBlock]:
        """The right-most run of cached blocks long enough to fill the window, null blocks before it;
        without such a run, the cached blocks leading from block 0."""
        num_blocks = max_length // self.block_size
        hits = [self.null_block] * num_blocks
        run = 0
        for i in range(num_blocks - 1, -1, -1):
            block = self.block_pool.get_cached_block(block_hashes[i])
            if block is None:
                run = 0
                continue
            hits[i] = block
            run += 1
            if run >= self.contiguous_blocks_needed:
                del hits[i + run:]
                return hits
        del hits[run:]
        return hits
