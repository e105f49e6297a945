"""Prefix-cache keys: chained hashes over a request's full blocks (vLLM's `kv_cache_utils.py`:
docs/vllm/kv-semantics.md §7; 0.33.0's tagged extra keys change hash values, not hits:
docs/vllm/changes-0.33.md §3.2).

Block i's hash covers (hash of block i-1, the block's tokens, its extra keys), so equal hashes mean
equal prefixes. vLLM hashes a pickle with SHA-256; kvplan hashes a compact fixed-width encoding
(32-byte parent, 8 bytes per token, then the extra keys) with SHA-256. The values differ from
vLLM's, which is fine: only hit/miss behaviour is observable, and SHA-256 makes a collision as
unlikely as it is in vLLM. For the same reason a block that no other request can hit
(`Request.num_shareable_blocks`: a simulated conversation's last turn past its history) is keyed by
a unique 8-byte key instead of a hash: it stays a cached block, counted and evicted as one, its own
request hits it after a preemption, and no other lookup finds it, just as with its hash.
"""

from __future__ import annotations

import json
from array import array
from collections.abc import Iterator, Sequence
from hashlib import sha256
from typing import TYPE_CHECKING, overload

from kvplan.semantics.engine.request import as_token_array

if TYPE_CHECKING:
    from kvplan.semantics.engine.request import Request

ExtraKeys = tuple[str, ...] | None


def none_hash(hash_seed: str) -> bytes:
    """The parent of a request's first block (vLLM derives it from PYTHONHASHSEED)."""
    return sha256(b"kvplan-none-hash\0" + hash_seed.encode()).digest()


def encode_tokens(token_ids: Sequence[int]) -> bytes:
    if type(token_ids) is array:
        return token_ids.tobytes()
    return as_token_array(token_ids).tobytes()


def encode_extra_keys(extra_keys: ExtraKeys) -> bytes:
    # The tokens part has a fixed width, so an empty suffix for "no keys" cannot be confused
    # with a JSON list, which is never empty.
    if extra_keys is None:
        return b""
    return json.dumps(list(extra_keys), separators=(",", ":")).encode()


def block_extra_keys(request: Request, start: int, end: int) -> ExtraKeys:
    """vLLM 0.17.1's `generate_block_hash_extra_keys` for tokens [start, end) of a request:
    the LoRA name on every block, the identifier of every multimodal item overlapping the block
    (items in offset order), and the cache salt on the first block only."""
    keys: list[str] = []
    if request.lora_name is not None:
        keys.append(request.lora_name)
    for feature in request.mm_features:
        if feature.offset < end and feature.offset + feature.length > start:
            keys.append(feature.identifier)
    if request.cache_salt is not None and start == 0:
        keys.append(request.cache_salt)
    return tuple(keys) if keys else None


class RequestBlockHasher:
    """Extends `request.block_hashes` to cover every full block of its tokens (prompt and output)."""

    def __init__(self, block_size: int, hash_seed: str) -> None:
        self.block_size = block_size
        self.none_hash = none_hash(hash_seed)
        # The last prompt hashed from its first block without extra keys, and its hashes: prompts
        # arriving together often share a long system prompt, whose hashes are then not recomputed
        # (a chained hash depends only on the tokens before it, so equal leading blocks hash equal).
        self._last_prompt = b""
        self._last_prompt_hashes: list[bytes] = []
        self._num_unique_keys = 0

    def update(self, request: Request) -> None:
        hashes = request.block_hashes
        first = len(hashes)
        last = request.num_tokens // self.block_size
        if first >= last:
            return
        shareable = request.num_shareable_blocks
        if shareable is not None and last > shareable:
            if first < shareable:
                self._hash(request, first, shareable)
                first = shareable
            # `Request.num_shareable_blocks`: 8 bytes of a counter, never equal to another block's key
            # (nor to a hash: 32 bytes), and a fingerprint (`BlockPool.evicted`) of its own
            count = self._num_unique_keys
            self._num_unique_keys = count + last - first
            hashes.extend([key.to_bytes(8, "little") for key in range(count, count + last - first)])
            return
        self._hash(request, first, last)

    def _hash(self, request: Request, first: int, last: int) -> None:
        """Hash blocks [first, last) of the request, chained from its hashes before them."""
        block_size = self.block_size
        hashes = request.block_hashes
        if last - first == 1 and first and not request.needs_extra_keys:
            # a decode's block, the commonest call: the loop below for one block, without its setup
            hashes.append(sha256(hashes[-1] + request.token_bytes(first * block_size, last * block_size)).digest())
            return
        data = request.token_bytes(first * block_size, last * block_size)
        parent = hashes[-1] if hashes else self.none_hash
        width = 8 * block_size
        if request.needs_extra_keys:
            for i in range(first, last):
                offset = (i - first) * width
                extra = encode_extra_keys(block_extra_keys(request, i * block_size, (i + 1) * block_size))
                parent = sha256(parent + data[offset:offset + width] + extra).digest()
                hashes.append(parent)
        else:
            start = 0
            if first == 0:
                start = self._num_shared_blocks(data, width)
                if start:
                    hashes.extend(self._last_prompt_hashes[:start])
                    parent = hashes[-1]
            for offset in range(start * width, (last - first) * width, width):
                parent = sha256(parent + data[offset:offset + width]).digest()
                hashes.append(parent)
            if first == 0:
                self._last_prompt = data
                self._last_prompt_hashes = hashes.copy()

    def _num_shared_blocks(self, data: bytes, width: int) -> int:
        """How many leading blocks of `data` equal the last prompt's (a binary search over whole
        blocks: each probe compares two prefixes in C, one a view of the last prompt, so that no
        probe copies either: a summary's prompt is 25 KB)."""
        last = memoryview(self._last_prompt)
        low, high = 0, min(len(data), len(last)) // width
        while low < high:
            middle = (low + high + 1) // 2
            if data.startswith(last[:middle * width]):
                low = middle
            else:
                high = middle - 1
        return low


class MergedBlockHashes(Sequence[bytes]):
    """The hashes of a group whose blocks span `factor` hash blocks (vLLM's
    `BlockHashListWithBlockSize`): block i is keyed by the concatenation of hashes i*factor ..
    (i+1)*factor-1, computed on access."""

    def __init__(self, block_hashes: Sequence[bytes], factor: int) -> None:
        self.block_hashes = block_hashes
        self.factor = factor

    def __len__(self) -> int:
        return len(self.block_hashes) // self.factor

    @overload
    def __getitem__(self, index: int) -> bytes: ...

    @overload
    def __getitem__(self, index: slice) -> list[bytes]: ...

    def __getitem__(self, index: int | slice) -> bytes | list[bytes]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        start = index * self.factor
        return b"".join(self.block_hashes[start:start + self.factor])

    def __iter__(self) -> Iterator[bytes]:
        for i in range(len(self)):
            yield self[i]


def block_hashes_at_size(block_hashes: Sequence[bytes], factor: int) -> Sequence[bytes]:
    return block_hashes if factor == 1 else MergedBlockHashes(block_hashes, factor)
