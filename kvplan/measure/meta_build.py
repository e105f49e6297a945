"""Weight bytes of any model: the catalog's precomputed layout, else the layout a dense decoder's
config.json gives (`kvplan.semantics.weights_from_config`), else a Hugging Face model built on the
meta device (no memory, no weights) and described as a WeightLayout. Only the build needs the
`profile` extra, so a catalog model or a local Llama, Mistral, Qwen2/3, Phi-3 or Gemma imports no torch.

`torch.device("meta")` keeps tied embeddings tied, so they are counted once
(`accelerate.init_empty_weights` would untie them: docs/prediction.md §7, P8)."""

from __future__ import annotations

import re
from typing import Any

from kvplan.errors import KvplanError, require_profile_extra
from kvplan.measure.hf_config import config_directory, hf_config_from, model_shape
from kvplan.semantics.models.config_file import ResolvedConfig
from kvplan.semantics.models.reader import architecture_of
from kvplan.semantics.models.shape import ModelShape
from kvplan.semantics.weights import ParamGroup, WeightEstimate, WeightLayout, estimate, quant_scheme
from kvplan.semantics.weights_from_config import SOURCE, layout_from_config
from kvplan.sources.catalog import catalog_layouts
from kvplan.sources.installed import DEFAULT_RELEASE
from kvplan.sources.models import resolve_config

_REPEATED = re.compile(r"^(?P<prefix>.*?)\.(?P<stack>layers|blocks|h)\.(?P<index>\d+)\.(?P<rest>.+)$")


def build_layout(resolved: ResolvedConfig, *, trust_remote_code: bool = False) -> WeightLayout:
    architecture = architecture_of(resolved.config)
    require_profile_extra(f"counting the weights of {architecture or 'this model'} (a model outside kvplan's "
                          "catalog whose parameters config.json alone does not give)")
    import torch
    import transformers

    config_dir = config_directory(resolved)
    shape = model_shape(resolved.config, resolved.model_id, trust_remote_code=trust_remote_code,
                        config_dir=config_dir)
    hf_config = hf_config_from(resolved.config, architecture, trust_remote_code, config_dir)
    model_class = getattr(transformers, architecture, None)
    try:
        with torch.device("meta"):
            if model_class is not None and hasattr(model_class, "_from_config"):
                model = model_class._from_config(hf_config, dtype=torch.bfloat16)
            else:
                model = transformers.AutoModelForCausalLM.from_config(
                    hf_config, dtype=torch.bfloat16, trust_remote_code=trust_remote_code)
    except Exception as error:
        # a model class fails in its own way (a config it does not expect, its own code): one line
        raise KvplanError(f"transformers cannot build {architecture or 'this model'} to count its weights: "
                          f"{type(error).__name__}: {error}") from None
    text = hf_config.get_text_config() if hasattr(hf_config, "get_text_config") else hf_config
    mamba = next((layer.mamba for layer in shape.layers if layer.mamba and layer.mamba.mamba_type == "mamba2"), None)
    return WeightLayout(
        model_id=resolved.model_id,
        model_class=type(model).__name__,
        num_hidden_layers=shape.num_hidden_layers,
        vocab_size=shape.vocab_size,
        hidden_size=shape.hidden_size,
        num_attention_heads=shape.num_attention_heads,
        num_kv_heads=shape.num_kv_heads or shape.num_attention_heads,
        tie_word_embeddings=_ties_embeddings(model),
        groups=describe_parameters(model, torch.bfloat16),
        expert_intermediate_size=int(getattr(text, "moe_intermediate_size", None)
                                     or getattr(text, "intermediate_size", None) or 0),
        mamba_num_heads=mamba.num_heads if mamba else 0,
        mamba_head_dim=mamba.head_dim if mamba else 0,
        mamba_n_groups=mamba.n_groups if mamba else 0,
        mamba_state_size=mamba.state_size if mamba else 0,
        built_with=f"transformers {transformers.__version__}, torch {torch.__version__}",
        config_sha256=resolved.sha256,
    )


def _ties_embeddings(model: Any) -> bool:
    head, embeddings = model.get_output_embeddings(), model.get_input_embeddings()
    return head is not None and embeddings is not None and head.weight is embeddings.weight


def describe_parameters(model: Any, build_dtype: Any) -> tuple[ParamGroup, ...]:
    """Group parameters by name pattern and shape; `named_parameters` yields a tied weight once."""
    owners = {name: type(module).__name__ for name, module in model.named_modules()}
    found: dict[tuple[str, tuple[int, ...], str, str | None], tuple[list[int], list[int]]] = {}
    for name, param in model.named_parameters():
        pattern, layer = name, None
        match = _REPEATED.match(name)
        if match:
            outside_decoder = match["stack"] == "blocks" or any(
                part in match["prefix"] for part in ("vision", "visual", "audio"))
            placeholder = "{n}" if outside_decoder else "{i}"
            pattern = f"{match['prefix']}.{match['stack']}.{placeholder}.{match['rest']}"
            layer = None if outside_decoder else int(match["index"])
        fixed = None if param.dtype == build_dtype else str(param.dtype).removeprefix("torch.")
        key = (pattern, tuple(param.shape), owners.get(name.rpartition(".")[0], ""), fixed)
        layers, copies = found.setdefault(key, ([], []))
        (layers if layer is not None else copies).append(layer or 0)
    return tuple(
        ParamGroup(name=pattern, shape=shape, module=module, dtype=fixed, layers=tuple(layers),
                   copies=max(1, len(copies)))
        for (pattern, shape, module, fixed), (layers, copies) in found.items()
    )


def weights_for(
    model: ModelShape | ResolvedConfig, dtype: str, tensor_parallel_size: int = 1, pipeline_parallel_size: int = 1,
    *, trust_remote_code: bool = False, pp_layer_partition: str | None = None,
) -> WeightEstimate:
    """Weight bytes for `dtype` (float32 / float16 / bfloat16, already resolved from "auto"), per rank
    of each pipeline stage split as the KV layers are (`pp_layer_partition`: VLLM_PP_LAYER_PARTITION).
    The layout is the catalog's, else config.json's, else a meta-device build's (torch)."""
    resolved = model if isinstance(model, ResolvedConfig) else resolve_config(model.model_id)
    layout = catalog_layouts().get(resolved.sha256)
    source = "catalog: meta-device build, precomputed"
    # a model's own configuration code (--trust-remote-code) may read config.json its own way
    if layout is None and not (trust_remote_code and resolved.config.get("auto_map")):
        layout = layout_from_config(resolved, DEFAULT_RELEASE)
        source = SOURCE
    if layout is None:
        layout = build_layout(resolved, trust_remote_code=trust_remote_code)
        source = "meta-device build"
    return estimate(layout, dtype, tensor_parallel_size, pipeline_parallel_size, quant_scheme(resolved.config),
                    source, pp_layer_partition)
