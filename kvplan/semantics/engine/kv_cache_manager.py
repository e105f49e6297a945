"""vLLM's `KVCacheManager` (`v1/core/kv_cache_manager.py`): prefix-cache lookups, slot allocation
with its exact capacity arithmetic across KV cache groups, freeing, and prefix-cache statistics.
The groups and their shared pool are the coordinator's; what differs by release comes from the
`Release` it is handed."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

from kvplan.semantics.engine.block_pool import KVCacheBlock
from kvplan.semantics.engine.coordinator import GroupBlocks, KVCacheCoordinator
from kvplan.semantics.engine.groups import KVCacheGroup, resolve_groups
from kvplan.semantics.engine.single_type_manager import FullAttentionManager, SingleTypeKVCacheManager, num_evictable
from kvplan.semantics.engine.stats import NO_LOOKUPS, PrefixCacheStats
from kvplan.semantics.releases import NEWEST_RELEASE, PrefixStats, Release, WindowFrees
from kvplan.units import cdiv

if TYPE_CHECKING:
    from kvplan.semantics.engine.request import Request

# Whether a prefix-cache lookup enters the statistics when it is made (else when its request is
# admitted), by the release's `prefix_stats`.
STATS_AT_LOOKUP: dict[PrefixStats, bool] = {"every_lookup": True, "on_admission": False}
# Whether a group's out-of-window blocks are freed on the tokens whose batch has been processed
# (vLLM 0.33.0: computed minus in flight, so a step later under async scheduling), else on every
# computed token, by the release's `window_frees`.
FREES_PROCESSED_ONLY: dict[WindowFrees, bool] = {"computed": False, "processed": True}


class KVCacheManager:
    """`kv_cache_groups` None: one full-attention group of `block_size` (the trace replay's
    default); otherwise the groups, resolved as vLLM derives them (`resolve_groups`).
    `max_in_flight_tokens`: the most tokens scheduled and not yet processed (vLLM's
    `max_concurrent_batches x max_num_batched_tokens`; None: max_model_len, vLLM's default)."""

    def __init__(self, num_gpu_blocks: int, block_size: int, max_model_len: int,
                 enable_caching: bool = True, kv_cache_groups: tuple[KVCacheGroup, ...] | None = None,
                 enable_chunked_prefill: bool = True, release: Release | None = None,
                 max_in_flight_tokens: int | None = None) -> None:
        self.block_size = block_size
        self.max_model_len = max_model_len
        self.enable_caching = enable_caching
        release = release or NEWEST_RELEASE
        # Whether `get_computed_blocks` records its lookup (else the scheduler does, on admission).
        self._stats_at_lookup = STATS_AT_LOOKUP[release.prefix_stats]
        self._frees_processed_only = FREES_PROCESSED_ONLY[release.window_frees]
        groups = resolve_groups(kv_cache_groups, block_size, enable_caching, max_model_len, enable_chunked_prefill,
                                release)
        self.coordinator = KVCacheCoordinator(groups, num_gpu_blocks, block_size, enable_caching, release,
                                              max_in_flight_tokens or max_model_len, max_model_len)
        self.block_pool = self.coordinator.block_pool
        self._free_queue = self.block_pool.free_queue
        self.managers = self.coordinator.managers
        self.prefix_cache_stats = PrefixCacheStats()
        # One full-attention group: most calls take the short path of `allocate_slots`.
        self._full_attention = self.is_full_attention
        self._req_to_blocks = self.managers[0].req_to_blocks
        self._num_cached_block = self.managers[0].num_cached_block
        self._no_hits: GroupBlocks = tuple([] for _ in self.managers)
        # ... whose blocks are hash blocks (the engine's block size): admissions with hits take the
        # short path `_admit_with_hits`
        self._admits_short = self._full_attention and self.managers[0].block_size == block_size

    @property
    def manager(self) -> SingleTypeKVCacheManager:
        """Group 0's manager."""
        return self.managers[0]

    @property
    def is_full_attention(self) -> bool:
        """One full-attention group: block tables only grow, at their end."""
        return len(self.managers) == 1 and type(self.managers[0]) is FullAttentionManager

    @property
    def usage(self) -> float:
        return self.block_pool.get_usage()

    def get_computed_blocks(self, request: Request) -> tuple[GroupBlocks, int]:
        """The request's prefix hit, per group: whole blocks, at most num_tokens - 1 tokens (the
        last token is always recomputed for its logits); no reference count changes here. Where the
        release counts every lookup, it is counted now, even if its allocation then fails. The
        request keeps the lookup's shared-prefix junction (`shared_prefix_boundary`)."""
        if not self.enable_caching:
            request.shared_prefix_boundary = 0
            return self._no_hits, 0
        hits, num_hit_tokens, request.shared_prefix_boundary = self.coordinator.lookup(
            request.block_hashes, request.num_tokens - 1)
        if self._stats_at_lookup:
            self.prefix_cache_stats.record(request.num_tokens, num_hit_tokens, request.num_preemptions > 0)
        return hits, num_hit_tokens

    def record_admission(self, request: Request, num_hit_tokens: int) -> None:
        """Where the release counts admissions only, the lookup of a request whose allocation just
        succeeded enters the statistics (vLLM 0.33.0's `record_prefix_cache_stats`)."""
        if self.enable_caching and not self._stats_at_lookup:
            self.prefix_cache_stats.record(request.num_tokens, num_hit_tokens, request.num_preemptions > 0)

    def allocate_slots(
        self,
        request: Request,
        num_new_tokens: int,
        num_new_computed_tokens: int = 0,
        new_computed_blocks: Sequence[Sequence[KVCacheBlock]] = (),
        num_lookahead_tokens: int = 0,
        num_external_computed_tokens: int = 0,
        delay_cache_blocks: bool = False,
        full_sequence_must_fit: bool = False,
    ) -> GroupBlocks | None:
        """Give the request slots for `num_new_tokens` more tokens (plus lookahead slots) in every
        group, pinning its new prefix hits (one list per group, as `get_computed_blocks` returns
        them); None, with nothing changed but out-of-window blocks released, when the free queue
        is too short. Returns each group's newly allocated blocks.

        `full_sequence_must_fit` (the "whole_prompt" admission): None, with nothing changed, unless the
        blocks of all the request's known tokens fit, before the chunk is considered."""
        if num_new_tokens == 0 and num_external_computed_tokens == 0:
            raise ValueError("num_new_tokens must be greater than 0")
        if (self._admits_short and new_computed_blocks and new_computed_blocks[0] and not num_external_computed_tokens
                and request.request_id not in self._num_cached_block):
            return self._admit_with_hits(request, num_new_tokens, num_new_computed_tokens, new_computed_blocks[0],
                                         num_lookahead_tokens, delay_cache_blocks, full_sequence_must_fit)
        has_hits = any(new_computed_blocks)
        if full_sequence_must_fit and not self._whole_sequence_fits(
                request, num_new_computed_tokens, new_computed_blocks, num_external_computed_tokens):
            return None
        if self._full_attention and not has_hits and not num_external_computed_tokens:
            # The step of nearly every running request, kept short: full attention skips nothing
            # and there is nothing to touch, so `get_num_blocks_to_allocate` reduces to the blocks
            # missing for the slots needed. Same result as the general path below.
            request_id = request.request_id
            max_model_len = self.max_model_len
            block_size = self.block_size
            total_computed = request.num_computed_tokens + num_new_computed_tokens
            if total_computed > max_model_len:
                total_computed = max_model_len
            num_tokens_main = total_computed + num_new_tokens
            num_tokens_need_slot = num_tokens_main + num_lookahead_tokens
            if num_tokens_need_slot > max_model_len:
                num_tokens_need_slot = max_model_len
            blocks = self._req_to_blocks.get(request_id)
            num_required = (num_tokens_need_slot + block_size - 1) // block_size
            num_missing = num_required - (len(blocks) if blocks else 0)
            if num_missing > len(self._free_queue):
                return None
            if blocks is None:
                blocks = self._req_to_blocks[request_id] = []
            if num_missing > 0:
                grown = self.block_pool.get_new_blocks(num_missing)
                blocks.extend(grown)
            else:
                grown = []
            if self.enable_caching and not delay_cache_blocks:
                self._cache_new_full_blocks(request, blocks, num_tokens_main)
            self._set_noop_limit(request, blocks)
            return (grown,)

        request_id = request.request_id
        coordinator = self.coordinator
        num_local_computed = request.num_computed_tokens + num_new_computed_tokens
        total_computed = min(num_local_computed + num_external_computed_tokens, self.max_model_len)
        num_tokens_main = total_computed + num_new_tokens
        num_tokens_need_slot = min(num_tokens_main + num_lookahead_tokens, self.max_model_len)

        # Done even when the allocation then fails: out-of-window blocks go back first, so that
        # fewer cached blocks are evicted.
        processed = total_computed - request.num_in_flight_tokens if self._frees_processed_only else total_computed
        coordinator.remove_skipped_blocks(request_id, max(processed, 0))
        num_blocks_to_allocate = coordinator.get_num_blocks_to_allocate(
            request_id, num_tokens_need_slot, new_computed_blocks,
            num_local_computed + num_external_computed_tokens, num_tokens_main, prefill_end=prefill_end(request),
        )
        if num_blocks_to_allocate > self.block_pool.num_free_blocks:
            return None
        if has_hits or num_external_computed_tokens > 0:
            coordinator.allocate_new_computed_blocks(
                request_id, new_computed_blocks or self._no_hits, num_local_computed, num_external_computed_tokens
            )
        new_blocks = coordinator.allocate_new_blocks(request_id, num_tokens_need_slot, num_tokens_main)
        if delay_cache_blocks:
            return new_blocks
        if self.enable_caching:
            # Draft and lookahead slots are never cached: cap at the tokens that exist.
            coordinator.cache_blocks(request, min(total_computed + num_new_tokens, request.num_tokens))
        request.kv_noop_limit = request.kv_slot_limit = coordinator.noop_limit(request)
        return new_blocks

    def _admit_with_hits(self, request: Request, num_new_tokens: int, num_new_computed_tokens: int,
                         hits: Sequence[KVCacheBlock], num_lookahead_tokens: int, delay_cache_blocks: bool,
                         full_sequence_must_fit: bool) -> GroupBlocks | None:
        """`allocate_slots` for a request that is not running, with prefix hits, in the one
        full-attention group and without connector tokens (every admission of a shared prompt):
        the general path with full attention's arithmetic folded in (docs/vllm/kv-semantics.md §8.2
        and §9: nothing skipped, no admission cap, nothing to free first) and the hits' evictable
        count, which both capacity checks add, taken once. Same result, same order of effects."""
        block_size = self.block_size
        max_model_len = self.max_model_len
        num_evictable_hits = num_evictable(hits)
        num_free = len(self._free_queue)
        if full_sequence_must_fit:
            # vLLM 0.33.0's whole-prompt check (`_whole_sequence_fits`): blocks for every known token
            full = min(request.num_tokens, max_model_len)
            if max(cdiv(full, block_size) - len(hits), 0) + num_evictable_hits > num_free:
                return None
        total_computed = min(request.num_computed_tokens + num_new_computed_tokens, max_model_len)
        num_tokens_main = total_computed + num_new_tokens
        num_tokens_need_slot = min(num_tokens_main + num_lookahead_tokens, max_model_len)
        num_required = cdiv(num_tokens_need_slot, block_size)
        if max(num_required - len(hits), 0) + num_evictable_hits > num_free:
            return None
        request_id = request.request_id
        assert not self._req_to_blocks.get(request_id), f"request {request_id!r} is not running and holds blocks"
        # `allocate_new_computed_blocks`: the hits are pinned and start the table, all cached
        self.block_pool.touch(hits)
        blocks = self._req_to_blocks[request_id] = list(hits)
        self._num_cached_block[request_id] = len(blocks)
        grown = self.block_pool.get_new_blocks(num_required - len(blocks)) if num_required > len(blocks) else []
        blocks.extend(grown)
        if delay_cache_blocks:
            return (grown,)
        self._cache_new_full_blocks(request, blocks, num_tokens_main)
        request.kv_noop_limit = request.kv_slot_limit = self.coordinator.noop_limit(request)
        return (grown,)

    def allocate_one_slot(self, request: Request) -> bool:
        """`allocate_slots(request, 1)` for a running request of the one full-attention group, without
        prefix hits or lookahead (the bulk path's decodes, `cruise.py`): the short path above with its
        constants folded in. False, with nothing changed, when the free queue is too short."""
        max_model_len = self.max_model_len
        block_size = self.block_size
        request_id = request.request_id
        total_computed = request.num_computed_tokens
        if total_computed > max_model_len:
            total_computed = max_model_len
        num_tokens_main = total_computed + 1
        num_tokens_need_slot = num_tokens_main if num_tokens_main < max_model_len else max_model_len
        blocks = self._req_to_blocks.get(request_id)
        if blocks is None:
            blocks = []
        num_missing = (num_tokens_need_slot + block_size - 1) // block_size - len(blocks)
        if num_missing > len(self._free_queue):
            return False
        self._req_to_blocks[request_id] = blocks
        if num_missing == 1:
            blocks.append(self.block_pool.get_new_block())
        elif num_missing > 0:
            blocks.extend(self.block_pool.get_new_blocks(num_missing))
        if self.enable_caching:
            self._cache_new_full_blocks(request, blocks, num_tokens_main)
        self._set_noop_limit(request, blocks)
        return True

    def _cache_new_full_blocks(self, request: Request, blocks: list[KVCacheBlock], num_tokens: int) -> None:
        """The short paths' caching tail (the one full-attention group): the blocks that the first
        `num_tokens` tokens fill, capped at the tokens that exist (draft and lookahead slots are
        never cached), and not cached yet enter the prefix cache; the request's cached count follows."""
        if num_tokens > request.num_tokens:
            num_tokens = request.num_tokens
        num_full = num_tokens // self.block_size
        num_cached = self._num_cached_block.get(request.request_id, 0)
        if num_full > num_cached:
            self.block_pool.cache_full_blocks(blocks, request.block_hashes, num_cached, num_full)
            self._num_cached_block[request.request_id] = num_full

    def _whole_sequence_fits(self, request: Request, num_new_computed_tokens: int,
                             new_computed_blocks: Sequence[Sequence[KVCacheBlock]],
                             num_external_computed_tokens: int) -> bool:
        """vLLM 0.33.0's `full_sequence_must_fit` check: the blocks for min(num_tokens, max_model_len)
        tokens, less the prefix hits, plus the hits that sit in the free queue, must be free; a
        window group counts at most the blocks a request holds at once (its `admission_cap`)."""
        full = min(request.num_tokens, self.max_model_len)
        total_computed = min(request.num_computed_tokens + num_new_computed_tokens + num_external_computed_tokens,
                             self.max_model_len)
        needed = self.coordinator.get_num_blocks_to_allocate(
            request.request_id, full, new_computed_blocks, total_computed, full, capped=True,
            prefill_end=prefill_end(request))
        return needed <= self.block_pool.num_free_blocks

    def _set_noop_limit(self, request: Request, blocks: list[KVCacheBlock]) -> None:
        """Full attention only: growing to `limit` tokens needs no new block (its slots exist) and
        fills no new block (the next one to cache ends past it), so `allocate_slots` would do
        nothing; the scheduler skips the call for such steps (most decode steps). The call also does
        nothing past `limit` while the slots exist and the known tokens fill no new block (async
        scheduling: the newest computed token is not known yet, so its block cannot be cached yet)."""
        block_size = self.block_size
        limit = slot_limit = len(blocks) * block_size
        cache_limit = slot_limit
        if self.enable_caching:
            cache_limit = (self._num_cached_block.get(request.request_id, 0) + 1) * block_size - 1
            if cache_limit < limit:
                limit = cache_limit
        request.kv_noop_limit = limit
        request.kv_slot_limit = slot_limit
        request.kv_known_noop_limit = cache_limit

    def free(self, request: Request) -> None:
        """Every group's blocks, group by group, each table tail first."""
        self.coordinator.free(request.request_id)
        request.kv_noop_limit = request.kv_slot_limit = 0

    def new_step_starts(self) -> None:
        self.coordinator.new_step_starts()

    def cache_blocks(self, request: Request, num_computed_tokens: int) -> None:
        if self.enable_caching:
            self.coordinator.cache_blocks(request, num_computed_tokens)

    def get_blocks(self, request_id: str) -> list[KVCacheBlock]:
        """Group 0's block table (null blocks included)."""
        return self._req_to_blocks.get(request_id, [])

    def get_blocks_by_group(self, request_id: str) -> GroupBlocks:
        return self.coordinator.get_blocks(request_id)

    def get_block_ids_by_group(self, request_id: str) -> tuple[list[int], ...]:
        return tuple([block.block_id for block in blocks] for blocks in self.get_blocks_by_group(request_id))

    def make_prefix_cache_stats(self) -> PrefixCacheStats:
        """The statistics since the last call, which starts a new interval (`NO_LOOKUPS`, read only,
        when there was no lookup: most steps)."""
        stats = self.prefix_cache_stats
        if not stats.requests and not stats.preempted_requests:
            # `record` counts every lookup in one of the two: every count is still 0
            return NO_LOOKUPS
        self.prefix_cache_stats = PrefixCacheStats()
        return stats

    def reset_prefix_cache(self) -> bool:
        return self.block_pool.reset_prefix_cache()


def prefill_end(request: Request) -> int:
    """The token a request's prefill ends at, as vLLM's scheduler splits chunks against it: its
    prompt's end, or for a resumed request replaying its output, the last token before the newest."""
    return max(request.num_prompt_tokens, request.num_tokens - 1)
