"""Per-layer KV-cache specs of each pipeline stage, from a `ModelShape` and the serving settings,
as vLLM's workers report them (`GPUModelRunner.get_kv_cache_spec`; docs/vllm/kv-semantics.md §3, what
later releases change read from the settings' `Release`).

Public API:
    CacheSettings                                   -- the user's choices (CLI flags), frozen
    resolve_cache_layout(shape, settings) -> CacheLayout
        What `VllmConfig.__post_init__` settles before any spec exists: the attention block
        size (hybrid hook, then the MLA backend rule), KV dtype, prefix caching, Mamba cache
        mode, Mamba block size and page padding, with vLLM's log lines.
    build_worker_specs(shape, settings) -> list[dict[str, KVCacheSpec]]
        One dict per pipeline stage (layer name -> spec, model order); the TP ranks of a stage
        hold identical specs. Layers of kind "none" / "unsupported" hold no cache.
    mamba_state(state, tp, model_dtype, settings) -> (shapes, dtypes)   -- one Mamba layer's state"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kvplan.errors import ConfigRejected
from kvplan.semantics.config.cache import (
    MAMBA_PREFIX_CACHING_ARCHITECTURES,
    check_block_size,
    hybrid_alignment,
    hybrid_block_size,
    kernel_block_alignment,
    kv_cache_dtype,
    mla_block_size,
    resolve_mamba_cache_mode,
)
from kvplan.semantics.config.parallel import (
    PLAIN_KV_SPLIT_ARCHITECTURES,
    get_pp_indices,
    kv_heads_per_rank,
    verify_tensor_parallel,
)
from kvplan.semantics.kv.specs import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)
from kvplan.semantics.models.shape import HOOK_SSM_DTYPE, LayerShape, MambaState, ModelShape
from kvplan.semantics.releases import NEWEST_RELEASE, Release


@dataclass(frozen=True)
class CacheSettings:
    """The user's choices. `model_dtype` is already resolved (`resolve_model_dtype`) and
    `max_model_len` is the model's length as vLLM holds it (the derived one when auto-fitting);
    None means "left unset", for which vLLM's defaults apply."""

    max_model_len: int
    model_dtype: str = "bfloat16"
    block_size: int | None = None
    cache_dtype: str = "auto"
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    pp_layer_partition: str | None = None          # VLLM_PP_LAYER_PARTITION
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool = True
    mamba_cache_dtype: str = "auto"
    mamba_ssm_cache_dtype: str = "auto"
    mamba_cache_mode: Literal["none", "align", "all"] = "none"
    mamba_block_size: int | None = None
    gpu_capability: tuple[int, int] | None = None
    attention_backend: str | None = None
    release: Release = NEWEST_RELEASE


@dataclass(frozen=True)
class CacheLayout:
    block_size: int                  # attention block size every attention layer uses
    block_size_rule: str             # "default", "user", "hybrid" or the MLA backend that forced it
    cache_dtype: str                 # --kv-cache-dtype after model hooks (fp8 -> fp8_ds_mla for sparse MLA)
    kv_dtype: str                    # storage dtype of attention KV
    enable_prefix_caching: bool
    mamba_cache_mode: Literal["none", "align", "all"]
    mamba_block_size: int | None
    mamba_page_size_padded: int | None
    mla_backend: str | None = None   # the MLA backend whose block-size rule was checked (None: no GPU)
    logs: tuple[str, ...] = ()


def _mamba_dtypes(state: MambaState, model_dtype: str, settings: CacheSettings) -> tuple[str, str]:
    # the user's flag wins; else a model hook's choice (Nemotron-H: float16 ssm); else the model dtype
    conv = settings.mamba_cache_dtype if settings.mamba_cache_dtype != "auto" else state.conv_dtype
    conv = model_dtype if conv == "auto" else conv
    ssm = settings.mamba_ssm_cache_dtype if settings.mamba_ssm_cache_dtype != "auto" else state.ssm_dtype
    if ssm == HOOK_SSM_DTYPE:
        ssm = settings.release.hook_ssm_cache_dtype
    return conv, conv if ssm == "auto" else ssm


def _divide(numerator: int, denominator: int, what: str) -> int:
    if numerator % denominator:
        raise ConfigRejected(
            f"{numerator} is not divisible by {denominator} ({what} over tensor parallel size)"
        )
    return numerator // denominator


def mamba_state(
    state: MambaState, tp: int, model_dtype: str, settings: CacheSettings
) -> tuple[tuple[tuple[int, ...], ...], tuple[str, str]]:
    """`MambaStateShapeCalculator` per rank: (conv state, ssm state) shapes and their dtypes."""
    if state.mamba_type == "gdn_attention":
        conv_dim = (
            2 * state.linear_num_key_heads * state.linear_key_head_dim
            + state.linear_num_value_heads * state.linear_value_head_dim
        )
        shapes: tuple[tuple[int, ...], ...] = (
            (state.conv_kernel - 1, _divide(conv_dim, tp, "gated delta net conv dim")),
            (
                _divide(state.linear_num_value_heads, tp, "linear value heads"),
                state.linear_value_head_dim,
                state.linear_key_head_dim,
            ),
        )
    else:
        # groups are replicated so that every head shard has its own group
        groups = state.n_groups + (0 if state.n_groups % tp == 0 else tp - state.n_groups)
        conv_dim = state.num_heads * state.head_dim + 2 * groups * state.state_size
        shapes = (
            (state.conv_kernel - 1, _divide(conv_dim, tp, "mamba conv dim")),
            (_divide(state.num_heads, tp, "mamba heads"), state.head_dim, state.state_size),
        )
    return shapes, _mamba_dtypes(state, model_dtype, settings)


def _mamba_page(shapes: tuple[tuple[int, ...], ...], dtypes: tuple[str, str]) -> int:
    return MambaSpec(block_size=1, shapes=shapes, dtypes=dtypes).page_size_bytes


def _attention_page_per_token(shape: ModelShape, tp: int, kv_dtype: str) -> int:
    if shape.use_mla:
        return MLAAttentionSpec(
            block_size=1, num_kv_heads=1, head_size=shape.head_size, dtype=kv_dtype
        ).page_size_bytes
    return FullAttentionSpec(
        block_size=1, num_kv_heads=kv_heads_per_rank(shape.num_kv_heads, tp),
        head_size=shape.head_size, dtype=kv_dtype,
    ).page_size_bytes


def resolve_cache_layout(shape: ModelShape, settings: CacheSettings) -> CacheLayout:
    if settings.block_size is not None:
        check_block_size(settings.block_size)
    cache_dtype = settings.cache_dtype
    if shape.mla_sparse:
        # DeepSeek V3.2's hook: its fp8 cache is the packed 656-byte format
        if cache_dtype.startswith("fp8"):
            cache_dtype = "fp8_ds_mla"
        elif cache_dtype == "bfloat16":
            cache_dtype = "auto"
    kv_dtype = kv_cache_dtype(cache_dtype, settings.model_dtype)
    mambas = [layer.mamba for layer in shape.layers if layer.mamba is not None and layer.kind == "mamba"]
    # unset, prefix caching is on, and for Mamba hybrids what the release says (0.17.1: off)
    prefix_caching = settings.enable_prefix_caching
    if prefix_caching is None:
        prefix_caching = settings.release.prefix_caching_for_hybrids if shape.is_hybrid else True
    logs: list[str] = []
    block_size, rule = settings.block_size, "user"
    mode: Literal["none", "align", "all"] = "none"
    mamba_block_size, padded = None, None
    if shape.is_hybrid and mambas:
        mamba_mode = resolve_mamba_cache_mode(
            prefix_caching, shape.architecture in MAMBA_PREFIX_CACHING_ARCHITECTURES,
            settings.mamba_cache_mode, settings.enable_chunked_prefill, shape.architecture,
            release=settings.release,
        )
        mode = mamba_mode.mode
        logs.extend(mamba_mode.logs)
        shapes, dtypes = mamba_state(mambas[0], settings.tensor_parallel_size, settings.model_dtype, settings)
        hybrid = hybrid_block_size(
            _attention_page_per_token(shape, settings.tensor_parallel_size, kv_dtype),
            _mamba_page(shapes, dtypes),
            block_size=settings.block_size,
            mamba_cache_mode=mode,
            alignment=hybrid_alignment(
                kernel_block_alignment(
                    settings.gpu_capability, shape.head_size, shape.use_mla, settings.attention_backend
                ),
                settings.block_size, shape.use_mla, settings.release,
            ),
            max_model_len=settings.max_model_len,
            mamba_block_size=settings.mamba_block_size,
            mamba_chunk_size=mambas[0].chunk_size,
        )
        if hybrid.block_size != settings.block_size:
            rule = "hybrid"
        block_size, mamba_block_size = hybrid.block_size, hybrid.mamba_block_size
        padded = hybrid.mamba_page_size_padded
        logs.extend(hybrid.logs)
    if block_size is None:
        block_size, rule = settings.release.default_block_size, "default"
    mla_backend = None
    if shape.use_mla:
        choice = mla_block_size(
            settings.gpu_capability, None if rule == "default" else block_size, sparse=shape.mla_sparse,
            qk_nope_head_dim=shape.qk_nope_head_dim, backend=settings.attention_backend, cache_dtype=cache_dtype,
            release=settings.release,
        )
        mla_backend = choice.backend
        if choice.log is not None:
            block_size, rule = choice.block_size, choice.backend or rule
            logs.append(choice.log)
    return CacheLayout(
        block_size=block_size, block_size_rule=rule, cache_dtype=cache_dtype, kv_dtype=kv_dtype,
        enable_prefix_caching=prefix_caching, mamba_cache_mode=mode, mamba_block_size=mamba_block_size,
        mamba_page_size_padded=padded, mla_backend=mla_backend, logs=tuple(logs),
    )


def _layer_spec(
    layer: LayerShape, shape: ModelShape, settings: CacheSettings, layout: CacheLayout
) -> KVCacheSpec | None:
    tp = settings.tensor_parallel_size
    replicate = shape.architecture not in PLAIN_KV_SPLIT_ARCHITECTURES
    heads = kv_heads_per_rank(layer.num_kv_heads, tp, replicate)
    block, head, dtype = layout.block_size, layer.head_size, layout.kv_dtype
    if layer.head_size_from_rank_heads:
        head = shape.hidden_size // (shape.num_attention_heads // tp)
    if layer.kind == "full":
        head_size_v = head if layer.head_size_from_rank_heads else layer.head_size_v or layer.head_size
        return FullAttentionSpec(block, heads, head, dtype, head_size_v=head_size_v)
    if layer.kind == "sliding_window":
        assert layer.sliding_window is not None, layer
        return SlidingWindowSpec(block, heads, head, dtype, sliding_window=layer.sliding_window)
    if layer.kind == "chunked_local":
        assert layer.attention_chunk_size is not None, layer
        return ChunkedLocalAttentionSpec(block, heads, head, dtype, attention_chunk_size=layer.attention_chunk_size)
    if layer.kind == "mla":
        # the latent is not split: every rank stores all of it
        return MLAAttentionSpec(block, 1, head, dtype, cache_dtype_str=layout.cache_dtype)
    if layer.kind == "indexer":
        # fp8 keys and their scales, kept as bytes whatever the KV cache dtype; not split either
        return MLAAttentionSpec(block, 1, head, "uint8")
    if layer.kind == "mamba":
        assert layer.mamba is not None and layout.mamba_block_size is not None, layer
        shapes, dtypes = mamba_state(layer.mamba, tp, settings.model_dtype, settings)
        return MambaSpec(
            block_size=layout.mamba_block_size, shapes=shapes, dtypes=dtypes,
            page_size_padded=layout.mamba_page_size_padded, mamba_type=layer.mamba.mamba_type,
            mamba_cache_mode=layout.mamba_cache_mode,
        )
    return None  # "none" and "unsupported" layers hold no KV cache


def build_worker_specs(shape: ModelShape, settings: CacheSettings) -> list[dict[str, KVCacheSpec]]:
    verify_tensor_parallel(shape, settings.tensor_parallel_size)
    layout = resolve_cache_layout(shape, settings)
    workers = []
    for rank in range(settings.pipeline_parallel_size):
        start, end = get_pp_indices(
            shape.num_hidden_layers, rank, settings.pipeline_parallel_size, settings.pp_layer_partition
        )
        specs: dict[str, KVCacheSpec] = {}
        for layer in shape.layers:
            spec = _layer_spec(layer, shape, settings, layout) if start <= layer.index < end else None
            if spec is not None:
                specs[layer.name] = spec
        workers.append(specs)
    return workers
