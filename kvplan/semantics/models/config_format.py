"""The fields of a model's config.json that kvplan reads, with the ranges a real model can have.

A config.json holds many keys kvplan never reads, so the record is open: only the keys below are
checked (at the root and in `text_config`), null standing for "not given" as transformers keeps it.
`kvplan.sources.models.resolve_config` checks every config against `MODEL_CONFIG` before any shape
is derived, so that zero heads, a NaN hidden size or a billion layers are one line naming the key,
not a division by zero, a ValueError or a hang."""

from __future__ import annotations

from typing import Any

from kvplan import limits
from kvplan.parsing import FieldError
from kvplan.schema import Checked, Either, Field, Integer, ListOf, Number, Record, Text
from kvplan.semantics.dtypes import DTYPE_SIZE, normalize_dtype

LAYERS = Integer(1, limits.MAX_LAYERS, "layers of the model")
WIDTH = Integer(1, limits.MAX_WIDTH)
HEADS = Integer(1, limits.MAX_HEADS)
LENGTH = Integer(1, limits.MAX_TOKENS, "tokens")
NAME = Text(max_length=256)
FACTOR = Number(0, 10**6, exclusive_minimum=True, description="rope scaling factor")
# transformers turns the name into a torch dtype (`getattr(torch, name)`) before vLLM reads it
CHECKPOINT_DTYPES = (*DTYPE_SIZE, "float64")


def _dtype_problem(value: str) -> str | None:
    if normalize_dtype(value) in CHECKPOINT_DTYPES:
        return None
    return f"{value!r} is not a torch dtype: expected one of {', '.join(CHECKPOINT_DTYPES)}"


DTYPE = Checked(Text(max_length=64), _dtype_problem, "the checkpoint's dtype, as torch names it",
                says="a torch dtype such as bfloat16")

ROPE_PARAMETERS = Record({
    "factor": Field(FACTOR, nullable=True),
    "original_max_position_embeddings": Field(LENGTH, nullable=True),
    "rope_type": Field(NAME, nullable=True),
    "type": Field(NAME, nullable=True),
}, open=True)

MODEL_FIELDS: dict[str, Field] = {
    "num_hidden_layers": Field(LAYERS, nullable=True),
    "hidden_size": Field(WIDTH, nullable=True),
    "intermediate_size": Field(Either((Integer(0, limits.MAX_WIDTH), ListOf(Integer(0, limits.MAX_WIDTH), 1,
                                                                             limits.MAX_LAYERS))), nullable=True),
    "moe_intermediate_size": Field(Integer(0, limits.MAX_WIDTH), nullable=True),
    "vocab_size": Field(WIDTH, nullable=True),
    "num_attention_heads": Field(HEADS, nullable=True),
    "num_key_value_heads": Field(HEADS, nullable=True),
    "head_dim": Field(HEADS, nullable=True),
    "max_position_embeddings": Field(LENGTH, nullable=True),
    "n_positions": Field(LENGTH, nullable=True),
    "max_seq_len": Field(LENGTH, nullable=True),
    "seq_length": Field(LENGTH, nullable=True),
    "model_max_length": Field(LENGTH, nullable=True),
    "max_target_positions": Field(LENGTH, nullable=True),
    "max_sequence_length": Field(LENGTH, nullable=True),
    "max_seq_length": Field(LENGTH, nullable=True),
    "seq_len": Field(LENGTH, nullable=True),
    "original_max_position_embeddings": Field(LENGTH, nullable=True),
    "sliding_window": Field(LENGTH, nullable=True),
    "sliding_window_pattern": Field(LAYERS, nullable=True),
    "max_window_layers": Field(Integer(0, limits.MAX_LAYERS), nullable=True),
    "full_attention_interval": Field(LAYERS, nullable=True),
    "attention_chunk_size": Field(LENGTH, nullable=True),
    "layer_types": Field(ListOf(NAME, 1, limits.MAX_LAYERS), nullable=True),
    "layers_block_type": Field(ListOf(NAME, 1, limits.MAX_LAYERS), nullable=True),
    "hybrid_override_pattern": Field(Text(max_length=limits.MAX_LAYERS), nullable=True),
    "kv_lora_rank": Field(HEADS, nullable=True),
    "qk_rope_head_dim": Field(HEADS, nullable=True),
    "qk_nope_head_dim": Field(HEADS, nullable=True),
    "v_head_dim": Field(HEADS, nullable=True),
    "num_nextn_predict_layers": Field(Integer(0, limits.MAX_LAYERS), nullable=True),
    "mamba_num_heads": Field(HEADS, nullable=True),
    "mamba_head_dim": Field(HEADS, nullable=True),
    "n_groups": Field(HEADS, nullable=True),
    "ssm_state_size": Field(HEADS, nullable=True),
    "conv_kernel": Field(HEADS, nullable=True),
    "chunk_size": Field(Integer(1, limits.MAX_TOKENS), nullable=True),
    "linear_conv_kernel_dim": Field(HEADS, nullable=True),
    "linear_key_head_dim": Field(HEADS, nullable=True),
    "linear_value_head_dim": Field(HEADS, nullable=True),
    "linear_num_key_heads": Field(HEADS, nullable=True),
    "linear_num_value_heads": Field(HEADS, nullable=True),
    "model_type": Field(NAME, nullable=True),
    "torch_dtype": Field(DTYPE, nullable=True),
    "dtype": Field(DTYPE, nullable=True),
    "architectures": Field(ListOf(NAME, 0, 64), nullable=True),
    "rope_scaling": Field(Record({}, open=True), nullable=True),
    "rope_parameters": Field(Record({}, open=True), nullable=True),
}
TEXT_CONFIG = Record(MODEL_FIELDS, open=True)
MODEL_CONFIG = Record({**MODEL_FIELDS, "text_config": Field(TEXT_CONFIG, nullable=True)}, open=True)


def rope_problem(config: dict[str, Any]) -> str | None:
    """What makes the rope-scaling block unusable (the block kvplan reads: rope_parameters, else
    rope_scaling; one set, or one per layer type), None when nothing does: every set typed, and a
    yarn set holding the original length the factor scales."""
    for root, prefix in ((config, ""), (config.get("text_config"), "text_config.")):
        if not isinstance(root, dict):
            continue
        for key in ("rope_parameters", "rope_scaling"):
            rope = root.get(key)
            if not isinstance(rope, dict) or not rope:
                continue
            nested = all(isinstance(value, dict) for value in rope.values())
            sets = rope.items() if nested else [("", rope)]
            for name, params in sets:
                path = f"{prefix}{key}" + (f".{name}" if name else "")
                try:
                    ROPE_PARAMETERS.check(params, path)
                except FieldError as error:
                    return str(error)
                kind = params.get("rope_type", params.get("type"))
                if kind == "yarn" and params.get("original_max_position_embeddings") is None:
                    return (f"{path}: a yarn rope scaling needs original_max_position_embeddings (the length "
                                  "the factor scales): add it from the model's genuine config")
            break
    return None
