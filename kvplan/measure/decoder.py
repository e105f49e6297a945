"""The dense decoders of kvplan's catalog (Llama, Mistral, Qwen2, Qwen3) built from config.json
without transformers, for the fake backend: importing transformers' modeling code takes seconds,
the profile run itself a fraction of one.

What the live-tensor tracker measures is which tensors exist when, so each module here holds the
parameters and buffers of transformers 5.24's class of the same name, and its forward makes the
same tensors in the same order and lets them go at the same moments as that class's forward (with
kvplan's flash-like attention, under `no_grad`). tests/measure/test_decoder.py compares the two
allocation by allocation; any config this module cannot promise that for (`dense_decoder_for` returns
None) is built by transformers instead."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import torch
from torch import nn

from kvplan.measure.attention import flashlike_attention_forward
from kvplan.semantics.models.config_fields import ConfigView, rope_parameter_sets

# architecture -> (model_type, q/k/v bias, per-head q/k norms); the other switches come from the config
ARCHITECTURES: dict[str, tuple[str, bool, bool]] = {
    "LlamaForCausalLM": ("llama", False, False),
    "MistralForCausalLM": ("mistral", False, False),
    "Qwen2ForCausalLM": ("qwen2", True, False),
    "Qwen3ForCausalLM": ("qwen3", False, True),
}
# rope types whose forward is the default one (their parameters only change inv_freq and the scaling)
_PLAIN_ROPE = ("default", "linear", "llama3", "yarn")
_EPS_DEFAULT = {"llama": 1e-6, "mistral": 1e-6, "qwen2": 1e-6, "qwen3": 1e-6}


class DecoderConfig:
    """The fields of a dense decoder's config.json, with the class defaults of transformers 5.24."""

    def __init__(self, config: Mapping[str, Any], architecture: str) -> None:
        model_type, qkv_bias, qk_norm = ARCHITECTURES[architecture]
        view = ConfigView.of(config, model_type)
        self.architecture = architecture
        self.model_type = model_type
        self.hidden_size = view.integer("hidden_size")
        self.intermediate_size = view.integer("intermediate_size")
        self.num_hidden_layers = view.integer("num_hidden_layers")
        self.num_attention_heads = view.integer("num_attention_heads")
        kv_heads = view.get("num_key_value_heads")
        self.num_key_value_heads = self.num_attention_heads if kv_heads is None else int(kv_heads)
        head_dim = view.get("head_dim")
        self.head_dim = int(head_dim) if head_dim else self.hidden_size // self.num_attention_heads
        self.vocab_size = view.integer("vocab_size")
        self.tie_word_embeddings = bool(view.get("tie_word_embeddings"))
        attention_bias = bool(config.get("attention_bias", False))
        self.qkv_bias = qkv_bias or attention_bias
        self.o_bias = attention_bias and model_type == "llama"
        self.mlp_bias = bool(config.get("mlp_bias", False)) and model_type == "llama"
        self.qk_norm = qk_norm
        self.rms_norm_eps = float(config.get("rms_norm_eps", _EPS_DEFAULT[model_type]))
        self.hidden_act = config.get("hidden_act", "silu")
        rope = rope_parameter_sets(view)
        self.rope_type = rope[0]["rope_type"] if rope else "default"
        self.rope_factor = float(rope[0].get("factor", 1.0)) if rope else 1.0
        self.partial_rotary_factor = float(config.get("partial_rotary_factor", 1.0))
        # Mistral's mask builder takes the sliding-window path whenever the config has a window
        self.sliding_window = view.get("sliding_window") if model_type == "mistral" else None
        self.use_sliding_window = bool(config.get("use_sliding_window", False))

    @property
    def supported(self) -> bool:
        return (self.hidden_act == "silu" and self.rope_type in _PLAIN_ROPE and self.partial_rotary_factor == 1.0
                and not self.use_sliding_window)


def dense_decoder_for(config: Mapping[str, Any]) -> DecoderConfig | None:
    """The decoder this module builds for `config`, or None (transformers builds it)."""
    architectures = config.get("architectures") or []
    architecture = architectures[0] if architectures else None
    if architecture not in ARCHITECTURES or config.get("quantization_config") or config.get("auto_map"):
        return None
    try:
        decoder = DecoderConfig(config, architecture)
    except (ValueError, TypeError, KeyError):
        return None
    return decoder if decoder.supported else None


class Linear(nn.Module):
    """nn.Linear's parameters and forward without its initialisation: on the meta device that alone
    imports torch's compiler (torch._dynamo, seconds)."""

    def __init__(self, in_features: int, out_features: int, bias: bool) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(out_features, in_features))
        self.bias = nn.Parameter(torch.empty(out_features)) if bias else None

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return nn.functional.linear(hidden_states, self.weight, self.bias)


class Embedding(nn.Module):
    def __init__(self, num_embeddings: int, embedding_dim: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(num_embeddings, embedding_dim))

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return nn.functional.embedding(input_ids, self.weight)


def rms_norm(hidden_states: torch.Tensor, weight: torch.Tensor, eps: float) -> torch.Tensor:
    """In float32, back to the input dtype, then scaled (the float32 copy is dropped as soon as it is
    replaced, the variance when the function returns)."""
    dtype = hidden_states.dtype
    hidden_states = hidden_states.to(torch.float32)
    variance = hidden_states.pow(2).mean(-1, keepdim=True)
    hidden_states = hidden_states * torch.rsqrt(variance + eps)
    return weight * hidden_states.to(dtype)


class RMSNorm(nn.Module):
    def __init__(self, size: int, eps: float) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.empty(size))
        self.eps = eps

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return rms_norm(hidden_states, self.weight, self.eps)


class RotaryEmbedding(nn.Module):
    """cos and sin of every position, in the activations' dtype. Its buffers are transformers': the
    float32 inverse frequencies and a copy of them (their values do not matter on the meta device, and
    computing them there would import torch's compiler)."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        frequencies = len(range(0, config.head_dim, 2))
        self.inv_freq = nn.Buffer(torch.empty(frequencies, dtype=torch.float32), persistent=False)
        self.original_inv_freq = nn.Buffer(torch.empty(frequencies, dtype=torch.float32), persistent=False)
        self.attention_scaling = 1.0

    def forward(self, hidden_states: torch.Tensor, position_ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        frequencies = position_ids[..., None].float() * self.inv_freq.to(device=hidden_states.device,
                                                                         dtype=torch.float)
        angles = torch.cat((frequencies, frequencies), dim=-1)
        cos = angles.cos() * self.attention_scaling
        sin = angles.sin() * self.attention_scaling
        return cos.to(dtype=hidden_states.dtype), sin.to(dtype=hidden_states.dtype)


def _half_rotation(states: torch.Tensor) -> torch.Tensor:
    half = states.shape[-1] // 2
    return torch.cat((-states[..., half:], states[..., :half]), dim=-1)


def _rotated(states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    # the cos product first: its temporary is alive while the rotated half is made
    return (states * cos) + (_half_rotation(states) * sin)


class Attention(nn.Module):
    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.head_dim = config.head_dim
        self.scaling = config.head_dim**-0.5
        self.is_causal = True
        q_size, kv_size = config.num_attention_heads * config.head_dim, config.num_key_value_heads * config.head_dim
        self.q_proj = Linear(config.hidden_size, q_size, bias=config.qkv_bias)
        self.k_proj = Linear(config.hidden_size, kv_size, bias=config.qkv_bias)
        self.v_proj = Linear(config.hidden_size, kv_size, bias=config.qkv_bias)
        self.o_proj = Linear(q_size, config.hidden_size, bias=config.o_bias)
        if config.qk_norm:
            self.q_norm = RMSNorm(config.head_dim, config.rms_norm_eps)
            self.k_norm = RMSNorm(config.head_dim, config.rms_norm_eps)
        self.qk_norm = config.qk_norm

    def forward(self, hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        tokens = hidden_states.shape[:-1]
        per_head = (*tokens, -1, self.head_dim)
        if self.qk_norm:
            query = self.q_norm(self.q_proj(hidden_states).view(per_head)).transpose(1, 2)
            key = self.k_norm(self.k_proj(hidden_states).view(per_head)).transpose(1, 2)
        else:
            query = self.q_proj(hidden_states).view(per_head).transpose(1, 2)
            key = self.k_proj(hidden_states).view(per_head).transpose(1, 2)
        value = self.v_proj(hidden_states).view(per_head).transpose(1, 2)
        cos, sin = cos.unsqueeze(1), sin.unsqueeze(1)
        query, key = _rotated(query, cos, sin), _rotated(key, cos, sin)
        output, _ = flashlike_attention_forward(self, query, key, value, None, scaling=self.scaling)
        output = output.reshape(*tokens, -1).contiguous()
        return self.o_proj(output)


class MLP(nn.Module):
    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.gate_proj = Linear(config.hidden_size, config.intermediate_size, bias=config.mlp_bias)
        self.up_proj = Linear(config.hidden_size, config.intermediate_size, bias=config.mlp_bias)
        self.down_proj = Linear(config.intermediate_size, config.hidden_size, bias=config.mlp_bias)

    def forward(self, hidden_states: torch.Tensor) -> torch.Tensor:
        # one expression: the activation and the up projection die as soon as their product exists
        return self.down_proj(
            nn.functional.silu(self.gate_proj(hidden_states)) * self.up_proj(hidden_states))


class DecoderLayer(nn.Module):
    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.self_attn = Attention(config)
        self.mlp = MLP(config)
        self.input_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.post_attention_layernorm = RMSNorm(config.hidden_size, config.rms_norm_eps)

    def forward(self, hidden_states: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
        residual = hidden_states
        hidden_states = self.self_attn(self.input_layernorm(hidden_states), cos, sin)
        hidden_states = residual + hidden_states
        residual = hidden_states
        hidden_states = self.mlp(self.post_attention_layernorm(hidden_states))
        return residual + hidden_states


def _packed_sequence_probe(position_ids: torch.Tensor) -> None:
    """transformers' mask builder looks for packed sequences in the positions (under fake tensors it
    cannot tell there are none): these temporaries exist, and are gone before the layers run."""
    first = position_ids[:, :1] - 1
    steps = torch.diff(position_ids, prepend=first, dim=-1)
    (steps != 1).cumsum(-1)


class DecoderModel(nn.Module):
    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.embed_tokens = Embedding(config.vocab_size, config.hidden_size)
        self.layers = nn.ModuleList([DecoderLayer(config) for _ in range(config.num_hidden_layers)])
        self.norm = RMSNorm(config.hidden_size, config.rms_norm_eps)
        self.rotary_emb = RotaryEmbedding(config)
        # Every layer after the first sees the same live tensors (the embeddings, its input, cos and
        # sin) and allocates the same sizes; the first takes the embeddings themselves as its input.
        # So a forward through two layers has the peak, and leaves the live tensors, of one through
        # all of them: the fake backend, which only counts bytes, runs two (16x fewer meta kernels).
        self.run_two_layers = False

    def forward(self, input_ids: torch.Tensor, use_cache: bool = False) -> tuple[torch.Tensor]:
        embeddings = self.embed_tokens(input_ids)   # held until the forward returns, as transformers does
        position_ids = (torch.arange(embeddings.shape[1], device=embeddings.device) + 0).unsqueeze(0)
        _packed_sequence_probe(position_ids)
        hidden_states = embeddings
        cos, sin = self.rotary_emb(hidden_states, position_ids)
        for layer in self.layers[:2] if self.run_two_layers else self.layers:
            hidden_states = layer(hidden_states, cos, sin)
        return (self.norm(hidden_states),)


class DecoderForCausalLM(nn.Module):
    """`model` (the decoder stack) and `lm_head`, tied to the embeddings when the config says so."""

    def __init__(self, config: DecoderConfig) -> None:
        super().__init__()
        self.model = DecoderModel(config)
        self.lm_head = Linear(config.hidden_size, config.vocab_size, bias=False)
        if config.tie_word_embeddings:
            self.lm_head.weight = self.model.embed_tokens.weight

    @property
    def base_model(self) -> nn.Module:
        return self.model

    def get_output_embeddings(self) -> nn.Module:
        return self.lm_head

    def get_input_embeddings(self) -> nn.Module:
        return self.model.embed_tokens


def build_decoder(decoder: DecoderConfig, dtype: torch.dtype) -> DecoderForCausalLM:
    """The model on the meta device: exact shapes and dtypes, no memory."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(dtype)
    try:
        with torch.device("meta"):
            model = DecoderForCausalLM(decoder)
    finally:
        torch.set_default_dtype(previous)
    return model.eval().requires_grad_(False)
