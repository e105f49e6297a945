"""A model's WeightLayout read from its config.json alone, for the dense decoders whose parameters
transformers lays out regularly (Llama, Mistral, Qwen2, Qwen3, Phi-3, Gemma 2, Gemma 3 text): the
groups, names, shapes, owning module classes, order and tie that a meta-device build of the
transformers class lists (`kvplan.measure.meta_build`), so that a local model of these architectures
is planned with its weights and without torch. The sizes are read as transformers' config classes
read them, their defaults included (`ConfigView`). MoE, MLA, hybrid and multimodal models, and any
model built from its own code, are left to the meta-device build."""

from __future__ import annotations

from dataclasses import dataclass

from kvplan.semantics.models.architectures import head_size, num_kv_heads
from kvplan.semantics.models.config_fields import ConfigView
from kvplan.semantics.models.config_file import ResolvedConfig
from kvplan.semantics.models.reader import architecture_of, shape_from_config
from kvplan.semantics.releases import NEWEST_RELEASE, Release
from kvplan.semantics.weights import ParamGroup, WeightLayout

TRANSFORMERS_LAYOUT = "5.24"    # the transformers release whose model classes these layouts follow
SOURCE = "config.json"


@dataclass(frozen=True)
class DenseDecoder:
    """How one transformers class lays out its parameters."""

    model_type: str
    norm: str                          # the class of every norm
    embedding: str = "Embedding"
    attention_bias: bool = False       # q/k/v/o biases when the config's `attention_bias` is true
    qkv_bias: bool = False             # q/k/v biases always, o_proj none (Qwen2)
    mlp_bias: bool = False             # gate/up/down biases when the config's `mlp_bias` is true
    qk_norm: bool = False              # per-head q_norm and k_norm after o_proj
    fused: bool = False                # qkv_proj and gate_up_proj (Phi-3)
    feedforward_norms: bool = False    # pre- and post-feedforward norms (Gemma)
    # "head_dim": null in the file means hidden_size // num_attention_heads only where the config
    # class fills it in; other classes would build with None and fail
    null_head_dim_derived: bool = False


DENSE_DECODERS: dict[str, DenseDecoder] = {
    "LlamaForCausalLM": DenseDecoder("llama", "LlamaRMSNorm", attention_bias=True, mlp_bias=True,
                                     null_head_dim_derived=True),
    "MistralForCausalLM": DenseDecoder("mistral", "MistralRMSNorm", null_head_dim_derived=True),
    "Qwen2ForCausalLM": DenseDecoder("qwen2", "Qwen2RMSNorm", qkv_bias=True),
    "Qwen3ForCausalLM": DenseDecoder("qwen3", "Qwen3RMSNorm", attention_bias=True, qk_norm=True),
    "Phi3ForCausalLM": DenseDecoder("phi3", "Phi3RMSNorm", fused=True),
    "Gemma2ForCausalLM": DenseDecoder("gemma2", "Gemma2RMSNorm", "Gemma2TextScaledWordEmbedding",
                                      attention_bias=True, feedforward_norms=True),
    "Gemma3ForCausalLM": DenseDecoder("gemma3_text", "Gemma3RMSNorm", "Gemma3TextScaledWordEmbedding",
                                      attention_bias=True, qk_norm=True, feedforward_norms=True),
}


def layout_from_config(resolved: ResolvedConfig, release: Release = NEWEST_RELEASE) -> WeightLayout | None:
    """The layout a meta-device build would give, or None where config.json alone cannot say it
    exactly (an architecture not in DENSE_DECODERS, a model_type other than its class's); `release`
    reads the config (its config classes' refusals)."""
    architecture = architecture_of(resolved.config)
    decoder = DENSE_DECODERS.get(architecture)
    if decoder is None or resolved.config.get("model_type") != decoder.model_type:
        return None
    view = ConfigView.of(resolved.config, decoder.model_type)
    if "head_dim" in view.raw and view.raw["head_dim"] is None and not decoder.null_head_dim_derived:
        return None
    shape = shape_from_config(resolved.config, resolved.model_id, release)
    tied = bool(view.get("tie_word_embeddings"))
    vocab, hidden = view.integer("vocab_size"), view.integer("hidden_size")
    groups = [ParamGroup("model.embed_tokens.weight", (vocab, hidden), decoder.embedding)]
    layers = tuple(range(view.integer("num_hidden_layers")))
    if layers:
        groups += [ParamGroup(f"model.layers.{{i}}.{name}", shape_, module, layers=layers)
                   for name, shape_, module in _decoder_layer(decoder, view)]
    groups.append(ParamGroup("model.norm.weight", (hidden,), decoder.norm))
    if not tied:
        groups.append(ParamGroup("lm_head.weight", (vocab, hidden), "Linear"))
    return WeightLayout(
        model_id=resolved.model_id,
        model_class=architecture,
        num_hidden_layers=shape.num_hidden_layers,
        vocab_size=shape.vocab_size,
        hidden_size=shape.hidden_size,
        num_attention_heads=shape.num_attention_heads,
        num_kv_heads=shape.num_kv_heads or shape.num_attention_heads,
        tie_word_embeddings=tied,
        groups=tuple(groups),
        expert_intermediate_size=int(view.get("moe_intermediate_size") or view.get("intermediate_size") or 0),
        built_with=f"{architecture} as transformers {TRANSFORMERS_LAYOUT} lays it out",
        config_sha256=resolved.sha256,
    )


Param = tuple[str, tuple[int, ...], str]    # (name inside the decoder layer, shape, module class)


def _linear(name: str, rows: int, cols: int, bias: bool) -> list[Param]:
    return [(f"{name}.weight", (rows, cols), "Linear"), *([(f"{name}.bias", (rows,), "Linear")] if bias else [])]


def _decoder_layer(decoder: DenseDecoder, view: ConfigView) -> list[Param]:
    """One decoder layer's parameters in the order its modules are registered."""
    hidden, intermediate = view.integer("hidden_size"), view.integer("intermediate_size")
    head = head_size(view)
    q_rows, kv_rows = view.integer("num_attention_heads") * head, num_kv_heads(view) * head
    attention_bias = decoder.attention_bias and bool(view.get("attention_bias", False))
    params: list[Param] = []
    if decoder.fused:
        params += _linear("self_attn.o_proj", hidden, q_rows, False)
        params += _linear("self_attn.qkv_proj", q_rows + 2 * kv_rows, hidden, False)
    else:
        qkv_bias = attention_bias or decoder.qkv_bias
        params += _linear("self_attn.q_proj", q_rows, hidden, qkv_bias)
        params += _linear("self_attn.k_proj", kv_rows, hidden, qkv_bias)
        params += _linear("self_attn.v_proj", kv_rows, hidden, qkv_bias)
        params += _linear("self_attn.o_proj", hidden, q_rows, attention_bias)
    if decoder.qk_norm:
        params += [(f"self_attn.{norm}.weight", (head,), decoder.norm) for norm in ("q_norm", "k_norm")]
    mlp_bias = decoder.mlp_bias and bool(view.get("mlp_bias", False))
    if decoder.fused:
        params += _linear("mlp.gate_up_proj", 2 * intermediate, hidden, False)
    else:
        params += _linear("mlp.gate_proj", intermediate, hidden, mlp_bias)
        params += _linear("mlp.up_proj", intermediate, hidden, mlp_bias)
    params += _linear("mlp.down_proj", hidden, intermediate, mlp_bias)
    norms = ["input_layernorm", "post_attention_layernorm"]
    if decoder.feedforward_norms:
        norms += ["pre_feedforward_layernorm", "post_feedforward_layernorm"]
    return params + [(f"{norm}.weight", (hidden,), decoder.norm) for norm in norms]
