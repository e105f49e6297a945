"""Reference formulas of vLLM that kvplan computes another way, to check it against: one block's
prefix-cache hash (the hasher extends a request's hashes in bulk), the dummy sampler's peak in
closed form (the backends measure it on tensors), and a request's block ids."""

from __future__ import annotations

from collections.abc import Sequence
from hashlib import sha256

from kvplan.semantics.engine.hashing import ExtraKeys, encode_extra_keys, encode_tokens
from kvplan.semantics.engine.kv_cache_manager import KVCacheManager
from kvplan.semantics.memory.sampler import TRITON_TOPK_MIN_ROWS, SamplerSpec, topk_topp_scratch_rows


def hash_block_tokens(parent: bytes, token_ids: Sequence[int], extra_keys: ExtraKeys = None) -> bytes:
    """The hash of one full block given its parent's hash."""
    return sha256(parent + encode_tokens(token_ids) + encode_extra_keys(extra_keys)).digest()


def sampler_peak_bytes(
    num_tokens: int, num_reqs: int, hidden_size: int, dtype_bytes: int, spec: SamplerSpec
) -> int:
    """The tensors alive at the sampler's peak, unrounded (the formula of docs/vllm/kv-semantics.md §2.2)."""
    vocab, padded = spec.vocab_size, spec.padded_vocab_size
    held = num_tokens * hidden_size * dtype_bytes + 2 * num_reqs * hidden_size * dtype_bytes
    logits = num_reqs * padded * dtype_bytes
    if num_reqs >= TRITON_TOPK_MIN_ROWS:
        scratch = topk_topp_scratch_rows(num_reqs, spec.multiprocessors) * vocab * 4
        return held + logits + 3 * num_reqs * vocab * 4 + scratch
    # sort path: sorted values + int64 indices + softmax, then probs and noise after they die
    return held + logits + max(num_reqs * vocab * (4 + 4 + 8 + 4 + 1), 3 * num_reqs * vocab * 4)


def block_ids(manager: KVCacheManager, request_id: str) -> list[int]:
    return [block.block_id for block in manager.get_blocks(request_id)]
