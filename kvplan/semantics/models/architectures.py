"""Per-layer KV layout of the architectures kvplan knows, derived the way vLLM's model classes derive
it (vllm/model_executor/models/*.py), from a ConfigView of the (text) config and the release.

Sliding windows follow vLLM: a layer gets its own window when the model code passes one (llama's
and gemma's code read `layer_types`, gpt-oss's puts the window on even layers, Nemotron-H's on every
attention layer); otherwise the Attention layer falls back to CacheConfig.sliding_window, which
`Release.config_wide_window` decides (CONFIG_WIDE_WINDOW). That is why Mistral-7B-v0.1 and
Phi-3-mini get a window on every layer, and why Qwen2/Qwen3/Mixtral, whose code never reads
`layer_types`, get no window at all once `layer_types` mixes types."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

from kvplan.errors import ConfigRejected, KvplanError
from kvplan.semantics.models.config_fields import ConfigView, normalize_dtype
from kvplan.semantics.models.shape import HOOK_SSM_DTYPE, LayerShape, MambaState
from kvplan.semantics.releases import ConfigWideWindow, Release

Builder = Callable[[ConfigView, str, list[str], Release], tuple[LayerShape, ...]]

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


def _sliding_window(view: ConfigView) -> int | None:
    # Qwen2/Qwen3 config classes drop the window unless use_sliding_window is true
    if view.model_type in ("qwen2", "qwen3", "qwen3_moe") and not view.get("use_sliding_window"):
        return None
    return view.optional_integer("sliding_window")


def _layer_types(view: ConfigView, count: int) -> list[str] | None:
    """`layer_types` as the config class holds it: the file's list (its length is checked, or not, by
    `validation.check_config_classes`), else what the class fills in, else None."""
    given = view.raw.get("layer_types")
    if given is not None:
        if not isinstance(given, list) or not all(isinstance(kind, str) for kind in given):
            raise KvplanError(f"{view.where}: layer_types must be a list of strings such as \"full_attention\"")
        return list(given)
    if view.model_type in ("qwen2", "qwen3"):
        window, first = _sliding_window(view), view.integer("max_window_layers")
        return ["sliding_attention" if window is not None and i >= first else "full_attention" for i in range(count)]
    if view.model_type in ("gemma2", "gpt_oss"):
        return ["sliding_attention" if (i + 1) % 2 else "full_attention" for i in range(count)]
    if view.model_type == "gemma3_text":
        pattern = view.integer("sliding_window_pattern")
        return ["sliding_attention" if (i + 1) % pattern else "full_attention" for i in range(count)]
    return None


def _window_unless_interleaved(layer_types: list[str] | None) -> bool:
    return layer_types is None or len(set(layer_types)) <= 1


def _window_without_layer_types_or_all_sliding(layer_types: list[str] | None) -> bool:
    return layer_types is None or all(kind == "sliding_attention" for kind in layer_types)


# Release.config_wide_window -> whether CacheConfig.sliding_window takes the config's window, given
# the config class's layer_types (`EngineArgs.create_engine_config`)
CONFIG_WIDE_WINDOW: dict[ConfigWideWindow, Callable[[list[str] | None], bool]] = {
    "unless_interleaved": _window_unless_interleaved,
    "no_layer_types_or_all_sliding": _window_without_layer_types_or_all_sliding,
}


def cache_config_window(view: ConfigView, layer_types: list[str] | None, release: Release) -> int | None:
    """CacheConfig.sliding_window: the window of every attention layer whose code passes none."""
    return _sliding_window(view) if CONFIG_WIDE_WINDOW[release.config_wide_window](layer_types) else None


def _windowed_attention(view: ConfigView, prefix: str, warnings: list[str], release: Release, *,
                        reads_head_dim: bool = True, reads_layer_types: bool = True) -> tuple[LayerShape, ...]:
    """Llama-style decoders (llama, mistral, phi3, mixtral, qwen2/3, gemma2/3): a layer's own window
    where the model code reads `layer_types` (llama's and gemma's do), else the config-wide window."""
    count = view.integer("num_hidden_layers")
    kv, head, window = num_kv_heads(view), head_size(view, reads_head_dim=reads_head_dim), _sliding_window(view)
    layer_types = _layer_types(view, count)
    cache_window = cache_config_window(view, layer_types, release)
    layers = []
    for i in range(count):
        name = f"{prefix}model.layers.{i}.self_attn.attn"
        kind = layer_types[i] if reads_layer_types and layer_types is not None else "full_attention"
        if kind == "sliding_attention" and window:
            layers.append(attention_layer(i, name, kv, head, window, "layer_types: sliding_attention"))
        elif kind in ("full_attention", "sliding_attention"):
            note = "config-wide sliding_window (CacheConfig.sliding_window)" if cache_window else ""
            layers.append(attention_layer(i, name, kv, head, cache_window, note))
        else:
            layers.append(unsupported_layer(i, name, f"a {kind!r} layer", warnings))
    return tuple(layers)


def _qwen2_model(view: ConfigView, prefix: str, warnings: list[str], release: Release, *,
                 reads_head_dim: bool) -> tuple[LayerShape, ...]:
    """vLLM's Qwen2Model (Qwen2 and Qwen3): its code never reads layer_types, and it refuses a model
    whose layer_types mix types unless max_window_layers covers every layer."""
    count = view.integer("num_hidden_layers")
    layer_types = _layer_types(view, count)
    if layer_types is not None and len(set(layer_types)) > 1:
        first = view.integer("max_window_layers")
        if first != count:
            raise ConfigRejected(
                "Sliding window for some but all layers is not supported. This model uses sliding window but "
                f"`max_window_layers` = {first} is less than `num_hidden_layers` = {count}. Please open an issue "
                "to discuss this feature."
            )
    return _windowed_attention(view, prefix, warnings, release, reads_head_dim=reads_head_dim,
                               reads_layer_types=False)


def _qwen2(view: ConfigView, prefix: str, warnings: list[str], release: Release) -> tuple[LayerShape, ...]:
    # vLLM's Qwen2Attention computes hidden_size // num_heads and ignores a head_dim key
    return _qwen2_model(view, prefix, warnings, release, reads_head_dim=False)


def _qwen3(view: ConfigView, prefix: str, warnings: list[str], release: Release) -> tuple[LayerShape, ...]:
    return _qwen2_model(view, prefix, warnings, release, reads_head_dim=True)


def _ignores_layer_types(view: ConfigView, prefix: str, warnings: list[str], release: Release
                         ) -> tuple[LayerShape, ...]:
    """Qwen3-MoE and Mixtral: the model code never reads layer_types (no per-layer window)."""
    return _windowed_attention(view, prefix, warnings, release, reads_layer_types=False)


def _gpt_oss(view: ConfigView, prefix: str, warnings: list[str], release: Release) -> tuple[LayerShape, ...]:
    """vLLM's gpt-oss code puts the window on even layers and never reads layer_types; odd layers take
    the config-wide window (all of them, when layer_types has no sliding entry under 0.17.1)."""
    count = view.integer("num_hidden_layers")
    kv, head, window = num_kv_heads(view), head_size(view), view.optional_integer("sliding_window")
    cache_window = cache_config_window(view, _layer_types(view, count), release)
    return tuple(
        attention_layer(i, f"{prefix}model.layers.{i}.attn.attn", kv, head, window if i % 2 == 0 else cache_window,
                        "even layer: sliding window" if i % 2 == 0 else
                        "config-wide sliding_window (CacheConfig.sliding_window)" if cache_window else "")
        for i in range(count)
    )


def _mla(view: ConfigView, prefix: str, warnings: list[str], release: Release) -> tuple[LayerShape, ...]:
    # One latent of kv_lora_rank + qk_rope_head_dim per token, never split by TP. The MTP layers
    # (num_nextn_predict_layers) are built only for speculative decoding, so they hold no KV here.
    latent = view.integer("kv_lora_rank") + view.integer("qk_rope_head_dim")
    return tuple(
        LayerShape(index=i, name=f"{prefix}model.layers.{i}.self_attn.attn", kind="mla", num_kv_heads=1,
                   head_size=latent, head_size_v=latent, note="MLA latent: kv_lora_rank + qk_rope_head_dim")
        for i in range(view.integer("num_hidden_layers"))
    )


# DeepSeek V3.2's indexer keys are fp8 with one float32 scale per this many values
INDEXER_QUANT_BLOCK = 128


def _sparse_mla(view: ConfigView, prefix: str, warnings: list[str], release: Release) -> tuple[LayerShape, ...]:
    """DeepSeek V3.2: each layer's indexer keeps its own K cache (fp8 keys and their scales, as
    bytes), registered before the layer's MLA attention."""
    index_head = view.integer("index_head_dim")
    indexer_head = index_head + index_head // INDEXER_QUANT_BLOCK * 4
    layers = []
    for layer in _mla(view, prefix, warnings, release):
        layers.append(LayerShape(
            index=layer.index, name=f"{prefix}model.layers.{layer.index}.self_attn.indexer.k_cache", kind="indexer",
            num_kv_heads=1, head_size=indexer_head, head_size_v=indexer_head,
            note="sparse-attention indexer: fp8 keys + float32 scales, as bytes",
        ))
        layers.append(layer)
    return tuple(layers)


def _llama4(view: ConfigView, prefix: str, warnings: list[str], release: Release) -> tuple[LayerShape, ...]:
    """Llama-4: a layer with RoPE (no_rope_layers[i] == 1) is chunked local attention, the others
    (every `no_rope_layer_interval`-th by default) full attention; vLLM's code reads no_rope_layers,
    not layer_types."""
    count = view.integer("num_hidden_layers")
    kv, head = num_kv_heads(view), head_size(view)
    chunk = view.optional_integer("attention_chunk_size")
    rope_layers = view.get("no_rope_layers")
    if rope_layers is None:
        interval = view.integer("no_rope_layer_interval")
        rope_layers = [int((i + 1) % interval != 0) for i in range(count)]
    if not isinstance(rope_layers, list) or len(rope_layers) < count:
        raise KvplanError(f"{view.where}: no_rope_layers must list 0 or 1 for each of the {count} layers")
    layers = []
    for i in range(count):
        name = f"{prefix}model.layers.{i}.self_attn.attn"
        if rope_layers[i] and chunk:
            layers.append(LayerShape(index=i, name=name, kind="chunked_local", num_kv_heads=kv, head_size=head,
                                     head_size_v=head, attention_chunk_size=chunk, note="RoPE layer: chunked local"))
        else:
            layers.append(attention_layer(i, name, kv, head, None, "no-RoPE layer: full attention"))
    return tuple(layers)


def _gated_delta_net(view: ConfigView, prefix: str, warnings: list[str], release: Release
                     ) -> tuple[LayerShape, ...]:
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
    # the model reads layer_types[i] for its layers; entries beyond them are never read
    given_types = _layer_types(view, count)
    layer_types = given_types[:count] if given_types is not None else [
        "full_attention" if (i + 1) % interval == 0 else "linear_attention" for i in range(count)
    ]
    if len(layer_types) < count:
        raise KvplanError(f"{view.where}: layer_types has {len(layer_types)} entries for {count} layers: fix the "
                          "config")
    # vLLM's Qwen3.5 hook takes the text config's mamba_ssm_dtype for the temporal state
    ssm_dtype = normalize_dtype(view.get("mamba_ssm_dtype")) or "auto"
    state = MambaState(
        mamba_type="gdn_attention", conv_kernel=view.integer("linear_conv_kernel_dim"),
        linear_num_key_heads=view.integer("linear_num_key_heads"),
        linear_key_head_dim=view.integer("linear_key_head_dim"),
        linear_num_value_heads=view.integer("linear_num_value_heads"),
        linear_value_head_dim=view.integer("linear_value_head_dim"), ssm_dtype=ssm_dtype,
    )
    kv = num_kv_heads(view)
    # "head_dim": null -> hidden_size // the heads of one TP rank (Qwen3NextAttention's own fallback)
    per_rank_head = view.get("head_dim") is None
    head = head_size(view)
    layers = []
    for i, kind in enumerate(layer_types):
        if kind == "linear_attention":
            layers.append(LayerShape(index=i, name=f"{prefix}model.layers.{i}.linear_attn", kind="mamba",
                                     mamba=state, note="gated delta net"))
        elif kind == "full_attention":
            layer = attention_layer(i, f"{prefix}model.layers.{i}.self_attn.attn", kv, head, None)
            if per_rank_head:
                layer = replace(layer, head_size_from_rank_heads=True,
                                note="head_dim null: hidden_size // the heads of one TP rank")
            layers.append(layer)
        else:
            layers.append(unsupported_layer(i, f"{prefix}model.layers.{i}", f"a {kind!r} layer", warnings))
    return tuple(layers)


_NEMOTRON_KINDS = {
    "M": "mamba", "mamba": "mamba", "linear_attention": "mamba",
    "*": "attention", "attention": "attention", "full_attention": "attention",
    "-": "none", "mlp": "none", "E": "none", "moe": "none",
}


def _nemotron_h(view: ConfigView, prefix: str, warnings: list[str], release: Release) -> tuple[LayerShape, ...]:
    """One entry of hybrid_override_pattern per layer: M Mamba2, * attention, - MLP and E MoE (no cache).
    Attention layers pass the config's sliding_window as their own."""
    pattern = view.raw.get("hybrid_override_pattern")
    blocks = list(pattern) if isinstance(pattern, str) else list(view.get("layer_types") or [])
    if not blocks:
        raise KvplanError(f"{view.where} (nemotron_h) has no 'hybrid_override_pattern' (nor 'layers_block_type'), "
                          "which kvplan needs to size this model's KV cache: use the model's genuine config.json")
    if view.has("num_hidden_layers") and view.integer("num_hidden_layers") != len(blocks):
        raise KvplanError(f"{view.where}: num_hidden_layers is {view.integer('num_hidden_layers')} but the layer "
                          f"pattern has {len(blocks)} entries: fix the config")
    # vLLM's Nemotron-H hook keeps the ssm state in the config's mamba_ssm_cache_dtype, else its own default
    ssm_dtype = normalize_dtype(view.raw.get("mamba_ssm_cache_dtype")) or HOOK_SSM_DTYPE
    state = MambaState(
        mamba_type="mamba2", conv_kernel=view.integer("conv_kernel"), num_heads=view.integer("mamba_num_heads"),
        head_dim=view.integer("mamba_head_dim"), n_groups=view.integer("n_groups"),
        state_size=view.integer("ssm_state_size"), chunk_size=view.integer("chunk_size"), ssm_dtype=ssm_dtype,
    )
    kv = num_kv_heads(view)
    # the config class defaults head_dim to 128; an explicit null falls back to hidden / heads
    head = head_size(view)
    window = view.optional_integer("sliding_window")
    layers = []
    for i, block in enumerate(blocks):
        kind, base = _NEMOTRON_KINDS.get(block), f"{prefix}model.layers.{i}.mixer"
        if kind == "mamba":
            layers.append(LayerShape(index=i, name=base, kind="mamba", mamba=state, note="Mamba2 mixer"))
        elif kind == "attention":
            layers.append(attention_layer(i, f"{base}.attn", kv, head, window))
        elif kind == "none":
            layers.append(LayerShape(index=i, name=base, kind="none", note=f"{block!r}: no KV cache"))
        else:
            layers.append(unsupported_layer(i, base, f"a {block!r} block", warnings))
    return tuple(layers)


_LLAMA = Architecture(_windowed_attention, "llama", BASIC_KEYS)
_MLA_KEYS = (*BASIC_KEYS, "kv_lora_rank", "qk_rope_head_dim")
ARCHITECTURES: dict[str, Architecture] = {
    "LlamaForCausalLM": _LLAMA,
    "MistralForCausalLM": Architecture(_windowed_attention, "mistral", BASIC_KEYS),
    "MixtralForCausalLM": Architecture(_ignores_layer_types, "mixtral", BASIC_KEYS),
    "Phi3ForCausalLM": Architecture(_windowed_attention, "phi3", BASIC_KEYS),
    "Qwen2ForCausalLM": Architecture(_qwen2, "qwen2", BASIC_KEYS),
    "Qwen3ForCausalLM": Architecture(_qwen3, "qwen3", BASIC_KEYS),
    "Qwen3MoeForCausalLM": Architecture(_ignores_layer_types, "qwen3_moe", BASIC_KEYS),
    "Gemma2ForCausalLM": Architecture(_windowed_attention, "gemma2", BASIC_KEYS),
    # gemma-3's upstream text_config omits heads, head_dim, vocab and the pattern: class defaults
    "Gemma3ForCausalLM": Architecture(_windowed_attention, "gemma3_text", ("num_hidden_layers", "hidden_size")),
    "Gemma3ForConditionalGeneration": Architecture(
        _windowed_attention, "gemma3_text", ("num_hidden_layers", "hidden_size"), text_config=True),
    "GptOssForCausalLM": Architecture(_gpt_oss, "gpt_oss", BASIC_KEYS),
    "DeepseekV2ForCausalLM": Architecture(_mla, "deepseek_v2", _MLA_KEYS, use_mla=True),
    "DeepseekV3ForCausalLM": Architecture(_mla, "deepseek_v3", _MLA_KEYS, use_mla=True),
    "DeepseekV32ForCausalLM": Architecture(_sparse_mla, "deepseek_v32", (*_MLA_KEYS, "index_head_dim"),
                                           use_mla=True),
    "Llama4ForConditionalGeneration": Architecture(
        _llama4, "llama4_text", ("num_hidden_layers", "hidden_size", "num_attention_heads"), text_config=True),
    "Qwen3NextForCausalLM": Architecture(
        _gated_delta_net, "qwen3_next", (*BASIC_KEYS, *LINEAR_ATTENTION_KEYS[:-1]), is_hybrid=True),
    "Qwen3_5MoeForConditionalGeneration": Architecture(
        _gated_delta_net, "qwen3_5_moe_text", (*BASIC_KEYS, *LINEAR_ATTENTION_KEYS), text_config=True,
        is_hybrid=True),
    "Qwen3_5ForConditionalGeneration": Architecture(
        _gated_delta_net, "qwen3_5_text", (*BASIC_KEYS, *LINEAR_ATTENTION_KEYS), text_config=True, is_hybrid=True),
    "NemotronHForCausalLM": Architecture(
        _nemotron_h, "nemotron_h", ("hidden_size", "num_attention_heads", "vocab_size", *MAMBA2_KEYS),
        is_hybrid=True),
}
