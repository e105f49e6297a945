"""vLLM's block pool (`v1/core/block_pool.py`): blocks, the free queue and the prefix-cache map.

The free queue holds every block with ref_cnt 0, cached (evictable) or not; its head is the next
block handed out, and where a freed block joins it is the release's `freed_unhashed_blocks`. It is an
`OrderedDict` keyed by block id: CPython implements it as a doubly linked list with an index, so
popping the head, appending to the tail or the head, and unlinking a block from the middle (a
prefix hit on an evictable block) are all O(1), in C.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Container, Iterable, Sequence

from kvplan.errors import KvplanError
from kvplan.semantics.engine.fingerprints import FingerprintSet
from kvplan.semantics.releases import FreedUnhashedBlocks

BlockHash = bytes
# Whether a freed block without a prefix-cache hash goes to the head of the free queue, by the
# release's `freed_unhashed_blocks`; hashed blocks always join the tail (LRU eviction).
UNHASHED_TO_HEAD: dict[FreedUnhashedBlocks, bool] = {"tail": False, "head": True}


def _fingerprint(block_hash: BlockHash) -> int:
    return int.from_bytes(block_hash[:8], "little")


class KVCacheBlock:
    __slots__ = ("block_hash", "block_id", "group_id", "ref_cnt")

    def __init__(self, block_id: int) -> None:
        self.block_id = block_id
        self.ref_cnt = 0
        # Set only while the block is full and registered in the prefix cache (of group_id).
        self.block_hash: BlockHash | None = None
        # The KV cache group that took the block last: a block serves one group at a time.
        self.group_id = 0

    @property
    def is_null(self) -> bool:
        return self.block_id == 0

    def __repr__(self) -> str:
        hashed = self.block_hash is not None
        return f"KVCacheBlock(id={self.block_id}, ref_cnt={self.ref_cnt}, hashed={hashed})"


class BlockPool:
    """Blocks 0..num_gpu_blocks-1; block 0 is the null block and is never handed out.

    The prefix cache is keyed by (block hash, group id), as vLLM's `BlockHashWithGroupId`: one map
    per KV cache group."""

    def __init__(self, num_gpu_blocks: int, enable_caching: bool, num_groups: int = 1,
                 freed_unhashed_blocks: FreedUnhashedBlocks = "tail") -> None:
        if num_gpu_blocks < 2:
            raise KvplanError(f"a block pool needs 2 blocks or more (block 0 is null), got {num_gpu_blocks}")
        self.num_gpu_blocks = num_gpu_blocks
        self.enable_caching = enable_caching
        self._unhashed_to_head = UNHASHED_TO_HEAD[freed_unhashed_blocks]
        self.blocks = [KVCacheBlock(i) for i in range(num_gpu_blocks)]
        self.null_block = self.blocks[0]
        # Never replaced: hot callers (the manager, the scheduler) take its len() without a property call.
        self.free_queue: OrderedDict[int, KVCacheBlock] = OrderedDict((b.block_id, b) for b in self.blocks[1:])
        # hash -> the block, or {block_id: block} when several full blocks share a hash: vLLM does
        # not de-duplicate, because a running request's block table never changes.
        self._cached: list[dict[BlockHash, KVCacheBlock | dict[int, KVCacheBlock]]] = [
            {} for _ in range(num_groups)
        ]
        self._num_used_by_group = [0] * num_groups
        self.num_cached_blocks = 0
        self.num_evictable_cached_blocks = 0
        # Hashes dropped to reuse their blocks (8-byte fingerprints, compactly held), and
        # lookups that missed one of them: while that count is 0, a larger pool would have found
        # exactly the same hits (kvplan's bookkeeping, not vLLM's). Kept only until the run is known
        # to have been short of blocks (`stop_tracking_evictions`): a long run evicts millions.
        self.evicted = FingerprintSet()
        self.num_misses_on_evicted = 0
        self.tracks_evictions = True

    # -- queries -----------------------------------------------------------------------------

    @property
    def num_free_blocks(self) -> int:
        return len(self.free_queue)

    @property
    def num_used_blocks(self) -> int:
        return self.num_gpu_blocks - 1 - len(self.free_queue)

    def get_usage(self) -> float:
        """vLLM's KV cache usage: evictable cached blocks count as free."""
        return 1.0 - len(self.free_queue) / (self.num_gpu_blocks - 1)

    def num_used_blocks_by_group(self) -> tuple[int, ...]:
        """Blocks each KV cache group holds (a block shared by requests of a group counts once)."""
        return tuple(self._num_used_by_group)

    def free_block_ids(self) -> list[int]:
        """Every free block id, head (next handed out) first."""
        return list(self.free_queue)

    def cached_prefix(self, block_hashes: Iterable[BlockHash], group_id: int = 0) -> list[KVCacheBlock]:
        """The cached blocks of the leading hashes, up to the first miss (full-attention hits)."""
        cached_get = self._cached[group_id].get
        hits = []
        for block_hash in block_hashes:
            blocks = cached_get(block_hash)
            if blocks is None:
                if _fingerprint(block_hash) in self.evicted:
                    self.num_misses_on_evicted += 1
                    self.stop_tracking_evictions()
                break
            hits.append(blocks if isinstance(blocks, KVCacheBlock) else next(iter(blocks.values())))
        return hits

    def get_cached_block(self, block_hash: BlockHash, group_id: int = 0) -> KVCacheBlock | None:
        """The block cached under this hash; the first inserted when several full blocks share it."""
        blocks = self._cached[group_id].get(block_hash)
        if blocks is None and _fingerprint(block_hash) in self.evicted:
            self.num_misses_on_evicted += 1
            self.stop_tracking_evictions()
        if blocks is None or isinstance(blocks, KVCacheBlock):
            return blocks
        return next(iter(blocks.values()))

    def get_cached_blocks(self, block_hash: BlockHash, group_ids: Sequence[int]) -> list[KVCacheBlock] | None:
        """One cached block per group for this hash, or None when any group misses it."""
        found = []
        for group_id in group_ids:
            block = self.get_cached_block(block_hash, group_id)
            if block is None:
                return None
            found.append(block)
        return found

    # -- mutations -----------------------------------------------------------------------------

    def get_new_blocks(self, num_blocks: int, group_id: int = 0) -> list[KVCacheBlock]:
        """Pop `num_blocks` from the head of the free queue for a group, evicting their cached hashes.

        A pool full of evictable cached blocks (every long run) evicts one hash per block handed
        out, so the eviction (`_evict`) is inlined here: one loop, counters updated once."""
        free = self.free_queue
        if num_blocks > len(free):
            raise ValueError(f"Cannot get {num_blocks} free blocks from the pool")
        popleft = free.popitem
        cached_by_group = self._cached
        # the evicted fingerprints' buckets, appended to directly (`FingerprintSet`)
        buckets = self.evicted.buckets if self.tracks_evictions else None
        mask = self.evicted.mask
        num_evicted = 0
        new_blocks: list[KVCacheBlock] = []
        keep = new_blocks.append
        # one pass: popping a block and evicting its hash touch different structures, so popping
        # them all first (vLLM's order) and evicting each as it is popped end in the same state
        for _ in range(num_blocks):
            block = popleft(False)[1]
            keep(block)
            block_hash = block.block_hash
            if block_hash is not None:
                cached = cached_by_group[block.group_id]
                entry = cached.pop(block_hash)
                if entry is not block:
                    self._keep_other_copies(cached, block_hash, entry, block)
                block.block_hash = None
                num_evicted += 1
                if buckets is not None:
                    fingerprint = int.from_bytes(block_hash[:8], "little")  # _fingerprint, inline
                    buckets[fingerprint & mask].append(fingerprint)
            block.ref_cnt = 1
            block.group_id = group_id
        if num_evicted:
            self.num_cached_blocks -= num_evicted
            self.num_evictable_cached_blocks -= num_evicted
            if buckets is not None:
                self.evicted.added(num_evicted)
        self._num_used_by_group[group_id] += num_blocks
        return new_blocks

    def get_new_block(self) -> KVCacheBlock:
        """`get_new_blocks(1)[0]` for group 0 (a decode's new block, the commonest call), without a list."""
        free = self.free_queue
        if not free:
            raise ValueError("Cannot get 1 free blocks from the pool")
        block = free.popitem(False)[1]
        block_hash = block.block_hash
        if block_hash is not None:
            self._evict(block)
        block.ref_cnt = 1
        block.group_id = 0
        self._num_used_by_group[0] += 1
        return block

    @staticmethod
    def _keep_other_copies(cached: dict[BlockHash, KVCacheBlock | dict[int, KVCacheBlock]], block_hash: BlockHash,
                           entry: KVCacheBlock | dict[int, KVCacheBlock], block: KVCacheBlock) -> None:
        """Evicting one of several full blocks that share a hash: the others stay cached under it."""
        assert not isinstance(entry, KVCacheBlock), f"block {block.block_id} is not the one cached"
        del entry[block.block_id]
        if entry:
            cached[block_hash] = entry

    def _evict(self, block: KVCacheBlock) -> None:
        """Drop a free block's hash before reuse: it stops being a prefix-cache hit (as
        `get_new_blocks` does inline)."""
        block_hash = block.block_hash
        assert block_hash is not None
        cached = self._cached[block.group_id]
        entry = cached.pop(block_hash)
        if entry is not block:
            self._keep_other_copies(cached, block_hash, entry, block)
        block.block_hash = None
        self.num_cached_blocks -= 1
        self.num_evictable_cached_blocks -= 1
        if self.tracks_evictions:
            self.evicted.add(_fingerprint(block_hash))

    def stop_tracking_evictions(self) -> None:
        """The run was short of blocks already (a preemption, an admission that waited, a miss on an
        evicted hash): whether a later lookup misses an evicted hash no longer matters."""
        if self.tracks_evictions:
            self.tracks_evictions = False
            self.evicted = FingerprintSet()

    def touch(self, blocks: Iterable[KVCacheBlock]) -> None:
        """Pin prefix-hit blocks; an evictable one leaves the free queue without being copied."""
        free = self.free_queue
        for block in blocks:
            if block.block_id == 0:
                continue
            if block.ref_cnt == 0:
                del free[block.block_id]
                self._num_used_by_group[block.group_id] += 1
                if block.block_hash is not None:
                    self.num_evictable_cached_blocks -= 1
            block.ref_cnt += 1

    def free_blocks(self, ordered_blocks: Iterable[KVCacheBlock]) -> None:
        """Release one reference each. Blocks reaching 0 keep their hash and join the free queue in
        the given order: at the tail, or, when the release puts unhashed blocks at the head, there if
        they carry no hash (every block with caching off), so that the first of them is handed out next."""
        free = self.free_queue
        used_by_group = self._num_used_by_group
        to_head = self._unhashed_to_head
        to_front: list[KVCacheBlock] = []
        num_evictable = 0
        for block in ordered_blocks:
            count = block.ref_cnt - 1
            if count:
                # still referenced (a shared prefix); the null block (ref_cnt 0) is never counted
                if block.block_id:
                    block.ref_cnt = count
                continue
            block.ref_cnt = 0
            used_by_group[block.group_id] -= 1
            if block.block_hash is not None:
                num_evictable += 1
                free[block.block_id] = block
            elif to_head:
                to_front.append(block)
            else:
                free[block.block_id] = block
        self.num_evictable_cached_blocks += num_evictable
        for block in reversed(to_front):
            free[block.block_id] = block
            free.move_to_end(block.block_id, last=False)

    def cache_full_blocks(self, blocks: list[KVCacheBlock], block_hashes: Sequence[BlockHash],
                          num_cached_blocks: int, num_full_blocks: int, group_id: int = 0,
                          reachable: Container[int] | None = None) -> None:
        """Register a group's blocks[num_cached_blocks:num_full_blocks] under their request's chained
        hashes; null blocks (out of a window) are skipped, and so are the indexes not in `reachable`
        when it is given (blocks no later request can hit, which stay unhashed)."""
        cached = self._cached[group_id]
        num_cached = num_evictable = 0
        for i in range(num_cached_blocks, num_full_blocks):
            block = blocks[i]
            if block.block_id == 0 or (reachable is not None and i not in reachable):
                continue
            assert block.block_hash is None, f"block {block.block_id} is already cached"
            block_hash = block_hashes[i]
            block.block_hash = block_hash
            entry = cached.get(block_hash)
            if entry is None:
                cached[block_hash] = block
            elif isinstance(entry, KVCacheBlock):
                cached[block_hash] = {entry.block_id: entry, block.block_id: block}
            else:
                entry[block.block_id] = block
            num_cached += 1
            if block.ref_cnt == 0:
                num_evictable += 1
        self.num_cached_blocks += num_cached
        self.num_evictable_cached_blocks += num_evictable

    def reset_prefix_cache(self) -> bool:
        """Forget every cached hash; only possible when no block is in use, as in vLLM."""
        if self.num_used_blocks > 0:
            return False
        self._cached = [{} for _ in self._cached]
        for block in self.blocks:
            block.block_hash = None
        self.num_cached_blocks = 0
        self.num_evictable_cached_blocks = 0
        return True
