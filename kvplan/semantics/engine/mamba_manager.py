"""The Mamba (linear attention) manager: a request needs only the state after its last computed
token, so everything before that block is freed.

Cache modes: "none" (caching off; one block of max_model_len tokens per request), "all" (a mode
of vLLM 0.17.1's, gone in 0.33.0: every full block is a cached state snapshot; the generic rule
with skip = computed - 1)
and "align" (one running-state block, the previous state block freed a step later; chunks end on
block boundaries, which the scheduler enforces). No speculative blocks.

Prefill checkpoint blocks (vLLM 0.33.0's `num_prefill_checkpoint_blocks`, Mamba-2 mixers and
gated delta nets; a Mamba-1 mixer has none): in "align" mode, the chunk that reaches the end of a
prefill may run past the prompt's last cacheable block boundary, because the kernel exports the
state at that boundary from inside the chunk into an extra block, the checkpoint block (the one
ending there); the chunk then takes two blocks, the checkpoint's and the running state's. The
checkpoint block is hashed as any reachable block and retired with the blocks behind the state."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from typing import TYPE_CHECKING

from kvplan.semantics.engine.block_pool import BlockHash, BlockPool, KVCacheBlock
from kvplan.semantics.engine.groups import KVCacheGroup
from kvplan.semantics.engine.single_type_manager import HitLists, SingleTypeKVCacheManager, num_evictable
from kvplan.semantics.releases import NEWEST_RELEASE, MambaRetirement, Release
from kvplan.units import cdiv

if TYPE_CHECKING:
    from kvplan.semantics.engine.request import Request

def prefill_checkpoint_position(num_tokens: int, block_size: int) -> int:
    """vLLM 0.33.0's `get_mamba_prefill_checkpoint_position` (no EAGLE, no hash lookahead): the
    last block boundary before the last token, whose state a resent prompt can hit."""
    return max((num_tokens - 1) // block_size * block_size, 0)


def prefill_checkpoint_is_valid(query_start: int, query_end: int, checkpoint_position: int, block_size: int,
                                alignment: int | None) -> bool:
    """vLLM 0.33.0's `is_mamba_prefill_checkpoint_valid` with one block size for the hashes and the
    Mamba state: whether a chunk of tokens query_start..query_end-1 can export the state at
    `checkpoint_position` from inside it, into a block of its own before the running state's."""
    if alignment is None:
        return False
    initial_state_block = (query_start - 1) // block_size
    checkpoint_block = cdiv(query_end, block_size) - 2
    return (query_start % block_size == 0
            and checkpoint_block > initial_state_block
            and query_start + block_size <= checkpoint_position
            and query_start < checkpoint_position < query_end
            and (checkpoint_position - query_start) % alignment == 0)


# Whether an "align" group frees every real block before its running state, walking past null
# entries (vLLM 0.33.0's `_remove_blocks_in_range` with its retired-blocks mark), or stops at the
# first null entry as every other group does, by the release's `mamba_retirement`.
RETIRES_PAST_NULLS: dict[MambaRetirement, bool] = {"stop_at_null": False, "past_nulls": True}


class MambaManager(SingleTypeKVCacheManager):
    skips_tokens = True
    hits_are_sparse = True

    def __init__(self, group: KVCacheGroup, block_pool: BlockPool, enable_caching: bool = True,
                 group_id: int = 0, hash_block_size: int | None = None, release: Release = NEWEST_RELEASE) -> None:
        super().__init__(group, block_pool, enable_caching, group_id, hash_block_size, release)
        self.align = group.mamba_cache_mode == "align"
        self.retires_past_nulls = self.align and RETIRES_PAST_NULLS[release.mamba_retirement]
        # "past_nulls": every block before this index is null already.
        self.num_retired_blocks: dict[str, int] = {}
        # Hashes this group cached during the current step: a state written in this step is not
        # there yet for another request scheduled in the same step.
        self.cached_this_step: set[BlockHash] = set()
        # "align": the index of the state block allocated a step earlier, and who has allocated.
        self.last_state_block_idx: dict[str, int] = {}
        self.allocated_requests: set[str] = set()
        # "align" with prefill checkpoint blocks: the index of the checkpoint block the current
        # allocation reserves, by request (set or cleared by every uncapped block count).
        self.has_checkpoint_blocks = self.align and group.num_prefill_checkpoint_blocks > 0
        self.checkpoint_alignment = group.prefill_checkpoint_alignment
        self.checkpoint_index: dict[str, int] = {}

    def get_num_skipped_tokens(self, num_computed_tokens: int) -> int:
        return num_computed_tokens - 1

    def max_computed_skipping_less_than(self, num_tokens: int) -> int:
        return num_tokens

    def noop_limit(self, request: Request) -> int:
        if not self.align:
            return super().noop_limit(request)
        # An "align" table holds the previous state and the newest block; the previous state goes
        # at the next call, after which only a new block or a newly full one changes anything.
        blocks = self.req_to_blocks.get(request.request_id, [])
        last = self.last_state_block_idx.get(request.request_id)
        if last is not None and not blocks[last].is_null:
            return 0
        if len(blocks) > 1 and not blocks[-2].is_null:
            # A checkpoint block behind the running state: retired at the next call.
            return 0
        limit = len(blocks) * self.block_size
        if self.enable_caching:
            limit = min(limit, (self.num_cached_block.get(request.request_id, 0) + 1) * self.block_size - 1)
        return limit

    def find_longest_cache_hit(self, block_hashes: Sequence[BlockHash], max_length: int,
                               group_ids: Sequence[int] = (0,), alignment: int = 0) -> HitLists:
        """The right-most cached state at a block end (aligned), after null blocks; else no hit."""
        block_size = self.block_size
        hashes = self.hashes(block_hashes)
        hits: HitLists = [[] for _ in group_ids]
        for i in range(max_length // block_size - 1, -1, -1):
            blocks = self.block_pool.get_cached_blocks(hashes[i], group_ids)
            if blocks is None:
                continue
            if alignment and alignment != block_size and (i + 1) * block_size % alignment:
                continue
            for hit, block in zip(hits, blocks, strict=True):
                hit.extend([self.null_block] * i)
                hit.append(block)
            break
        return hits

    def reachable_blocks(self, request: Request, start: int, stop: int) -> Collection[int]:
        """The state block that ends at a reachable boundary: a hit there needs only it."""
        ends = {boundary // self.block_size - 1 for boundary in self.reachable_boundaries(request)}
        return {index for index in ends if start <= index < stop}

    def remove_skipped_blocks(self, request_id: str, total_computed_tokens: int) -> None:
        if self.retires_past_nulls:
            self._retire(request_id, total_computed_tokens)
        else:
            super().remove_skipped_blocks(request_id, total_computed_tokens)
        if not self.align:
            return
        # The state block of two allocations ago was the source of the last copy: free it now.
        last = self.last_state_block_idx.get(request_id)
        if last is not None and last < cdiv(total_computed_tokens, self.block_size) - 1:
            blocks = self.req_to_blocks[request_id]
            if blocks[last] is not self.null_block:
                self.block_pool.free_blocks([blocks[last]])
                blocks[last] = self.null_block

    def _retire(self, request_id: str, total_computed_tokens: int) -> None:
        """Free the real blocks before the running state's, last first, skipping null entries; the
        ones before the mark were freed earlier."""
        blocks = self.req_to_blocks.get(request_id)
        if not blocks:
            return
        first = self.num_retired_blocks.get(request_id, 0)
        last = min(self.get_num_skipped_tokens(total_computed_tokens) // self.block_size, len(blocks))
        if first >= last:
            return
        freed = []
        for i in range(last - 1, first - 1, -1):
            if not blocks[i].is_null:
                freed.append(blocks[i])
                blocks[i] = self.null_block
        self.block_pool.free_blocks(freed)
        self.num_retired_blocks[request_id] = last

    def get_num_blocks_to_allocate(self, request_id: str, num_tokens: int,
                                   new_computed_blocks: Sequence[KVCacheBlock],
                                   total_computed_tokens: int, num_tokens_main_model: int,
                                   capped: bool = False, prefill_end: int = 0) -> int:
        if new_computed_blocks and new_computed_blocks[-1].block_hash in self.cached_this_step:
            # More than the pool: the request waits for the next step, as vLLM postpones it.
            return self.block_pool.num_gpu_blocks + 1
        if not self.align:
            return super().get_num_blocks_to_allocate(request_id, num_tokens, new_computed_blocks,
                                                      total_computed_tokens, num_tokens_main_model, capped)
        num_new = (cdiv(num_tokens_main_model, self.block_size) - len(new_computed_blocks)
                   - len(self.req_to_blocks.get(request_id, ())))
        checkpoint = self._checkpoint_index(request_id, total_computed_tokens, num_tokens_main_model, prefill_end)
        if not capped:
            # What `allocate_new_blocks` then reserves; the admission's count records nothing.
            if checkpoint is None:
                self.checkpoint_index.pop(request_id, None)
            else:
                self.checkpoint_index[request_id] = checkpoint
        # One running-state block, whether the request is new or already allocated, and the
        # checkpoint block when the chunk exports one.
        return min(max(num_new, 0), 1 + (checkpoint is not None)) + num_evictable(new_computed_blocks)

    def _checkpoint_index(self, request_id: str, query_start: int, query_end: int, prefill_end: int) -> int | None:
        """vLLM 0.33.0's `_needs_internal_checkpoint`: the block that takes the checkpoint state of
        the chunk ending at `query_end`, if the group has checkpoint blocks, the chunk reaches the
        prefill's end (`prefill_end`, 0 where the release hashes every block: then every chunk
        may), the state can be exported there, and no real block holds that position yet."""
        if not self.has_checkpoint_blocks or query_end < prefill_end:
            return None
        block_size = self.block_size
        position = prefill_checkpoint_position(query_end, block_size)
        if not prefill_checkpoint_is_valid(query_start, query_end, position, block_size, self.checkpoint_alignment):
            return None
        index = cdiv(query_end, block_size) - 2
        blocks = self.req_to_blocks.get(request_id, ())
        if index < 0 or (index < len(blocks) and not blocks[index].is_null):
            return None
        return index

    def allocate_new_blocks(self, request_id: str, num_tokens: int, num_tokens_main_model: int) -> list[KVCacheBlock]:
        if not self.align:
            return super().allocate_new_blocks(request_id, num_tokens, num_tokens_main_model)
        req_blocks = self.req_to_blocks.setdefault(request_id, [])
        num_required = cdiv(num_tokens_main_model, self.block_size)
        previous_len = len(req_blocks)
        checkpoint = request_id in self.checkpoint_index
        if num_required <= previous_len and not checkpoint:
            assert num_required == previous_len, (num_required, previous_len)
            return []
        if request_id in self.allocated_requests or previous_len > 0:
            # The running state (or the prefix hit's state) sits in the last block.
            self.last_state_block_idx[request_id] = previous_len - 1
        # Null entries up to the running state's block, but for the checkpoint block before it.
        req_blocks.extend([self.null_block] * (num_required - 1 - checkpoint - previous_len))
        req_blocks.extend(self.block_pool.get_new_blocks(max(num_required - len(req_blocks), 0), self.group_id))
        self.allocated_requests.add(request_id)
        return req_blocks[previous_len:]

    def free(self, request_id: str) -> None:
        self.allocated_requests.discard(request_id)
        self.last_state_block_idx.pop(request_id, None)
        self.num_retired_blocks.pop(request_id, None)
        self.checkpoint_index.pop(request_id, None)
        super().free(request_id)

    def cache_blocks(self, request: Request, num_tokens: int) -> None:
        before = self.num_cached_block.get(request.request_id, 0)
        super().cache_blocks(request, num_tokens)
        after = self.num_cached_block.get(request.request_id, 0)
        for block in self.req_to_blocks[request.request_id][before:after]:
            if block.block_hash is not None:
                self.cached_this_step.add(block.block_hash)

    def new_step_starts(self) -> None:
        self.cached_this_step.clear()
