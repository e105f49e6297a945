"""Tiny factories for the semantics tests: a 3-layer Llama weight layout."""

from __future__ import annotations

from kvplan.semantics.weights import ParamGroup, QuantScheme, WeightEstimate, WeightLayout, estimate

LAYERS = (0, 1, 2)
BF16 = 2


def tiny_layout(*, kv_heads: int = 2, tied: bool = False, vocab: int = 1000) -> WeightLayout:
    """A 3-layer Llama: hidden 64, 4 heads of 16, intermediate 128."""
    kv_rows = kv_heads * 16
    groups = [
        ParamGroup("model.embed_tokens.weight", (vocab, 64), "Embedding"),
        ParamGroup("model.layers.{i}.self_attn.q_proj.weight", (64, 64), "Linear", layers=LAYERS),
        ParamGroup("model.layers.{i}.self_attn.k_proj.weight", (kv_rows, 64), "Linear", layers=LAYERS),
        ParamGroup("model.layers.{i}.self_attn.v_proj.weight", (kv_rows, 64), "Linear", layers=LAYERS),
        ParamGroup("model.layers.{i}.self_attn.o_proj.weight", (64, 64), "Linear", layers=LAYERS),
        ParamGroup("model.layers.{i}.mlp.gate_proj.weight", (128, 64), "Linear", layers=LAYERS),
        ParamGroup("model.layers.{i}.mlp.up_proj.weight", (128, 64), "Linear", layers=LAYERS),
        ParamGroup("model.layers.{i}.mlp.down_proj.weight", (64, 128), "Linear", layers=LAYERS),
        ParamGroup("model.layers.{i}.input_layernorm.weight", (64,), "LlamaRMSNorm", layers=LAYERS),
        ParamGroup("model.layers.{i}.post_attention_layernorm.weight", (64,), "LlamaRMSNorm", layers=LAYERS),
        ParamGroup("model.norm.weight", (64,), "LlamaRMSNorm"),
    ]
    if not tied:
        groups.append(ParamGroup("lm_head.weight", (vocab, 64), "Linear"))
    return WeightLayout("tiny", "LlamaForCausalLM", 3, vocab, 64, 4, kv_heads, tied, tuple(groups))


def bf16(layout: WeightLayout, tp: int = 1, pp: int = 1, scheme: QuantScheme = QuantScheme("none")) -> WeightEstimate:
    return estimate(layout, "bfloat16", tp, pp, scheme, "test")
