"""The replay trace format (docs/vllm/replay-contract.md §1): reading, validation and token-id rules.

Every mistake is a KvplanError naming the trace, the place and the fix, so that the CLI prints
one line and exits with code 2."""

from __future__ import annotations

from array import array
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from os import PathLike
from pathlib import Path
from typing import Any

from kvplan.errors import KvplanError
from kvplan.files import parse_json, read_input_text
from kvplan.parsing import FieldError
from kvplan.schema import Field, Record, check_document
from kvplan.semantics.engine.config import EngineConfig
from kvplan.semantics.engine.groups import GROUP_TYPE_OF_KIND, WINDOW_FIELDS, KVCacheGroup
from kvplan.semantics.engine.request import Request
from kvplan.semantics.engine.trace_format import GROUPS, SCHEDULER_SETTINGS, TOKENS_PER_ID, TRACE
from kvplan.semantics.kv.specs import MambaSpec
from kvplan.semantics.releases import release_named

PREFIX_TOKEN_BASE = 1_000_000_000
UNIQUE_TOKEN_BASE = 2_000_000_000
OUTPUT_TOKEN_BASE = 3_000_000_000

CONFIG_KEYS = {
    "num_gpu_blocks": int, "block_size": int, "enable_prefix_caching": bool,
    "max_num_batched_tokens": int, "max_num_seqs": int, "max_model_len": int,
    "enable_chunked_prefill": bool, "hash_algo": str, "hash_seed": str,
    "vllm_version": str, "scheduling": str,
}
# The release whose engine policies apply (`semantics/releases.py`), as a version string.
RELEASE_KEY = "vllm_version"
# docs/vllm/replay-hybrid.md §1: the KV cache groups sharing the pool, by type (`trace_format.GROUP`). A
# group's own `block_size` (a multiple of the trace's, as vLLM's page-size unification gives) is
# kvplan's addition: the contract's reference gives every group the trace's block size.
GROUPS_KEY = "kv_cache_groups"
CONFIG = Record({**SCHEDULER_SETTINGS, GROUPS_KEY: Field(GROUPS)})
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
    shown = str(path)
    hint = "a trace is one JSON object with 'config' and 'requests'"
    document = parse_json(read_input_text(path, shown), shown, hint)
    return parse_trace(document, overrides, source=shown)


def parse_trace(document: Any, overrides: Mapping[str, Any] | None = None, source: str = "trace") -> Trace:
    """A trace document, validated against `TRACE` (types and ranges), then against vLLM's rules."""
    check_document(TRACE, document, source)
    raw_config = document.get("config", {})
    merged = {**raw_config, **{k: v for k, v in (overrides or {}).items() if v is not None}}
    config = parse_config(merged, source)
    requests = tuple(_parse_request(raw, ordinal, config, source) for ordinal, raw in enumerate(document["requests"]))
    seen: set[str] = set()
    for request in requests:
        if request.request_id in seen:
            raise KvplanError(f"{source}: request id {request.request_id!r} appears twice; ids are unique")
        seen.add(request.request_id)
    return Trace(config, requests)


def parse_config(raw: Mapping[str, Any], source: str = "trace", *, groups: tuple[KVCacheGroup, ...] | None = None,
                 derived_block_size: int | None = None) -> EngineConfig:
    """The engine config of a trace's (or workload's) config keys, with the command line's values in
    place: each setting checked against its range, then vLLM's rules across settings. `groups` are KV
    cache groups already parsed (a plan's), in place of the raw list; `derived_block_size` is a block
    size vLLM derived itself (a Mamba hybrid's), allowed beside the sizes a user may choose."""
    if raw.get("num_gpu_blocks") is None:
        raise KvplanError(f"{source}: config needs num_gpu_blocks (the pool size including the null block), "
                          "in the trace or with --num-gpu-blocks")
    settings = {key: value for key, value in raw.items() if key in CONFIG_KEYS or key == GROUPS_KEY}
    checked = dict(settings)
    if derived_block_size is not None and checked.get("block_size") == derived_block_size:
        del checked["block_size"]   # vLLM's own choice, not one of the sizes a user may give
    try:
        CONFIG.check(checked, "config")
    except FieldError as error:
        raise KvplanError(f"{source}: {error}") from None
    # JSON's 12.0 is the integer 12
    typed: dict[str, Any] = {key: int(value) if CONFIG_KEYS.get(key) is int else value
                             for key, value in settings.items() if key not in (GROUPS_KEY, RELEASE_KEY)}
    if GROUPS_KEY in settings:
        typed[GROUPS_KEY] = parse_groups(settings[GROUPS_KEY], source)
    elif groups is not None:
        typed[GROUPS_KEY] = groups
    if RELEASE_KEY in settings:
        typed["release"] = release_named(settings[RELEASE_KEY])
    try:
        return EngineConfig(**typed)
    except KvplanError as error:
        raise KvplanError(f"{source}: config {error}") from None


def parse_groups(raw: list[dict[str, Any]], source: str) -> tuple[KVCacheGroup, ...]:
    """A validated `config.kv_cache_groups` list (`trace_format.GROUPS`) as the engine's groups:
    replay and simulate read a hybrid trace through this one function."""
    return tuple(_group(entry, f"{source}: config.{GROUPS_KEY}[{index}]") for index, entry in enumerate(raw))


def _group(raw: dict[str, Any], where: str) -> KVCacheGroup:
    """One group of a validated `kv_cache_groups` list (`trace_format.GROUP`)."""
    spec, block_size = GROUP_TYPE_OF_KIND[raw["type"]], raw.get("block_size")
    if spec is not MambaSpec:
        window = {key: raw[key] for key in WINDOW_FIELDS if key in raw}
        return KVCacheGroup(spec, **window, block_size=block_size)
    # The state shapes size the page only; they tell Mamba specs apart, as in vLLM.
    layout = f"{raw.get('mamba_type', 'mamba2')} conv {raw.get('conv_dim', 8)} ssm {raw.get('ssm_dim', 64)}"
    return KVCacheGroup(spec, mamba_cache_mode=raw.get("mamba_cache_mode"), block_size=block_size, layout=layout,
                        **_checkpoint_fields(raw, where))


def _checkpoint_fields(raw: dict[str, Any], where: str) -> dict[str, int]:
    """A Mamba group's prefill checkpoint keys (vLLM 0.33.0's MambaSpec fields of a Mamba-2 mixer or a
    gated delta net; without them the spec is a Mamba-1 mixer's); the alignment defaults to 1."""
    if "num_prefill_checkpoint_blocks" not in raw:
        if "prefill_checkpoint_alignment" in raw:
            raise KvplanError(f"{where}: prefill_checkpoint_alignment needs num_prefill_checkpoint_blocks (the "
                              "group's prefill checkpoint blocks, 1 for Mamba-2 and gated delta net layers)")
        return {}
    return {"num_prefill_checkpoint_blocks": raw["num_prefill_checkpoint_blocks"],
            "prefill_checkpoint_alignment": raw.get("prefill_checkpoint_alignment", 1)}


def _parse_request(raw: dict[str, Any], ordinal: int, config: EngineConfig, source: str) -> TraceRequest:
    """One request of a validated trace, checked against the trace's engine (vLLM's rules)."""
    request_id = raw["request_id"]
    where = f"{source}: requests[{ordinal}] ({request_id!r})"
    max_tokens = int(raw["max_tokens"])
    fields: dict[str, Any] = {}
    if "prompt_token_ids" in raw:
        given = [key for key in PREFIX_FIELDS if key in raw]
        if given:
            raise KvplanError(f"{where}: give either prompt_token_ids or {'/'.join(PREFIX_FIELDS)}, "
                              f"not both (found {', '.join(given)})")
        fields["prompt_token_ids"] = tuple(map(int, raw["prompt_token_ids"]))
    else:
        for key in PREFIX_FIELDS:
            fields[key] = int(raw.get(key, 0))
    if "output_token_ids" in raw:
        outputs = tuple(map(int, raw["output_token_ids"]))
        if len(outputs) < max_tokens:
            raise KvplanError(f"{where}: output_token_ids holds {len(outputs)} ids but max_tokens is "
                              f"{max_tokens}; list at least max_tokens ids")
        fields["output_token_ids"] = outputs
    elif min(max_tokens, config.max_model_len) > TOKENS_PER_ID:
        raise KvplanError(f"{where}: a request generates at most {TOKENS_PER_ID:,} tokens without "
                          "output_token_ids (the token-id rule gives each request a million ids)")
    request = TraceRequest(request_id, ordinal, int(raw.get("arrival_step", 0)), max_tokens, **fields)
    if request.prompt_len == 0:
        raise KvplanError(f"{where}: the prompt is empty; give prompt_token_ids or a positive "
                          "prefix_len/unique_len")
    if request.prompt_len >= config.max_model_len:
        raise KvplanError(f"{where}: the prompt ({request.prompt_len} tokens) must be shorter than "
                          f"max_model_len ({config.max_model_len}); shorten it or raise max_model_len")
    return request
