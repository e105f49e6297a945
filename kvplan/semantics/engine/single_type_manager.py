"""Per-group block bookkeeping (vLLM's `v1/core/single_type_kv_cache_manager.py`): the base manager
and full attention. Window, chunk and Mamba managers live beside it.

A manager owns the block table of each request in its group (null blocks included) and how many
of its blocks are registered in the prefix cache; the block pool is shared by all groups. What
differs by release comes from the `Release` it is handed."""

from __future__ import annotations

import sys
from bisect import bisect_left
from collections.abc import Collection, Sequence
from itertools import islice
from typing import TYPE_CHECKING, ClassVar

from kvplan.semantics.engine.block_pool import BlockHash, BlockPool, KVCacheBlock
from kvplan.semantics.engine.groups import KVCacheGroup
from kvplan.semantics.engine.hashing import block_hashes_at_size
from kvplan.semantics.releases import NEWEST_RELEASE, PrefixCacheRetention, Release
from kvplan.units import cdiv

if TYPE_CHECKING:
    from kvplan.semantics.engine.request import Request

# Prefix-hit blocks, one list per group of a lookup.
HitLists = list[list[KVCacheBlock]]
# Whether a group that reads part of the sequence (sliding window, Mamba) hashes only the blocks a
# later request can hit, by the release's `prefix_cache_retention` (vLLM 0.33.0's
# `reachable_block_mask` with `prefix_cache_retention_interval` 0); else every full block.
CACHES_REACHABLE_ONLY: dict[PrefixCacheRetention, bool] = {"dense": False, "reachable": True}


class SingleTypeKVCacheManager:
    # Whether attention stops reading early tokens (their blocks become null entries).
    skips_tokens: ClassVar[bool] = False
    # Whether a hit needs only some of the blocks before it (a window's, a Mamba state), so that a
    # release may leave the others out of the prefix cache.
    hits_are_sparse: ClassVar[bool] = False

    def __init__(self, group: KVCacheGroup, block_pool: BlockPool, enable_caching: bool = True,
                 group_id: int = 0, hash_block_size: int | None = None, release: Release = NEWEST_RELEASE) -> None:
        assert group.block_size is not None, "resolve the group first (resolve_groups)"
        self.group = group
        self.block_size = group.block_size
        self.block_pool = block_pool
        self.enable_caching = enable_caching
        self.group_id = group_id
        self.hash_factor = self.block_size // hash_block_size if enable_caching and hash_block_size else 1
        self.null_block = block_pool.null_block
        self.req_to_blocks: dict[str, list[KVCacheBlock]] = {}
        # Running requests only: how many leading blocks are already in the prefix cache.
        self.num_cached_block: dict[str, int] = {}
        self.caches_reachable_only = self.hits_are_sparse and CACHES_REACHABLE_ONLY[release.prefix_cache_retention]
        # Prefix hits are whole multiples of this many tokens (the coordinator sets its groups' lcm).
        self.cache_hit_alignment = self.block_size
        # The most blocks the whole-prompt admission counts for one request (None: every block).
        self.admission_cap: int | None = None

    def admission_blocks(self, max_in_flight_tokens: int, max_model_len: int) -> int | None:
        """vLLM 0.33.0's `max_admission_blocks_per_request`: the most blocks one request holds at once
        while `max_in_flight_tokens` tokens are scheduled and not yet processed; None where a request
        keeps every block."""
        return None

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        """Leading tokens that attention no longer reads once `num_computed_tokens` are computed."""
        return 0

    def hashes(self, block_hashes: Sequence[BlockHash]) -> Sequence[BlockHash]:
        """The request's hashes at this group's block size."""
        return block_hashes_at_size(block_hashes, self.hash_factor)

    def find_longest_cache_hit(self, block_hashes: Sequence[BlockHash], max_length: int,
                               group_ids: Sequence[int] = (0,), alignment: int = 0) -> HitLists:
        """The hit of every group in `group_ids` (same spec as this one), at most `max_length`
        tokens, a multiple of `alignment` tokens (0: the block size)."""
        raise NotImplementedError

    def get_num_blocks_to_allocate(self, request_id: str, num_tokens: int,
                                   new_computed_blocks: Sequence[KVCacheBlock],
                                   total_computed_tokens: int, num_tokens_main_model: int,
                                   capped: bool = False, prefill_end: int = 0) -> int:
        """The free blocks allocating slots for `num_tokens` tokens takes; `capped`: as the
        whole-prompt admission counts them, at most `admission_cap` blocks for the request.
        `prefill_end` (the token the request's prefill ends at) matters to Mamba groups only."""
        num_required = cdiv(num_tokens, self.block_size)
        if capped and self.admission_cap is not None and num_required > self.admission_cap:
            num_required = self.admission_cap
        num_req_blocks = len(self.req_to_blocks.get(request_id, ()))
        if request_id in self.num_cached_block:
            # A running request never gains prefix hits.
            return max(num_required - num_req_blocks, 0)
        num_skipped_blocks = self.get_num_skipped_tokens(total_computed_tokens) // self.block_size
        num_new = max(num_required - max(num_skipped_blocks, len(new_computed_blocks) + num_req_blocks), 0)
        # Hit blocks sitting in the free queue leave it when touched, so they use free capacity.
        first_kept = max(0, num_skipped_blocks - num_req_blocks)
        return num_new + num_evictable(new_computed_blocks[first_kept:])

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
            num_missing = cdiv(num_total_computed, self.block_size) - len(req_blocks)
            req_blocks.extend(self.block_pool.get_new_blocks(num_missing, self.group_id))

    def allocate_new_blocks(self, request_id: str, num_tokens: int, num_tokens_main_model: int) -> list[KVCacheBlock]:
        req_blocks = self.req_to_blocks.setdefault(request_id, [])
        num_new = cdiv(num_tokens, self.block_size) - len(req_blocks)
        if num_new <= 0:
            return []
        new_blocks = self.block_pool.get_new_blocks(num_new, self.group_id)
        req_blocks.extend(new_blocks)
        return new_blocks

    def cache_blocks(self, request: Request, num_tokens: int) -> None:
        """Register the request's blocks that `num_tokens` tokens fill completely (only those a later
        request can hit, where the release retains sparse groups so)."""
        num_cached = self.num_cached_block.get(request.request_id, 0)
        num_full = num_tokens // self.block_size
        if num_cached >= num_full:
            return
        reachable = self.reachable_blocks(request, num_cached, num_full) if self.caches_reachable_only else None
        self.block_pool.cache_full_blocks(self.req_to_blocks[request.request_id], self.hashes(request.block_hashes),
                                          num_cached, num_full, self.group_id, reachable)
        self.num_cached_block[request.request_id] = num_full

    def reachable_boundaries(self, request: Request) -> tuple[int, ...]:
        """The token positions a later request's hit can end at, in whole hit alignments: the
        prompt's replay boundary (a resent prompt hits at most num_prompt_tokens - 1) and the
        shared-prefix junction its lookup found, if any (vLLM 0.33.0's `replay_boundaries`)."""
        alignment = self.cache_hit_alignment
        boundaries = (request.num_prompt_tokens - 1, request.shared_prefix_boundary)
        return tuple(b // alignment * alignment for b in boundaries if b)

    def reachable_blocks(self, request: Request, start: int, stop: int) -> Collection[int]:
        """Which of blocks start..stop-1 a later request can hit (groups whose hits are sparse)."""
        return range(start, stop)

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

    def new_step_starts(self) -> None:
        """Called when the scheduler starts a step (Mamba forgets the blocks it cached)."""

    def noop_limit(self, request: Request) -> int:
        """The most computed tokens (chunk included) this group's table serves as it is: no block to
        add, none newly full to cache, none newly out of reach (null entries are a prefix here)."""
        blocks = self.req_to_blocks.get(request.request_id, [])
        block_size = self.block_size
        limit = len(blocks) * block_size
        if self.enable_caching:
            limit = min(limit, (self.num_cached_block.get(request.request_id, 0) + 1) * block_size - 1)
        if self.skips_tokens:
            num_nulls = bisect_left(blocks, True, key=is_real)
            if num_nulls < len(blocks):
                limit = min(limit, self.max_computed_skipping_less_than((num_nulls + 1) * block_size))
        return limit

    def max_computed_skipping_less_than(self, num_tokens: int) -> int:
        """The most computed tokens whose skipped tokens stay below `num_tokens`."""
        return sys.maxsize


def is_real(block: KVCacheBlock) -> bool:
    return not block.is_null


def num_evictable(blocks: Sequence[KVCacheBlock]) -> int:
    # block_id 0 is the null block (`KVCacheBlock.is_null`, inline: every admission counts its hits)
    return sum(1 for block in blocks if block.ref_cnt == 0 and block.block_id != 0)


def trim_to_alignment(hits: HitLists, block_size: int, alignment: int) -> HitLists:
    """Drop trailing blocks until the hit is a whole number of `alignment` tokens."""
    if alignment and alignment != block_size:
        step = alignment // block_size
        keep = len(hits[0]) // step * step
        for hit in hits:
            del hit[keep:]
    return hits


class FullAttentionManager(SingleTypeKVCacheManager):
    def find_longest_cache_hit(self, block_hashes: Sequence[BlockHash], max_length: int,
                               group_ids: Sequence[int] = (0,), alignment: int = 0) -> HitLists:
        """Leading blocks whose hashes are cached; hashes chain, so the first miss ends the hit."""
        hashes = islice(self.hashes(block_hashes), max_length // self.block_size)
        if len(group_ids) == 1:
            hits = [self.block_pool.cached_prefix(hashes, group_ids[0])]
        else:
            hits = [[] for _ in group_ids]
            for block_hash in hashes:
                blocks = self.block_pool.get_cached_blocks(block_hash, group_ids)
                if blocks is None:
                    break
                for hit, block in zip(hits, blocks, strict=True):
                    hit.append(block)
        return trim_to_alignment(hits, self.block_size, alignment)
