"""A request as the scheduler and the KV cache manager see it (vLLM `v1/request.py`)."""

from __future__ import annotations

import enum
from array import array
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from kvplan.errors import KvplanError

if TYPE_CHECKING:
    from kvplan.semantics.engine.hashing import RequestBlockHasher


class RequestStatus(enum.Enum):
    WAITING = "waiting"
    RUNNING = "running"
    PREEMPTED = "preempted"
    FINISHED_LENGTH_CAPPED = "finished_length_capped"


@dataclass(frozen=True)
class MultiModalFeature:
    """A multimodal item occupying prompt positions [offset, offset + length); `identifier` is its hash."""

    identifier: str
    offset: int
    length: int


# Tokens as the engine stores and hashes them: signed 64-bit, native order (array "q"). A run of
# consecutive ids (a simulated prompt's history, a request's planned outputs: `range`s) is encoded
# in bulk below, without making one Python int per token, the cost of a long prompt.
_LOW = 1 << 16
_LOW_BYTE_0 = bytes(i & 0xFF for i in range(_LOW))
_LOW_BYTE_1 = bytes(i >> 8 for i in range(_LOW))
_NATIVE_LITTLE = array("q", [1]).tobytes()[0] == 1
# Outputs whose encoding a request keeps once computed (longer ranges are encoded per call).
MAX_KEPT_OUTPUT_TOKENS = 1 << 16


def consecutive_token_bytes(start: int, stop: int) -> bytes:
    """`array("q", range(start, stop)).tobytes()` for 0 <= start <= stop <= 2**63, computed per run of
    ids that share all but their low 16 bits: one template of the shared high bytes repeated, then
    the low two bytes of each id written by two strided slice assignments (C loops)."""
    high, low = divmod(start, _LOW)
    if low + (stop - start) > _LOW:
        split = (high + 1) * _LOW
        return consecutive_token_bytes(start, split) + consecutive_token_bytes(split, stop)
    count = stop - start
    out = bytearray((high * _LOW).to_bytes(8, "little") * count)
    out[0::8] = _LOW_BYTE_0[low:low + count]
    out[1::8] = _LOW_BYTE_1[low:low + count]
    return bytes(out)


def _is_bulk_range(token_ids: Sequence[int]) -> bool:
    """A range `consecutive_token_bytes` encodes (on a little-endian machine, as array "q" is there)."""
    return (type(token_ids) is range and token_ids.step == 1 and token_ids.start >= 0
            and token_ids.stop <= 1 << 63 and _NATIVE_LITTLE)


def as_token_array(token_ids: Sequence[int]) -> array[int]:
    if type(token_ids) is array and token_ids.typecode == "q":
        return token_ids
    tokens: array[int] = array("q")
    if _is_bulk_range(token_ids):
        assert isinstance(token_ids, range)
        if len(token_ids):
            tokens.frombytes(consecutive_token_bytes(token_ids.start, token_ids.stop))
        return tokens
    try:
        # from a list: two to three times faster than the constructor walking a range
        tokens.fromlist(list(token_ids))
        return tokens
    except OverflowError:
        raise KvplanError("token ids must fit in a signed 64-bit integer") from None


class Request:
    """A prompt and the tokens it will generate, in order (`output_token_ids`, a lazy `range` is fine).

    EOS is never produced: the request stops after `max_tokens` tokens or at the model length."""

    __slots__ = (
        "_bulk_outputs", "_hash_block_size", "_output_bytes", "block_hasher", "block_hashes", "cache_salt",
        "finish_step", "first_scheduled_step", "kv_known_noop_limit", "kv_noop_limit", "kv_slot_limit", "lora_name",
        "max_tokens", "mm_features",
        "needs_extra_keys", "num_cached_tokens", "num_computed_tokens", "num_in_flight_tokens",
        "num_output_placeholders", "num_output_tokens", "num_preemptions", "num_prompt_tokens", "num_shareable_blocks",
        "num_tokens",
        "output_token_ids", "prompt_token_ids", "request_id", "shared_prefix_boundary", "status",
    )

    def __init__(
        self,
        request_id: str,
        prompt_token_ids: Sequence[int],
        max_tokens: int,
        output_token_ids: Sequence[int],
        *,
        lora_name: str | None = None,
        cache_salt: str | None = None,
        mm_features: Sequence[MultiModalFeature] = (),
    ) -> None:
        if len(prompt_token_ids) == 0:
            raise KvplanError(f"request {request_id!r}: the prompt is empty")
        if max_tokens < 1:
            raise KvplanError(f"request {request_id!r}: max_tokens must be at least 1, got {max_tokens}")
        if len(output_token_ids) < max_tokens:
            raise KvplanError(
                f"request {request_id!r}: {len(output_token_ids)} output token ids, max_tokens={max_tokens}"
            )
        self.request_id = request_id
        # 8 bytes a token (prompts are most of a replay's memory), and hashed without conversion.
        self.prompt_token_ids = as_token_array(prompt_token_ids)
        self.output_token_ids = output_token_ids
        self.max_tokens = max_tokens
        self.num_prompt_tokens = len(prompt_token_ids)
        self.num_tokens = self.num_prompt_tokens
        self.num_output_tokens = 0
        self.num_computed_tokens = 0
        # Async scheduling: tokens scheduled for sampling whose output is not processed yet; they
        # count in num_computed_tokens, not in num_tokens.
        self.num_output_placeholders = 0
        # Tokens scheduled in batches whose output is not processed yet (async scheduling).
        self.num_in_flight_tokens = 0
        # Where the last prefix lookup found a prefix that other requests share and some KV cache
        # group has not cached (the longest hit of one kind of group, past the common hit); 0: none.
        self.shared_prefix_boundary = 0
        self.num_preemptions = 0
        # Prefix-hit tokens at the first admission; None until then.
        self.num_cached_tokens: int | None = None
        self.status = RequestStatus.WAITING
        self.first_scheduled_step: int | None = None
        self.finish_step: int | None = None
        self.lora_name = lora_name
        self.cache_salt = cache_salt
        self.mm_features = tuple(sorted(mm_features, key=lambda feature: feature.offset))
        self.needs_extra_keys = lora_name is not None or cache_salt is not None or bool(self.mm_features)
        self.block_hashes: list[bytes] = []
        # The leading blocks another request may share (None: all may). The blocks past them hold
        # tokens no other request has or will have (a simulated conversation's last turn past its
        # history), so no lookup can ever hit them: they are keyed by a unique key instead of their
        # hash (`RequestBlockHasher`), which is observably the same and costs no hashing.
        self.num_shareable_blocks: int | None = None
        # the encoding of `output_token_ids` when it is a range of consecutive ids, made when a
        # block of outputs is first hashed (`token_bytes`); None until then or for other outputs
        self._output_bytes: bytes | None = None
        # whether the outputs are such a range (asked once: `token_bytes` runs for every decode block)
        self._bulk_outputs = _is_bulk_range(output_token_ids)
        self.block_hasher: RequestBlockHasher | None = None
        self._hash_block_size = 0
        # Written by the KV cache manager: while num_computed_tokens + n stays within it, growing
        # the request by n tokens (no hits, no lookahead) allocates, caches and frees nothing in any group.
        self.kv_noop_limit = 0
        # Past kv_noop_limit, growing to n computed tokens still does nothing while n stays within
        # kv_slot_limit and num_tokens (the known tokens: only those are cached) within
        # kv_known_noop_limit (async scheduling computes a token before it is known). Written with
        # kv_noop_limit; where the manager cannot tell, kv_slot_limit equals kv_noop_limit.
        self.kv_slot_limit = 0
        self.kv_known_noop_limit = 0

    def install_block_hasher(self, hasher: RequestBlockHasher) -> None:
        """Hash the full blocks now and keep hashing as generated tokens fill blocks."""
        self.block_hasher = hasher
        self._hash_block_size = hasher.block_size
        hasher.update(self)

    def token_ids(self, start: int, end: int) -> Sequence[int]:
        """Tokens [start, end) of prompt + generated tokens; past num_tokens, the planned outputs
        (under async scheduling the model computes tokens whose output is still in flight)."""
        prompt_len = self.num_prompt_tokens
        if end <= prompt_len:
            return self.prompt_token_ids[start:end]
        outputs = self.output_token_ids[max(start - prompt_len, 0):end - prompt_len]
        if start >= prompt_len:
            return outputs
        return [*self.prompt_token_ids[start:], *outputs]

    def token_bytes(self, start: int, end: int) -> bytes:
        """`token_ids(start, end)` encoded as the engine hashes it (array "q" bytes)."""
        prompt_len = self.num_prompt_tokens
        if end <= prompt_len:
            # through a view: one copy of the prompt's tokens (every prompt is hashed whole)
            return memoryview(self.prompt_token_ids)[start:end].tobytes()
        outputs = self.output_token_ids
        first, last = max(start - prompt_len, 0), end - prompt_len
        if self._bulk_outputs and last <= len(outputs):
            assert isinstance(outputs, range)
            if len(outputs) <= MAX_KEPT_OUTPUT_TOKENS:
                # decodes hash their outputs one block at a time: encode them all once
                if self._output_bytes is None:
                    self._output_bytes = consecutive_token_bytes(outputs.start, outputs.stop)
                data = self._output_bytes[8 * first:8 * last]
            else:
                data = consecutive_token_bytes(outputs.start + first, outputs.start + last)
        else:
            data = as_token_array(outputs[first:last]).tobytes()
        if start >= prompt_len:
            return data
        return memoryview(self.prompt_token_ids)[start:].tobytes() + data

    def append_output_token(self) -> None:
        """Generate the next planned token (generated tokens are read from `output_token_ids`)."""
        self.num_output_tokens += 1
        self.num_tokens += 1
        if self._hash_block_size and self.num_tokens % self._hash_block_size == 0:
            self.block_hasher.update(self)  # type: ignore[union-attr]

    def __repr__(self) -> str:
        return (
            f"Request({self.request_id!r}, tokens={self.num_tokens}, computed={self.num_computed_tokens}, "
            f"status={self.status.value})"
        )
