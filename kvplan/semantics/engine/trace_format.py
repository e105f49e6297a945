"""The trace-replay format (docs/vllm/replay-contract.md §1), described once: the engine settings of a
trace's `config` (also a workload's `engine` and `kvplan replay`'s options take them; the scheduler's engine
arguments among them are `EngineArgs`' SCHEDULES ones), a request, and the whole trace.
`kvplan.semantics.engine.trace.parse_trace` validates every trace against `TRACE` before reading it;
docs/schemas/input/trace.json is `TRACE` published."""

from __future__ import annotations

from typing import get_args

from kvplan import limits
from kvplan.schema import Field, Integer, ListOf, Record, Tagged, Text
from kvplan.semantics.engine.args import POOL_BLOCKS, SCHEDULES, fixed_fields, in_order, named
from kvplan.semantics.engine.config import HASH_ALGOS
from kvplan.semantics.engine.groups import MAMBA_CACHE_MODES
from kvplan.semantics.kv.specs import GROUP_TYPES, KVCacheSpec, MambaSpec
from kvplan.semantics.releases import NEWEST_RELEASE, RELEASES, Scheduling

# the token-id rule gives each prefix and each request a million ids
TOKENS_PER_ID = 1_000_000
MAX_PREFIX_ID = 1_000_000
VLLM_VERSION = Text(choices=tuple(RELEASES), description="the vLLM release whose rules apply (default: the "
                    f"installed vllm's release when kvplan reproduces it, else {NEWEST_RELEASE.version})")
SCHEDULING_MODE = Text(choices=get_args(Scheduling), description="the engine loop: async (what `vllm serve` does) "
                                                                 "or sync (vLLM's --no-async-scheduling)")

# The scheduler's engine arguments a trace carries: `EngineArgs`' SCHEDULES role, in the order the trace
# schema has always listed them (only the order: a new SCHEDULES setting comes after these)
_SCHEDULED_ORDER = ("block_size", "enable_prefix_caching", "max_num_batched_tokens", "max_num_seqs", "max_model_len",
                    "enable_chunked_prefill")
SCHEDULED = in_order(named(SCHEDULES), _SCHEDULED_ORDER)

# a trace's `config`, a workload's `engine`, and the options of `kvplan replay` and `simulate`: the pool size,
# the scheduler's engine arguments as a trace fixes them (`fixed_fields`: a length, never "auto"), and the
# trace format's own keys
SCHEDULER_SETTINGS: dict[str, Field] = {
    "num_gpu_blocks": Field(POOL_BLOCKS),
    **fixed_fields(*SCHEDULED),
    "hash_algo": Field(Text(choices=HASH_ALGOS, description="vLLM's prefix-caching hash (hits are the same for all)")),
    "hash_seed": Field(Text(min_length=0, description="PYTHONHASHSEED of the hashing (any string)")),
    "vllm_version": Field(VLLM_VERSION),
    "scheduling": Field(SCHEDULING_MODE),
}

# docs/vllm/replay-hybrid.md §1: the KV cache groups sharing one pool, in group-id order
MAX_CHECKPOINT_BLOCKS = 1024
GROUP_BLOCK_SIZE = Field(Integer(1, limits.MAX_TOKENS, "the group's own block size, a multiple of the trace's "
                                                       "(vLLM's page-size unification)"))
WINDOW = Integer(1, limits.MAX_TOKENS, "tokens")
STATE_DIM = Integer(1, limits.MAX_WIDTH, "a Mamba state dimension")
# A group type's keys besides its `type` and its window field (required where the type has one):
# its block size, and a Mamba group's cache mode, state and prefill checkpoints.
TYPE_FIELDS: dict[type[KVCacheSpec], dict[str, Field]] = {
    MambaSpec: {"mamba_cache_mode": Field(Text(choices=MAMBA_CACHE_MODES)),
                "conv_dim": Field(STATE_DIM), "ssm_dim": Field(STATE_DIM),
                "mamba_type": Field(Text(description="tells Mamba layouts apart")),
                "block_size": GROUP_BLOCK_SIZE,
                "num_prefill_checkpoint_blocks": Field(Integer(0, MAX_CHECKPOINT_BLOCKS, "vLLM 0.33.0's prefill "
                                                               "checkpoint blocks (1 for Mamba-2 and gated delta "
                                                               "net layers)")),
                "prefill_checkpoint_alignment": Field(Integer(1, limits.MAX_TOKENS, "tokens between prefill "
                                                              "checkpoints (default 1)"))},
}


def _group_record(spec: type[KVCacheSpec]) -> Record:
    window = {spec.window_field: Field(WINDOW, required=True)} if spec.window_field else {}
    return Record({"type": Field(Text()), **window, **TYPE_FIELDS.get(spec, {"block_size": GROUP_BLOCK_SIZE})})


GROUP = Tagged("type", {spec.kind: _group_record(spec) for spec in GROUP_TYPES},
               description="one KV cache group: its attention type and what that type needs")
MAX_GROUPS = 1024
GROUPS = ListOf(GROUP, 1, MAX_GROUPS, "the KV cache groups sharing the pool, in group-id order")

TOKEN_ID = Integer(0, limits.MAX_TOKEN_ID, "a token id")
REQUEST_FIELDS: dict[str, Field] = {
    "request_id": Field(Text(), required=True, description="unique in the trace"),
    "arrival_step": Field(Integer(0, limits.MAX_STEPS, "the scheduler step the request arrives at")),
    "max_tokens": Field(Integer(1, limits.MAX_TOKENS, "tokens the request generates"), required=True),
    "prompt_token_ids": Field(ListOf(TOKEN_ID, 1, limits.MAX_TOKENS, "the prompt, as token ids")),
    "prefix_id": Field(Integer(0, MAX_PREFIX_ID, "which shared prefix the prompt starts with")),
    "prefix_len": Field(Integer(0, TOKENS_PER_ID, "tokens of the shared prefix")),
    "unique_len": Field(Integer(0, TOKENS_PER_ID, "tokens after the prefix, unique to the request")),
    "output_token_ids": Field(ListOf(TOKEN_ID, 1, limits.MAX_TOKENS, "the generated tokens, as token ids")),
}
REQUEST = Record(REQUEST_FIELDS, "one request: prompt_token_ids, or prefix_id/prefix_len/unique_len")

SCHEMA_KEY = {"$schema": Field(Text(max_length=limits.MAX_PATH, description="the JSON Schema of this file"))}
TRACE = Record({
    **SCHEMA_KEY,
    "config": Field(Record({**SCHEDULER_SETTINGS, "kv_cache_groups": Field(GROUPS)},
                           "the engine; command-line options replace these")),
    "requests": Field(ListOf(REQUEST, 0, limits.MAX_REQUESTS), required=True),
}, title="a kvplan trace: config and requests")
