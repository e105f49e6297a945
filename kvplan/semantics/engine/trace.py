"""The replay trace format (`trace-replay.md` section 1): reading, validation and token-id rules.

Every mistake is a KvplanError naming the trace, the place and the fix, so that the CLI prints
one line and exits with code 2."""

from __future__ import annotations

import json
from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any

from kvplan.errors import KvplanError
from kvplan.parsing import first_unknown_key
from kvplan.semantics.config.cache import ALLOWED_BLOCK_SIZES
from kvplan.semantics.engine.config import EngineConfig
from kvplan.semantics.engine.groups import GROUP_KINDS, MAMBA, MAMBA_CACHE_MODES, KVCacheGroup
from kvplan.semantics.engine.request import Request
from kvplan.semantics.releases import release_named

PREFIX_TOKEN_BASE = 1_000_000_000
UNIQUE_TOKEN_BASE = 2_000_000_000
OUTPUT_TOKEN_BASE = 3_000_000_000
TOKENS_PER_ID = 1_000_000
MAX_TOKEN_ID = 2**63 - 1

CONFIG_KEYS = {
    "num_gpu_blocks": int, "block_size": int, "enable_prefix_caching": bool,
    "max_num_batched_tokens": int, "max_num_seqs": int, "max_model_len": int,
    "enable_chunked_prefill": bool, "hash_algo": str, "hash_seed": str,
    "vllm_version": str, "scheduling": str,
}
# The release whose engine policies apply (`semantics/releases.py`), as a version string.
RELEASE_KEY = "vllm_version"
# `trace-replay-hybrid.md`: the KV cache groups sharing the pool, by type; each type's keys. A
# group's own `block_size` (a multiple of the trace's, as vLLM's page-size unification gives) is
# kvplan's addition: the contract's harness gives every group the trace's block size.
GROUPS_KEY = "kv_cache_groups"
GROUP_KEYS = {
    "full_attention": ("type", "block_size"),
    "sliding_window": ("type", "sliding_window", "block_size"),
    "chunked_local_attention": ("type", "attention_chunk_size", "block_size"),
    "mamba": ("type", "mamba_cache_mode", "conv_dim", "ssm_dim", "mamba_type", "block_size",
              "num_prefill_checkpoint_blocks", "prefill_checkpoint_alignment"),
}
# vLLM 0.33.0's MambaSpec fields of a Mamba-2 mixer (1 block, alignment 1) or a gated delta net with
# FlashInfer's prefill (1 block, the Mamba block size); without them the spec is a Mamba-1 mixer's.
CHECKPOINT_BLOCKS_KEY = "num_prefill_checkpoint_blocks"
CHECKPOINT_ALIGNMENT_KEY = "prefill_checkpoint_alignment"
REQUIRED_GROUP_KEYS = {"sliding_window": "sliding_window", "chunked_local_attention": "attention_chunk_size"}
REQUEST_KEYS = (
    "request_id", "arrival_step", "max_tokens", "prompt_token_ids", "prefix_id", "prefix_len",
    "unique_len", "output_token_ids",
)
PREFIX_FIELDS = ("prefix_id", "prefix_len", "unique_len")


@dataclass(frozen=True)
class TraceRequest:
    """One request of a trace; `ordinal` is its index in the trace, which fixes its token ids."""

    request_id: str
    ordinal: int
    arrival_step: int
    max_tokens: int
    prompt_token_ids: tuple[int, ...] | None = None
    prefix_id: int = 0
    prefix_len: int = 0
    unique_len: int = 0
    output_token_ids: tuple[int, ...] | None = None

    @property
    def prompt_len(self) -> int:
        if self.prompt_token_ids is not None:
            return len(self.prompt_token_ids)
        return self.prefix_len + self.unique_len

    def prompt(self) -> array[int]:
        if self.prompt_token_ids is not None:
            return array("q", self.prompt_token_ids)
        prefix_base = PREFIX_TOKEN_BASE + self.prefix_id * TOKENS_PER_ID
        unique_base = UNIQUE_TOKEN_BASE + self.ordinal * TOKENS_PER_ID
        tokens = array("q", range(prefix_base, prefix_base + self.prefix_len))
        tokens.extend(range(unique_base, unique_base + self.unique_len))
        return tokens

    def outputs(self) -> Sequence[int]:
        if self.output_token_ids is not None:
            return self.output_token_ids
        base = OUTPUT_TOKEN_BASE + self.ordinal * TOKENS_PER_ID
        return range(base, base + self.max_tokens)

    def to_request(self) -> Request:
        return Request(self.request_id, self.prompt(), self.max_tokens, self.outputs())


@dataclass(frozen=True)
class Trace:
    config: EngineConfig
    requests: tuple[TraceRequest, ...]

    @property
    def last_arrival_step(self) -> int:
        return max((r.arrival_step for r in self.requests), default=-1)


def load_trace(path: str | PathLike[str], overrides: Mapping[str, Any] | None = None) -> Trace:
    """Read and validate a trace file; `overrides` (command-line options) replace config keys."""
    path = Path(path)
    try:
        text = path.read_text()
    except FileNotFoundError:
        raise KvplanError(f"{path}: no such trace file") from None
    except OSError as error:
        raise KvplanError(f"{path}: cannot read the trace: {error.strerror}") from None
    except UnicodeDecodeError:
        raise KvplanError(f"{path}: not a JSON trace (the file is not UTF-8 text)") from None
    try:
        document = json.loads(text)
    except json.JSONDecodeError as error:
        raise KvplanError(
            f"{path}: not valid JSON (line {error.lineno}, column {error.colno}: {error.msg}); "
            "a trace is one JSON object with 'config' and 'requests'"
        ) from None
    return parse_trace(document, overrides, source=str(path))


def parse_trace(document: Any, overrides: Mapping[str, Any] | None = None, source: str = "trace") -> Trace:
    if not isinstance(document, dict):
        raise KvplanError(f"{source}: a trace is a JSON object with 'config' and 'requests'")
    _check_keys(document, ("config", "requests"), source)
    raw_config = document.get("config", {})
    if not isinstance(raw_config, dict):
        raise KvplanError(f"{source}: 'config' must be a JSON object")
    _check_keys(raw_config, (*CONFIG_KEYS, GROUPS_KEY), f"{source}: config")
    merged = {**raw_config, **{k: v for k, v in (overrides or {}).items() if v is not None}}
    config = parse_config(merged, source)
    raw_requests = document.get("requests")
    if not isinstance(raw_requests, list):
        raise KvplanError(f"{source}: 'requests' must be a JSON list of request objects")
    requests = tuple(_parse_request(raw, ordinal, config, source) for ordinal, raw in enumerate(raw_requests))
    seen: set[str] = set()
    for request in requests:
        if request.request_id in seen:
            raise KvplanError(f"{source}: request id {request.request_id!r} appears twice; ids are unique")
        seen.add(request.request_id)
    return Trace(config, requests)


def parse_config(raw: Mapping[str, Any], source: str = "trace", *, groups: tuple[KVCacheGroup, ...] | None = None,
                 derived_block_size: int | None = None) -> EngineConfig:
    """The engine config of a trace's (or workload's) config keys. `groups` are KV cache groups
    already parsed (a plan's), in place of the raw list; `derived_block_size` is a block size vLLM
    derived itself (a Mamba hybrid's), allowed beside the sizes a user may choose."""
    if raw.get("num_gpu_blocks") is None:
        raise KvplanError(f"{source}: config needs num_gpu_blocks (the pool size including the null block), "
                          "in the trace or with --num-gpu-blocks")
    for key, kind in CONFIG_KEYS.items():
        if key in raw and not _is(raw[key], kind):
            got = json.dumps(raw[key])
            raise KvplanError(f"{source}: config {key} must be {_kind_name(kind)}, got {got}")
    block_size = raw.get("block_size", 16)
    if block_size not in ALLOWED_BLOCK_SIZES and block_size != derived_block_size:
        raise KvplanError(f"{source}: config block_size must be one of "
                          f"{', '.join(map(str, ALLOWED_BLOCK_SIZES))} (vLLM's choices), got {block_size}")
    fields = {key: value for key, value in raw.items() if key not in (GROUPS_KEY, RELEASE_KEY)}
    if GROUPS_KEY in raw:
        fields[GROUPS_KEY] = parse_groups(raw[GROUPS_KEY], f"{source}: config {GROUPS_KEY}")
    elif groups is not None:
        fields[GROUPS_KEY] = groups
    try:
        if RELEASE_KEY in raw:
            fields["release"] = release_named(raw[RELEASE_KEY])
        return EngineConfig(**fields)
    except KvplanError as error:
        raise KvplanError(f"{source}: config {error}") from None


def parse_groups(raw: Any, where: str) -> tuple[KVCacheGroup, ...]:
    """The trace's group list (`trace-replay-hybrid.md` section 1); the list order is the group id."""
    if not isinstance(raw, list) or not raw:
        raise KvplanError(f"{where} must be a non-empty list of groups such as {{\"type\": \"full_attention\"}}")
    return tuple(_parse_group(entry, f"{where}[{index}]") for index, entry in enumerate(raw))


def _parse_group(raw: Any, where: str) -> KVCacheGroup:
    if not isinstance(raw, dict) or raw.get("type") not in GROUP_KINDS:
        got = json.dumps(raw.get("type") if isinstance(raw, dict) else raw)
        raise KvplanError(f"{where}: type must be one of {', '.join(GROUP_KINDS)}, got {got}")
    kind = raw["type"]
    _check_keys(raw, GROUP_KEYS[kind], f"{where} ({kind})")
    required = REQUIRED_GROUP_KEYS.get(kind)
    if required is not None and required not in raw:
        raise KvplanError(f"{where}: a {kind} group needs {required} (tokens, a positive integer)")
    for key in (required, "conv_dim", "ssm_dim", "block_size"):
        if key is not None and key in raw and (type(raw[key]) is not int or raw[key] < 1):
            raise KvplanError(f"{where}: {key} must be a positive integer, got {json.dumps(raw[key])}")
    block_size = raw.get("block_size")
    if kind != MAMBA:
        return KVCacheGroup(kind, **({required: raw[required]} if required else {}), block_size=block_size)
    mode = raw.get("mamba_cache_mode")
    if mode is not None and mode not in MAMBA_CACHE_MODES:
        raise KvplanError(f"{where}: mamba_cache_mode must be one of {', '.join(MAMBA_CACHE_MODES)}, "
                          f"got {json.dumps(mode)}")
    if not isinstance(raw.get("mamba_type", ""), str):
        raise KvplanError(f"{where}: mamba_type must be a string, got {json.dumps(raw['mamba_type'])}")
    # The state shapes size the page only; they tell Mamba specs apart, as in vLLM.
    layout = f"{raw.get('mamba_type', 'mamba2')} conv {raw.get('conv_dim', 8)} ssm {raw.get('ssm_dim', 64)}"
    return KVCacheGroup(kind, mamba_cache_mode=mode, block_size=block_size, layout=layout,
                        **_checkpoint_fields(raw, where))


def _checkpoint_fields(raw: dict[str, Any], where: str) -> dict[str, int]:
    """A Mamba group's prefill checkpoint keys; the alignment defaults to 1 (a Mamba-2 mixer's)."""
    if CHECKPOINT_BLOCKS_KEY not in raw:
        if CHECKPOINT_ALIGNMENT_KEY in raw:
            raise KvplanError(f"{where}: {CHECKPOINT_ALIGNMENT_KEY} needs {CHECKPOINT_BLOCKS_KEY} (the group's "
                              f"prefill checkpoint blocks, 1 for Mamba-2 and gated delta net layers)")
        return {}
    blocks = raw[CHECKPOINT_BLOCKS_KEY]
    if type(blocks) is not int or blocks < 0:
        raise KvplanError(f"{where}: {CHECKPOINT_BLOCKS_KEY} must be a non-negative integer, got {json.dumps(blocks)}")
    alignment = raw.get(CHECKPOINT_ALIGNMENT_KEY, 1)
    if type(alignment) is not int or alignment < 1:
        raise KvplanError(f"{where}: {CHECKPOINT_ALIGNMENT_KEY} must be a positive integer (tokens), "
                          f"got {json.dumps(alignment)}")
    return {"num_prefill_checkpoint_blocks": blocks, "prefill_checkpoint_alignment": alignment}


def _parse_request(raw: Any, ordinal: int, config: EngineConfig, source: str) -> TraceRequest:
    where = f"{source}: requests[{ordinal}]"
    if not isinstance(raw, dict):
        raise KvplanError(f"{where} must be a JSON object")
    if "request_id" in raw:
        where += f" ({raw['request_id']!r})"
    _check_keys(raw, REQUEST_KEYS, where)
    request_id = raw.get("request_id")
    if not isinstance(request_id, str) or not request_id:
        raise KvplanError(f"{where}: request_id must be a non-empty string")
    if "max_tokens" not in raw:
        raise KvplanError(f"{where}: max_tokens is missing")
    arrival_step = _non_negative(raw.get("arrival_step", 0), "arrival_step", where)
    max_tokens = _non_negative(raw["max_tokens"], "max_tokens", where)
    if max_tokens < 1:
        raise KvplanError(f"{where}: max_tokens must be at least 1, as vLLM requires")
    fields: dict[str, Any] = {}
    if "prompt_token_ids" in raw:
        given = [key for key in PREFIX_FIELDS if key in raw]
        if given:
            raise KvplanError(f"{where}: give either prompt_token_ids or {'/'.join(PREFIX_FIELDS)}, "
                              f"not both (found {', '.join(given)})")
        fields["prompt_token_ids"] = _token_ids(raw["prompt_token_ids"], "prompt_token_ids", where)
    else:
        for key in PREFIX_FIELDS:
            fields[key] = _non_negative(raw.get(key, 0), key, where)
        if fields["prefix_len"] > TOKENS_PER_ID or fields["unique_len"] > TOKENS_PER_ID:
            raise KvplanError(f"{where}: prefix_len and unique_len are at most {TOKENS_PER_ID:,} "
                              "(the token-id rule gives each prefix and request a million ids)")
    if "output_token_ids" in raw:
        outputs = _token_ids(raw["output_token_ids"], "output_token_ids", where)
        if len(outputs) < max_tokens:
            raise KvplanError(f"{where}: output_token_ids holds {len(outputs)} ids but max_tokens is "
                              f"{max_tokens}; list at least max_tokens ids")
        fields["output_token_ids"] = outputs
    elif min(max_tokens, config.max_model_len) > TOKENS_PER_ID:
        raise KvplanError(f"{where}: a request generates at most {TOKENS_PER_ID:,} tokens without "
                          "output_token_ids (the token-id rule gives each request a million ids)")
    request = TraceRequest(request_id, ordinal, arrival_step, max_tokens, **fields)
    if request.prompt_len == 0:
        raise KvplanError(f"{where}: the prompt is empty; give prompt_token_ids or a positive "
                          "prefix_len/unique_len")
    if request.prompt_len >= config.max_model_len:
        raise KvplanError(f"{where}: the prompt ({request.prompt_len} tokens) must be shorter than "
                          f"max_model_len ({config.max_model_len}); shorten it or raise max_model_len")
    return request


def _check_keys(mapping: Mapping[str, Any], allowed: Sequence[str], where: str) -> None:
    unknown = first_unknown_key(mapping, allowed)
    if unknown is not None:
        key, close = unknown
        hint = f"did you mean {close!r}?" if close else f"known keys: {', '.join(allowed)}"
        raise KvplanError(f"{where}: unknown key {key!r} ({hint})")


def _is(value: Any, kind: type) -> bool:
    # JSON true/false are Python bools, which are also ints: keep them apart.
    return type(value) is kind


def _kind_name(kind: type) -> str:
    return {int: "an integer", bool: "true or false", str: "a string"}[kind]


def _non_negative(value: Any, key: str, where: str) -> int:
    if type(value) is not int or value < 0:
        raise KvplanError(f"{where}: {key} must be a non-negative integer, got {json.dumps(value)}")
    return value


def _token_ids(value: Any, key: str, where: str) -> tuple[int, ...]:
    if not isinstance(value, list):
        raise KvplanError(f"{where}: {key} must be a list of token ids")
    for token in value:
        if type(token) is not int or not 0 <= token <= MAX_TOKEN_ID:
            got = json.dumps(token)
            raise KvplanError(f"{where}: {key} holds {got}; token ids are integers in [0, 2**63)")
    return tuple(value)
