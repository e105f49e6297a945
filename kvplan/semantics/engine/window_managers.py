"""Managers of groups that attend to part of the sequence: sliding window and chunked local
attention. Blocks that fall out of reach are freed and replaced by the null block."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from kvplan.semantics.engine.block_pool import BlockHash, BlockPool
from kvplan.semantics.engine.groups import KVCacheGroup
from kvplan.semantics.engine.single_type_manager import HitLists, SingleTypeKVCacheManager, trim_to_alignment
from kvplan.semantics.releases import NEWEST_RELEASE, Release
from kvplan.units import cdiv

if TYPE_CHECKING:
    from kvplan.semantics.engine.request import Request


class SlidingWindowManager(SingleTypeKVCacheManager):
    skips_tokens = True
    hits_are_sparse = True

    def __init__(self, group: KVCacheGroup, block_pool: BlockPool, enable_caching: bool = True,
                 group_id: int = 0, hash_block_size: int | None = None, release: Release = NEWEST_RELEASE) -> None:
        super().__init__(group, block_pool, enable_caching, group_id, hash_block_size, release)
        assert group.sliding_window is not None
        self.sliding_window = group.sliding_window
        # The token being computed is itself inside the window, hence the - 1.
        self.contiguous_blocks_needed = cdiv(self.sliding_window - 1, self.block_size)

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        return max(0, num_computed_tokens - self.sliding_window + 1)

    def admission_blocks(self, max_in_flight_tokens: int, max_model_len: int) -> int | None:
        # The window's tokens plus those in flight (frees wait for their batch), + 1 because the
        # window need not start at a block start.
        return cdiv(min(self.sliding_window - 1 + max_in_flight_tokens, max_model_len), self.block_size) + 1

    def reachable_blocks(self, request: Request, start: int, stop: int) -> Collection[int]:
        """The blocks of a window that ends at a reachable boundary: a hit there needs exactly them."""
        if self.cache_hit_alignment % self.block_size:
            return range(start, stop)  # vLLM keeps every block when hits may end inside one
        need = self.contiguous_blocks_needed
        reachable: set[int] = set()
        for boundary in self.reachable_boundaries(request):
            end = boundary // self.block_size
            reachable.update(range(max(start, end - need), min(stop, end)))
        return reachable

    def max_computed_skipping_less_than(self, num_tokens: int) -> int:
        return num_tokens + self.sliding_window - 2

    def find_longest_cache_hit(self, block_hashes: Sequence[BlockHash], max_length: int,
                               group_ids: Sequence[int] = (0,), alignment: int = 0) -> HitLists:
        """The right-most run of cached blocks long enough to fill the window, null blocks before it;
        without such a run, the cached blocks leading from block 0. A run must end on `alignment`."""
        block_size = self.block_size
        aligned = not alignment or alignment == block_size
        hashes = self.hashes(block_hashes)
        num_blocks = max_length // block_size
        hits = [[self.null_block] * num_blocks for _ in group_ids]
        run = 0
        for i in range(num_blocks - 1, -1, -1):
            blocks = self.block_pool.get_cached_blocks(hashes[i], group_ids)
            if blocks is None:
                run = 0
                continue
            if run == 0 and not aligned and (i + 1) * block_size % alignment:
                continue
            for hit, block in zip(hits, blocks, strict=True):
                hit[i] = block
            run += 1
            if run >= self.contiguous_blocks_needed:
                for hit in hits:
                    del hit[i + run:]
                return hits
        for hit in hits:
            del hit[run:]
        return trim_to_alignment(hits, block_size, alignment)


class ChunkedLocalAttentionManager(SingleTypeKVCacheManager):
    skips_tokens = True

    def __init__(self, group: KVCacheGroup, block_pool: BlockPool, enable_caching: bool = True,
                 group_id: int = 0, hash_block_size: int | None = None, release: Release = NEWEST_RELEASE) -> None:
        super().__init__(group, block_pool, enable_caching, group_id, hash_block_size, release)
        assert group.attention_chunk_size is not None
        self.attention_chunk_size = group.attention_chunk_size

    def admission_blocks(self, max_in_flight_tokens: int, max_model_len: int) -> int | None:
        # One chunk plus the tokens in flight.
        return cdiv(min(self.attention_chunk_size + max_in_flight_tokens, max_model_len), self.block_size)

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        """The tokens before the chunk that holds the next token."""
        return num_computed_tokens // self.attention_chunk_size * self.attention_chunk_size

    def max_computed_skipping_less_than(self, num_tokens: int) -> int:
        chunk = self.attention_chunk_size
        return ((num_tokens - 1) // chunk + 1) * chunk - 1

    def find_longest_cache_hit(self, block_hashes: Sequence[BlockHash], max_length: int,
                               group_ids: Sequence[int] = (0,), alignment: int = 0) -> HitLists:
        """Blocks before the current chunk count as hit without being cached (null blocks); then the
        cached blocks from the chunk start up to the first miss."""
        chunk = self.attention_chunk_size
        hashes = self.hashes(block_hashes)
        first = (max_length // chunk * chunk if max_length > 0 else 0) // self.block_size
        hits = [[self.null_block] * first for _ in group_ids]
        for i in range(first, max_length // self.block_size):
            blocks = self.block_pool.get_cached_blocks(hashes[i], group_ids)
            if blocks is None:
                break
            for hit, block in zip(hits, blocks, strict=True):
                hit.append(block)
        return hits
