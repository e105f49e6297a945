"""vLLM's KV cache coordinators (`v1/core/kv_cache_coordinator.py`): one block pool shared by every
KV cache group, one manager per group, each step applied group by group in group order.

The prefix lookup is the only part that differs by coordinator: none with caching off, the one
group's own rule for a single group, and the hybrid fixed point for several groups."""

from __future__ import annotations

from collections.abc import Sequence
from math import lcm
from typing import TYPE_CHECKING

from kvplan.semantics.engine.block_pool import BlockHash, BlockPool, KVCacheBlock
from kvplan.semantics.engine.groups import KVCacheGroup
from kvplan.semantics.engine.mamba_manager import MambaManager
from kvplan.semantics.engine.single_type_manager import (
    CACHES_REACHABLE_ONLY,
    FullAttentionManager,
    SingleTypeKVCacheManager,
)
from kvplan.semantics.engine.window_managers import ChunkedLocalAttentionManager, SlidingWindowManager
from kvplan.semantics.kv.specs import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheSpec,
    MambaSpec,
    SlidingWindowSpec,
)
from kvplan.semantics.releases import DEFAULT_RELEASE, Release

if TYPE_CHECKING:
    from kvplan.semantics.engine.request import Request

# One block list per group.
GroupBlocks = tuple[list[KVCacheBlock], ...]

# A group's manager by its type, the spec class (vLLM's `spec_manager_map`, docs/vllm/kv-semantics.md
# section 9): one row per class of `GROUP_TYPES`.
MANAGERS: dict[type[KVCacheSpec], type[SingleTypeKVCacheManager]] = {
    FullAttentionSpec: FullAttentionManager,
    SlidingWindowSpec: SlidingWindowManager,
    ChunkedLocalAttentionSpec: ChunkedLocalAttentionManager,
    MambaSpec: MambaManager,
}


class KVCacheCoordinator:
    """`groups` are resolved (`resolve_groups`); `hash_block_size` is the block size the request
    hashes are computed at (the engine's block size); `max_in_flight_tokens` (tokens scheduled and
    not yet processed, at most) and `max_model_len` bound what the whole-prompt admission counts for
    window groups."""

    def __init__(self, groups: tuple[KVCacheGroup, ...], num_gpu_blocks: int, hash_block_size: int,
                 enable_caching: bool, release: Release = DEFAULT_RELEASE, max_in_flight_tokens: int | None = None,
                 max_model_len: int | None = None) -> None:
        self.groups = groups
        self.enable_caching = enable_caching
        # A Mamba group reserves a prefill checkpoint block only in the chunk that reaches the
        # prefill's end where the release hashes reachable blocks only; where it hashes every block,
        # every chunk publishes a state (vLLM passes prefill_end 0 unless retention is sparse).
        self._passes_prefill_end = CACHES_REACHABLE_ONLY[release.prefix_cache_retention]
        self.block_pool = BlockPool(num_gpu_blocks, enable_caching, len(groups), release.freed_unhashed_blocks)
        self.managers = tuple(
            MANAGERS[group.spec](group, self.block_pool, enable_caching, group_id, hash_block_size, release)
            for group_id, group in enumerate(groups)
        )
        # Groups of one spec are looked up together; full attention first (it bounds the others).
        kinds: dict[KVCacheGroup, list[int]] = {}
        for group_id, group in enumerate(groups):
            kinds.setdefault(group.lookup_key, []).append(group_id)
        self.lookup_order = sorted(kinds.values(), key=lambda ids: groups[ids[0]].spec is not FullAttentionSpec)
        self.alignment = lcm(*(group.block_size or 1 for group in groups))
        # the managers that keep state per step (Mamba): the others' new_step_starts does nothing,
        # and the scheduler calls it at every step
        self._step_listeners = [m for m in self.managers
                                if type(m).new_step_starts is not SingleTypeKVCacheManager.new_step_starts]
        for manager in self.managers:
            manager.cache_hit_alignment = self.alignment
            if max_in_flight_tokens is not None and max_model_len is not None:
                manager.admission_cap = manager.admission_blocks(max_in_flight_tokens, max_model_len)

    def get_num_blocks_to_allocate(self, request_id: str, num_tokens: int,
                                   new_computed_blocks: Sequence[Sequence[KVCacheBlock]],
                                   total_computed_tokens: int, num_tokens_main_model: int,
                                   capped: bool = False, prefill_end: int = 0) -> int:
        if not self._passes_prefill_end:
            prefill_end = 0
        return sum(
            manager.get_num_blocks_to_allocate(request_id, num_tokens, hits_of(new_computed_blocks, group_id),
                                               total_computed_tokens, num_tokens_main_model, capped, prefill_end)
            for group_id, manager in enumerate(self.managers)
        )

    def allocate_new_computed_blocks(self, request_id: str, new_computed_blocks: Sequence[Sequence[KVCacheBlock]],
                                     num_local_computed_tokens: int, num_external_computed_tokens: int) -> None:
        for group_id, manager in enumerate(self.managers):
            manager.allocate_new_computed_blocks(request_id, hits_of(new_computed_blocks, group_id),
                                                 num_local_computed_tokens, num_external_computed_tokens)

    def allocate_new_blocks(self, request_id: str, num_tokens: int, num_tokens_main_model: int) -> GroupBlocks:
        return tuple(manager.allocate_new_blocks(request_id, num_tokens, num_tokens_main_model)
                     for manager in self.managers)

    def cache_blocks(self, request: Request, num_computed_tokens: int) -> None:
        for manager in self.managers:
            manager.cache_blocks(request, num_computed_tokens)

    def free(self, request_id: str) -> None:
        """Group by group, each group's table tail first: that is the order of the free queue's tail."""
        for manager in self.managers:
            manager.free(request_id)

    def remove_skipped_blocks(self, request_id: str, total_computed_tokens: int) -> None:
        for manager in self.managers:
            manager.remove_skipped_blocks(request_id, total_computed_tokens)

    def noop_limit(self, request: Request) -> int:
        """Growing the request to this many computed tokens changes no group: `allocate_slots`
        would neither free, allocate nor cache a block, so the scheduler may skip the call."""
        return min(manager.noop_limit(request) for manager in self.managers)

    def get_blocks(self, request_id: str) -> GroupBlocks:
        return tuple(manager.req_to_blocks.get(request_id) or [] for manager in self.managers)

    def new_step_starts(self) -> None:
        for manager in self._step_listeners:
            manager.new_step_starts()

    def find_longest_cache_hit(self, block_hashes: Sequence[BlockHash], max_length: int) -> tuple[GroupBlocks, int]:
        """Each group's hit blocks and the hit length in tokens, the same for every group."""
        hits, hit_length, _ = self.lookup(block_hashes, max_length)
        return hits, hit_length

    def lookup(self, block_hashes: Sequence[BlockHash], max_length: int) -> tuple[GroupBlocks, int, int]:
        """`find_longest_cache_hit` and the shared-prefix junction: the longest hit one kind of group
        had, where it is longer than the hit every group serves (a prefix that other requests share
        and some group has not cached); 0 otherwise, and always with one group."""
        if not self.enable_caching:
            return tuple([] for _ in self.managers), 0, 0
        if len(self.managers) == 1:
            manager = self.managers[0]
            hits = manager.find_longest_cache_hit(block_hashes, max_length, (0,), manager.block_size)
            return (hits[0],), len(hits[0]) * manager.block_size, 0
        return self._hybrid_hit(block_hashes, max_length)

    def _hybrid_hit(self, block_hashes: Sequence[BlockHash], max_length: int) -> tuple[GroupBlocks, int, int]:
        """vLLM's fixed point: every kind of group accepts the candidate length or shortens it; a
        pass that shortened it is repeated, except for exactly one full-attention kind plus one
        other (one pass suffices). Full attention is searched once and later only cut."""
        hits_by_group: list[list[KVCacheBlock] | None] = [None] * len(self.managers)
        single_pass = (len(self.lookup_order) == 2 and self.groups[self.lookup_order[0][0]].spec is FullAttentionSpec)
        hit_length = max_length
        longest = 0
        while True:
            length = hit_length
            for group_ids in self.lookup_order:
                manager = self.managers[group_ids[0]]
                if manager.group.spec is FullAttentionSpec and hits_by_group[group_ids[0]] is not None:
                    length = length // manager.block_size * manager.block_size
                    continue
                hits = manager.find_longest_cache_hit(block_hashes, length, group_ids, self.alignment)
                length = len(hits[0]) * manager.block_size
                longest = max(longest, length)
                for group_id, blocks in zip(group_ids, hits, strict=True):
                    hits_by_group[group_id] = blocks
            if length >= hit_length:
                break
            hit_length = length
            if single_pass:
                break
        first = self.lookup_order[0]
        if self.groups[first[0]].spec is FullAttentionSpec:
            keep = hit_length // self.managers[first[0]].block_size
            for group_id in first:
                full_hits = hits_by_group[group_id]
                if full_hits is not None:
                    del full_hits[keep:]
        junction = longest if longest > hit_length else 0
        return tuple(blocks if blocks is not None else [] for blocks in hits_by_group), hit_length, junction


def hits_of(new_computed_blocks: Sequence[Sequence[KVCacheBlock]], group_id: int) -> Sequence[KVCacheBlock]:
    """A group's prefix hits; `()` stands for "no hits in any group"."""
    return new_computed_blocks[group_id] if new_computed_blocks else ()
