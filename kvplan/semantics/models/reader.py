"""config.json -> ModelShape. The architectures kvplan knows are read without torch or transformers
(importing them costs seconds); others go through transformers' AutoConfig (`kvplan.measure.hf_config`),
whose config object `shape_from_hf_config` reads generically, with a warning."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvplan.errors import KvplanError
from kvplan.semantics.dtypes import normalize_dtype
from kvplan.semantics.models.architectures import ARCHITECTURES, Architecture, attention_layer, unsupported_layer
from kvplan.semantics.models.config_fields import ConfigView, config_dtype, rope_parameter_sets
from kvplan.semantics.models.maxlen import derive_max_model_len
from kvplan.semantics.models.shape import LayerShape, ModelShape
from kvplan.semantics.models.validation import check_config_classes
from kvplan.semantics.releases import NEWEST_RELEASE, Release


def architecture_of(config: Mapping[str, Any]) -> str:
    architectures = config.get("architectures")
    if isinstance(architectures, list) and architectures and isinstance(architectures[0], str):
        return architectures[0]
    return ""


class UnknownArchitecture(KvplanError):
    """An architecture kvplan does not read itself: transformers' AutoConfig must (layer 2)."""

    def __init__(self, architecture: str) -> None:
        super().__init__(f"{architecture or 'this architecture'} is not one kvplan reads without transformers")
        self.architecture = architecture


def shape_from_config(config: Mapping[str, Any], model_id: str, release: Release = NEWEST_RELEASE) -> ModelShape:
    """The ModelShape of an architecture kvplan knows, as `release` reads its config;
    `UnknownArchitecture` for any other."""
    architecture = architecture_of(config)
    known = ARCHITECTURES.get(architecture)
    if known is None:
        raise UnknownArchitecture(architecture)
    return _shape_light(config, model_id, architecture, known, release)


def _text_view(config: Mapping[str, Any], known: Architecture) -> ConfigView:
    if not known.text_config:
        return ConfigView.of(config, str(config.get("model_type") or known.model_type))
    text = config.get("text_config")
    if not isinstance(text, Mapping):
        raise KvplanError("config.json has no 'text_config', which this multimodal architecture keeps its "
                          "language model in: use the model's genuine config.json")
    return ConfigView.of(text, str(text.get("model_type") or known.model_type), "config.json text_config")


def _shape_light(config: Mapping[str, Any], model_id: str, architecture: str, known: Architecture,
                 release: Release) -> ModelShape:
    view = _text_view(config, known)
    check_config_classes(view, release)
    view.require(*known.required)
    warnings: list[str] = []
    prefix = "language_model." if known.text_config else ""
    layers = known.build(view, prefix, warnings, release)
    max_len, max_len_warning = derive_max_model_len(view.get, view.model_type, rope_parameter_sets(view))
    if max_len_warning:
        warnings.append(max_len_warning)
    attention = [layer for layer in layers if layer.kind in ("full", "sliding_window", "chunked_local", "mla")]
    tie = config["tie_word_embeddings"] if config.get("tie_word_embeddings") is not None else \
        view.get("tie_word_embeddings")
    return ModelShape(
        model_id=model_id,
        architecture=architecture,
        model_type=str(config.get("model_type") or known.model_type),
        config_dtype=config_dtype(config),
        num_hidden_layers=len({layer.index for layer in layers}),
        hidden_size=view.integer("hidden_size"),
        num_attention_heads=view.integer("num_attention_heads"),
        num_kv_heads=attention[0].num_kv_heads if attention else 0,
        head_size=attention[0].head_size if attention else 0,
        vocab_size=view.integer("vocab_size"),
        max_model_len=max_len,
        layers=layers,
        intermediate_size=view.optional_integer("intermediate_size") or 0,
        tie_word_embeddings=bool(tie),
        quantization=_quantization(config),
        use_mla=known.use_mla,
        qk_nope_head_dim=view.integer("qk_nope_head_dim") if known.use_mla else 0,
        mla_sparse=known.use_mla and view.get("index_topk") is not None,
        is_hybrid=known.is_hybrid,
        attention_chunk_size=view.optional_integer("attention_chunk_size"),
        warnings=tuple(warnings),
    )


def _quantization(config: Mapping[str, Any]) -> dict | None:
    quantization = config.get("quantization_config")
    return dict(quantization) if isinstance(quantization, Mapping) else None


def shape_from_hf_config(hf: Any, config: Mapping[str, Any], model_id: str, architecture: str) -> ModelShape:
    """A ModelShape from a config object of transformers (any object with its attributes), for the
    architectures kvplan does not know: fields read generically, Llama-convention layer names."""
    text = hf.get_text_config() if hasattr(hf, "get_text_config") else hf
    model_type = str(getattr(text, "model_type", "") or config.get("model_type") or "")
    warnings = [f"{architecture or model_type or 'this architecture'} is not one kvplan models: fields read "
                "generically through transformers' AutoConfig; layer names follow the Llama convention"]
    for key in ("num_hidden_layers", "hidden_size", "num_attention_heads"):
        if getattr(text, key, None) is None:
            raise KvplanError(f"config.json ({model_type}) has no {key!r}, which kvplan needs to size this "
                              "model's KV cache")
    layers = _generic_layers(text, warnings)
    rope = getattr(text, "rope_parameters", None) or getattr(text, "rope_scaling", None)
    view = ConfigView({"rope_parameters": rope} if isinstance(rope, Mapping) else {}, model_type)
    max_len, max_len_warning = derive_max_model_len(lambda key: getattr(text, key, None), model_type,
                                                    rope_parameter_sets(view))
    if max_len_warning:
        warnings.append(max_len_warning)
    attention = [layer for layer in layers if layer.kind != "unsupported"]
    dtype = getattr(hf, "dtype", None) or getattr(text, "dtype", None)
    return ModelShape(
        model_id=model_id, architecture=architecture, model_type=str(getattr(hf, "model_type", model_type)),
        config_dtype=normalize_dtype(dtype) if dtype is not None else config_dtype(config),
        num_hidden_layers=len(layers), hidden_size=int(text.hidden_size),
        num_attention_heads=int(text.num_attention_heads),
        num_kv_heads=attention[0].num_kv_heads if attention else 0,
        head_size=attention[0].head_size if attention else 0,
        vocab_size=int(getattr(text, "vocab_size", 0) or 0), max_model_len=max_len, layers=layers,
        intermediate_size=int(getattr(text, "intermediate_size", 0) or 0),
        tie_word_embeddings=bool(getattr(hf, "tie_word_embeddings", False)),
        quantization=_quantization(config), use_mla=any(layer.kind == "mla" for layer in layers),
        qk_nope_head_dim=int(getattr(text, "qk_nope_head_dim", 0) or 0),
        mla_sparse=getattr(text, "index_topk", None) is not None,
        attention_chunk_size=getattr(text, "attention_chunk_size", None), warnings=tuple(warnings),
    )


def _generic_layers(text: Any, warnings: list[str]) -> tuple[LayerShape, ...]:
    """Llama-convention layers from generic attributes: layer_types, sliding_window, kv_lora_rank."""
    count, heads = int(text.num_hidden_layers), int(text.num_attention_heads)
    kv = int(getattr(text, "num_key_value_heads", None) or heads)
    head = int(getattr(text, "head_dim", None) or int(text.hidden_size) // heads)
    window = getattr(text, "sliding_window", None)
    chunk = getattr(text, "attention_chunk_size", None)
    layer_types = list(getattr(text, "layer_types", None) or ["full_attention"] * count)
    interleaved = len(set(layer_types)) > 1
    kv_lora_rank, rope_dim = getattr(text, "kv_lora_rank", None), getattr(text, "qk_rope_head_dim", None)
    layers = []
    for i, kind in enumerate(layer_types[:count]):
        name = f"model.layers.{i}.self_attn.attn"
        if kv_lora_rank and rope_dim and kind == "full_attention":
            latent = int(kv_lora_rank) + int(rope_dim)
            layers.append(LayerShape(i, name, "mla", 1, latent, latent, note="kv_lora_rank + qk_rope_head_dim"))
        elif kind == "sliding_attention":
            layers.append(attention_layer(i, name, kv, head, window))
        elif kind == "full_attention":
            layers.append(attention_layer(i, name, kv, head, None if interleaved else window))
        elif kind == "chunked_attention" and chunk:
            layers.append(LayerShape(i, name, "chunked_local", kv, head, head, attention_chunk_size=int(chunk)))
        else:
            layers.append(unsupported_layer(i, name, f"a {kind!r} layer", warnings))
    return tuple(layers)
