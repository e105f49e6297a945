"""Per-layer KV layout of the architectures kvplan knows, derived the way vLLM 0.17.1's model classes
derive it (vllm/model_executor/models/*.py), from a ConfigView of the (text) config.

Sliding windows follow vLLM: a layer gets its own window when the model code passes one
(layer_types, gemma's pattern, gpt-oss's even layers); otherwise the Attention layer falls back to
CacheConfig.sliding_window, which is the config-wide `sliding_window` unless the model interleaves
window and full layers. That is why Mistral-7B-v0.1 and Phi-3-mini get a window on every layer."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvplan.errors import KvplanError
from kvplan.semantics.models.config_fields import ConfigView, normalize_dtype
from kvplan.semantics.models.shape import LayerShape, MambaState

Builder = Callable[[ConfigView, str, list[str]], tuple[LayerShape, ...]]

BASIC_KEYS = ("num_hidden_layers", "hidden_size", "num_attention_heads", "vocab_size")
LINEAR_ATTENTION_KEYS = (
    "linear_num_key_heads", "linear_num_value_heads", "linear_key_head_dim", "linear_value_head_dim", "head_dim",
)
MAMBA2_KEYS = ("mamba_num_heads", "mamba_head_dim", "n_groups", "ssm_state_size")


@dataclass(frozen=True)
class Architecture:
    build: Builder
    model_type: str                  # of the config that holds the layers, when the file omits it
    required: tuple[str, ...]
    text_config: bool = False        # layers live in `text_config` (multimodal wrappers)
    use_mla: bool = False
    is_hybrid: bool = False


def num_kv_heads(view: ConfigView) -> int:
    return view.integer("num_key_value_heads") if view.get("num_key_value_heads") is not None else \
        view.integer("num_attention_heads")


def head_size(view: ConfigView, *, reads_head_dim: bool = True) -> int:
    """Explicit head_dim wins where the vLLM class reads it; else hidden_size // num_attention_heads."""
    if reads_head_dim and view.get("head_dim") is not None:
        return view.integer("head_dim")
    return view.integer("hidden_size") // view.integer("num_attention_heads")


def attention_layer(index: int, name: str, kv_heads: int, head: int, window: int | None, note: str = "") -> LayerShape:
    return LayerShape(
        index=index, name=name, kind="sliding_window" if window else "full", num_kv_heads=kv_heads,
        head_size=head, head_size_v=head, sliding_window=window or None, note=note,
    )


def unsupported_layer(index: int, name: str, what: str, warnings: list[str]) -> LayerShape:
    warnings.append(f"layer {index} is {what}, which kvplan does not model: it is left out of the KV sizing")
    return LayerShape(index=index, name=name, kind="unsupported", note=what)


def _checked_layer_types(view: ConfigView, layer_types: list[str], count: int) -> list[str]:
    if len(layer_types) != count:
        raise KvplanError(
            f"{view.where}: layer_types has {len(layer_types)} entries for {count} layers: fix the config"
        )
    return layer_types


def _sliding_window(view: ConfigView) -> int | None:
    # Qwen2/Qwen3 config classes drop the window unless use_sliding_window is true
    if view.model_type in ("qwen2", "qwen3", "qwen3_moe") and not view.get("use_sliding_window"):
        return None
    return view.optional_integer("sliding_window")


def _completed_layer_types(view: ConfigView, count: int) -> list[str] | None:
    """layer_types as the transformers config class completes them when the file has none."""
    given = view.get("layer_types")
    if given is not None:
        return _checked_layer_types(view, list(given), count)
    if view.model_type in ("qwen2", "qwen3"):
        window, first = _sliding_window(view), view.integer("max_window_layers")
        return ["sliding_attention" if window is not None and i >= first else "full_attention" for i in range(count)]
    if view.model_type == "gemma2":
        return ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(count)]
    if view.model_type == "gemma3_text":
        pattern = view.integer("sliding_window_pattern")
        return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(count)]
    return None


def _windowed_attention(view: ConfigView, prefix: str, warnings: list[str], *, reads_head_dim: bool = True
                        ) -> tuple[LayerShape, ...]:
    """Llama-style decoders (llama, mistral, phi3, mixtral, qwen2/3, gemma2/3): a window per
    layer_types entry, else the config-wide window."""
    count = view.integer("num_hidden_layers")
    kv, head, window = num_kv_heads(view), head_size(view, reads_head_dim=reads_head_dim), _sliding_window(view)
    layer_types = _completed_layer_types(view, count)
    interleaved = layer_types is not None and len(set(layer_types)) > 1
    cache_window = None if interleaved else window
    layers = []
    for i in range(count):
        name = f"{prefix}model.layers.{i}.self_attn.attn"
        kind = layer_types[i] if layer_types is not None else "full_attention"
        if kind == "sliding_attention":
            layers.append(attention_layer(i, name, kv, head, window or cache_window, "layer_types: sliding_attention"))
        elif kind == "full_attention":
            note = "config-wide sliding_window (CacheConfig.sliding_window)" if cache_window else ""
            layers.append(attention_layer(i, name, kv, head, cache_window, note))
        else:
            layers.append(unsupported_layer(i, name, f"a {kind!r} layer", warnings))
    return tuple(layers)


def _qwen2(view: ConfigView, prefix: str, warnings: list[str]) -> tuple[LayerShape, ...]:
    # vLLM's Qwen2Attention computes hidden_size // num_heads and ignores a head_dim key
    return _windowed_attention(view, prefix, warnings, reads_head_dim=False)


def _gpt_oss(view: ConfigView, prefix: str, warnings: list[str]) -> tuple[LayerShape, ...]:
    count = view.integer("num_hidden_layers")
    kv, head, window = num_kv_heads(view), head_size(view), view.optional_integer("sliding_window")
    given = view.get("layer_types")
    even = ["sliding_attention" if i % 2 == 0 else "full_attention" for i in range(count)]
    if given is not None and list(given) != even:
        warnings.append("gpt-oss: vLLM 0.17.1 puts the sliding window on even layers and ignores layer_types")
    return tuple(
        attention_layer(i, f"{prefix}model.layers.{i}.attn.attn", kv, head, window if i % 2 == 0 else None,
                        "even layer: sliding window" if i % 2 == 0 else "")
        for i in range(count)
    )


def _mla(view: ConfigView, prefix: str, warnings: list[str]) -> tuple[LayerShape, ...]:
    # One latent of kv_lora_rank + qk_rope_head_dim per token, never split by TP. The MTP layers
    # (num_nextn_predict_layers) are built only for speculative decoding, so they hold no KV here.
    latent = view.integer("kv_lora_rank") + view.integer("qk_rope_head_dim")
    return tuple(
        LayerShape(index=i, name=f"{prefix}model.layers.{i}.self_attn.attn", kind="mla", num_kv_heads=1,
                   head_size=latent, head_size_v=latent, note="MLA latent: kv_lora_rank + qk_rope_head_dim")
        for i in range(view.integer("num_hidden_layers"))
    )


def _gated_delta_net(view: ConfigView, prefix: str, warnings: list[str]) -> tuple[LayerShape, ...]:
    """Qwen3-Next and Qwen3.5: linear_attention layers hold a gated-delta-net state."""
    count = view.integer("num_hidden_layers")
    if view.model_type == "qwen3_next":
        interval = 4  # vLLM's Qwen3NextConfig fills layer_types with a literal 4
        given = view.get("full_attention_interval")
        if view.get("layer_types") is None and given not in (None, 4):
            warnings.append(f"full_attention_interval is {given}, but vLLM 0.17.1 places full attention "
                            "on every 4th layer of Qwen3-Next")
    else:
        interval = view.integer("full_attention_interval") if view.get("full_attention_interval") else 4
    given_types = view.get("layer_types")
    layer_types = _checked_layer_types(view, list(given_types), count) if given_types is not None else [
        "full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(count)
    ]
    # vLLM's Qwen3.5 hook takes the text config's mamba_ssm_dtype for the temporal state
    ssm_dtype = normalize_dtype(view.get("mamba_ssm_dtype")) or "auto"
    state = MambaState(
        mamba_type="gdn_attention", conv_kernel=view.integer("linear_conv_kernel_dim"),
        linear_num_key_heads=view.integer("linear_num_key_heads"),
        linear_key_head_dim=view.integer("linear_key_head_dim"),
        linear_num_value_heads=view.integer("linear_num_value_heads"),
        linear_value_head_dim=view.integer("linear_value_head_dim"), ssm_dtype=ssm_dtype,
    )
    kv, head = num_kv_heads(view), head_size(view)
    layers = []
    for i, kind in enumerate(layer_types):
        if kind == "linear_attention":
            layers.append(LayerShape(index=i, name=f"{prefix}model.layers.{i}.linear_attn", kind="mamba",
                                     mamba=state, note="gated delta net"))
        elif kind == "full_attention":
            layers.append(attention_layer(i, f"{prefix}model.layers.{i}.self_attn.attn", kv, head, None))
        else:
            layers.append(unsupported_layer(i, f"{prefix}model.layers.{i}", f"a {kind!r} layer", warnings))
    return tuple(layers)


_NEMOTRON_KINDS = {
    "M": "mamba", "mamba": "mamba", "linear_attention": "mamba",
    "*": "attention", "attention": "attention", "full_attention": "attention",
    "-": "none", "mlp": "none", "E": "none", "moe": "none",
}


def _nemotron_h(view: ConfigView, prefix: str, warnings: list[str]) -> tuple[LayerShape, ...]:
    """One entry of hybrid_override_pattern per layer: M Mamba2, * attention, - MLP and E MoE (no cache)."""
    pattern = view.raw.get("hybrid_override_pattern")
    blocks = list(pattern) if isinstance(pattern, str) else list(view.get("layer_types") or [])
    if not blocks:
        raise KvplanError(f"{view.where} (nemotron_h) has no 'hybrid_override_pattern' (nor 'layers_block_type'), "
                          "which kvplan needs to size this model's KV cache: use the model's genuine config.json")
    if view.has("num_hidden_layers") and view.integer("num_hidden_layers") != len(blocks):
        raise KvplanError(f"{view.where}: num_hidden_layers is {view.integer('num_hidden_layers')} but the layer "
                          f"pattern has {len(blocks)} entries: fix the config")
    # vLLM's Nemotron-H hook keeps the ssm state in the config's mamba_ssm_cache_dtype, else float16
    ssm_dtype = normalize_dtype(view.raw.get("mamba_ssm_cache_dtype")) or "float16"
    state = MambaState(
        mamba_type="mamba2", conv_kernel=view.integer("conv_kernel"), num_heads=view.integer("mamba_num_heads"),
        head_dim=view.integer("mamba_head_dim"), n_groups=view.integer("n_groups"),
        state_size=view.integer("ssm_state_size"), chunk_size=view.integer("chunk_size"), ssm_dtype=ssm_dtype,
    )
    kv = num_kv_heads(view)
    head = view.integer("head_dim") if view.has("head_dim") else \
        view.integer("hidden_size") // view.integer("num_attention_heads")
    layers = []
    for i, block in enumerate(blocks):
        kind, base = _NEMOTRON_KINDS.get(block), f"{prefix}model.layers.{i}.mixer"
        if kind == "mamba":
            layers.append(LayerShape(index=i, name=base, kind="mamba", mamba=state, note="Mamba2 mixer"))
        elif kind == "attention":
            layers.append(attention_layer(i, f"{base}.attn", kv, head, None))
        elif kind == "none":
            layers.append(LayerShape(index=i, name=base, kind="none", note=f"{block!r}: no KV cache"))
        else:
            layers.append(unsupported_layer(i, base, f"a {block!r} block", warnings))
    return tuple(layers)


_LLAMA = Architecture(_windowed_attention, "llama", BASIC_KEYS)
ARCHITECTURES: dict[str, Architecture] = {
    "LlamaForCausalLM": _LLAMA,
    "MistralForCausalLM": Architecture(_windowed_attention, "mistral", BASIC_KEYS),
    "MixtralForCausalLM": Architecture(_windowed_attention, "mixtral", BASIC_KEYS),
    "Phi3ForCausalLM": Architecture(_windowed_attention, "phi3", BASIC_KEYS),
    "Qwen2ForCausalLM": Architecture(_qwen2, "qwen2", BASIC_KEYS),
    "Qwen3ForCausalLM": Architecture(_windowed_attention, "qwen3", BASIC_KEYS),
    "Qwen3MoeForCausalLM": Architecture(_windowed_attention, "qwen3_moe", BASIC_KEYS),
    "Gemma2ForCausalLM": Architecture(_windowed_attention, "gemma2", BASIC_KEYS),
    # gemma-3's upstream text_config omits heads, head_dim, vocab and the pattern: class defaults
    "Gemma3ForCausalLM": Architecture(_windowed_attention, "gemma3_text", ("num_hidden_layers", "hidden_size")),
    "Gemma3ForConditionalGeneration": Architecture(
        _windowed_attention, "gemma3_text", ("num_hidden_layers", "hidden_size"), text_config=True),
    "GptOssForCausalLM": Architecture(_gpt_oss, "gpt_oss", BASIC_KEYS),
    "DeepseekV2ForCausalLM": Architecture(
        _mla, "deepseek_v2", (*BASIC_KEYS, "kv_lora_rank", "qk_rope_head_dim"), use_mla=True),
    "DeepseekV3ForCausalLM": Architecture(
        _mla, "deepseek_v3", (*BASIC_KEYS, "kv_lora_rank", "qk_rope_head_dim"), use_mla=True),
    "Qwen3NextForCausalLM": Architecture(
        _gated_delta_net, "qwen3_next", (*BASIC_KEYS, *LINEAR_ATTENTION_KEYS), is_hybrid=True),
    "Qwen3_5MoeForConditionalGeneration": Architecture(
        _gated_delta_net, "qwen3_5_moe_text", (*BASIC_KEYS, *LINEAR_ATTENTION_KEYS), text_config=True,
        is_hybrid=True),
    "Qwen3_5ForConditionalGeneration": Architecture(
        _gated_delta_net, "qwen3_5_text", (*BASIC_KEYS, *LINEAR_ATTENTION_KEYS), text_config=True, is_hybrid=True),
    "NemotronHForCausalLM": Architecture(
        _nemotron_h, "nemotron_h", ("hidden_size", "num_attention_heads", "vocab_size", *MAMBA2_KEYS),
        is_hybrid=True),
}
