"""One rank's shard of a model, as a transformers config of that shape: what vLLM's parallel layers
hold on one rank (attention and KV heads, MLP and expert intermediate sizes, Mamba heads and the
vocabulary split over tensor-parallel ranks; the decoder layers of its pipeline stage), so that the
fake backend runs the rank's own profile run on fake tensors.

    RankShard(tensor_parallel_size, layers, last_stage, vocab_size)
    shard_config(config, shard) -> config.json dict of the shard

Weights are not measured on the shard (a transformers model keeps its embeddings and lm_head on
every stage): `kvplan.semantics.weights` gives each rank's bytes by vLLM's sharding rules."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvplan.semantics.weights import VOCAB_PADDING
from kvplan.units import cdiv, round_up

# intermediate sizes vLLM's column-parallel MLPs and fused experts split over TP ranks
_INTERMEDIATE_KEYS = ("intermediate_size", "moe_intermediate_size", "shared_expert_intermediate_size",
                      "intermediate_size_mlp")
# per-layer lists cut to the stage's layers
_PER_LAYER_KEYS = ("layer_types", "no_rope_layers", "layers_block_type")


@dataclass(frozen=True)
class RankShard:
    tensor_parallel_size: int
    layers: range                 # the decoder layers of the rank's pipeline stage
    last_stage: bool              # the last stage runs the sampler
    vocab_size: int               # the whole vocabulary: the sampler sees gathered logits

    @property
    def whole(self) -> bool:
        """One rank holds the whole model."""
        return self.tensor_parallel_size == 1 and self.layers.start == 0 and self.last_stage


def _split(value: Any, tp: int) -> Any:
    return cdiv(value, tp) if isinstance(value, int) and not isinstance(value, bool) else value


def _shard_text(text: dict[str, Any], shard: RankShard) -> dict[str, Any]:
    tp, layers = shard.tensor_parallel_size, shard.layers
    out = dict(text)
    heads = text.get("num_attention_heads")
    if isinstance(heads, int) and heads:
        kv = text.get("num_key_value_heads") or heads
        out.update(num_attention_heads=max(1, heads // tp), num_key_value_heads=max(1, kv // tp))
        if "qk_rope_head_dim" not in text:
            # the head size stays: transformers would derive it from hidden_size / heads otherwise. An MLA
            # config (DeepSeek-V2/V3) derives its own from qk_rope_head_dim, which a head_dim would override
            out["head_dim"] = text.get("head_dim") or text["hidden_size"] // heads
    for key in _INTERMEDIATE_KEYS:
        if key in text:
            out[key] = _split(text[key], tp)
    if isinstance(text.get("vocab_size"), int):
        out["vocab_size"] = cdiv(round_up(text["vocab_size"], VOCAB_PADDING), tp)
        # special token ids point into the whole vocabulary, not into one rank's share of it
        for key in ("bos_token_id", "eos_token_id", "pad_token_id"):
            if key in out:
                out[key] = None
    for key in ("mamba_num_heads", "linear_num_key_heads", "linear_num_value_heads"):
        if key in text:
            out[key] = _split(text[key], tp)
    if isinstance(text.get("n_groups"), int):
        # MambaMixer2 replicates groups so that every rank's heads have theirs
        groups = text["n_groups"]
        out["n_groups"] = groups // tp if groups % tp == 0 else 1
    out["num_hidden_layers"] = len(layers)
    for key in _PER_LAYER_KEYS:
        if isinstance(text.get(key), list):
            out[key] = text[key][layers.start:layers.stop]
    if isinstance(text.get("hybrid_override_pattern"), str):
        out["hybrid_override_pattern"] = text["hybrid_override_pattern"][layers.start:layers.stop]
    if isinstance(text.get("first_k_dense_replace"), int):
        out["first_k_dense_replace"] = max(0, min(layers.stop, text["first_k_dense_replace"]) - layers.start)
    return out


def shard_config(config: dict[str, Any], shard: RankShard) -> dict[str, Any]:
    """The config.json of one rank's shard (the language model's part for a multimodal wrapper)."""
    if shard.whole:
        return config
    if isinstance(config.get("text_config"), dict):
        return {**config, "text_config": _shard_text(config["text_config"], shard)}
    return _shard_text(config, shard)
