"""What kvplan needs to know about a model, read from its config: the contract between
`kvplan.semantics.models` (config reading) and `kvplan.kv` (specs and sizing). Values are totals for the
whole model; tensor and pipeline parallelism are applied later, when specs are built."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

LayerKind = Literal[
    "full",            # FullAttentionSpec
    "sliding_window",  # SlidingWindowSpec(sliding_window)
    "chunked_local",   # ChunkedLocalAttentionSpec(attention_chunk_size)
    "mla",             # MLAAttentionSpec: one latent of kv_lora_rank + qk_rope_head_dim
    "indexer",         # MLAAttentionSpec of bytes: DeepSeek V3.2's sparse-attention indexer K cache
    "mamba",           # MambaSpec (Mamba2 or gated delta net state)
    "none",            # a decoder layer holding no KV cache (MLP-only / MoE-only layers)
    "unsupported",     # a layer kind kvplan does not model; reported, never counted as full
]


@dataclass(frozen=True)
class MambaState:
    """Parameters of a Mamba-style state layer, before tensor parallelism.

    `mamba_type` is vLLM's: "mamba2" (Nemotron-H's MambaMixer2) or "gdn_attention"
    (Qwen3-Next's gated delta net). Fields that one type does not use stay 0."""

    mamba_type: Literal["mamba2", "gdn_attention"]
    conv_kernel: int
    # mamba2
    num_heads: int = 0
    head_dim: int = 0
    n_groups: int = 0
    state_size: int = 0
    chunk_size: int = 0
    # gated delta net
    linear_num_key_heads: int = 0
    linear_key_head_dim: int = 0
    linear_num_value_heads: int = 0
    linear_value_head_dim: int = 0
    # "auto" means the model dtype; HOOK_SSM_DTYPE the dtype vLLM's model hook picks, which differs
    # between releases (the release's `hook_ssm_cache_dtype`)
    conv_dtype: str = "auto"
    ssm_dtype: str = "auto"


# Nemotron-H's ssm state when its config names no mamba_ssm_cache_dtype: what vLLM's hook chooses
HOOK_SSM_DTYPE = "hook_default"


@dataclass(frozen=True)
class LayerShape:
    index: int
    name: str                   # vLLM's layer name, e.g. "model.layers.0.self_attn.attn"
    kind: LayerKind
    num_kv_heads: int = 0       # total KV heads before TP (1 for MLA)
    head_size: int = 0          # K head size (MLA: kv_lora_rank + qk_rope_head_dim)
    head_size_v: int = 0        # V head size (equals head_size unless the model says otherwise)
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    mamba: MambaState | None = None
    note: str = ""              # why the kind was chosen, or what is unsupported
    # the head size is hidden_size // the query heads of one TP rank (Qwen3-Next with "head_dim": null)
    head_size_from_rank_heads: bool = False


@dataclass(frozen=True)
class ModelShape:
    model_id: str
    architecture: str           # first entry of `architectures`
    model_type: str
    config_dtype: str | None    # torch_dtype / dtype of the (text) config, None when absent
    num_hidden_layers: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    head_size: int
    vocab_size: int
    max_model_len: int          # vLLM's derived default max_model_len
    layers: tuple[LayerShape, ...]
    intermediate_size: int = 0
    tie_word_embeddings: bool = False
    quantization: dict | None = None   # quantization_config as in the file
    use_mla: bool = False
    qk_nope_head_dim: int = 0          # MLA: vLLM's backend choice (and so block size) on Blackwell reads it
    mla_sparse: bool = False           # MLA with `index_topk` (DeepSeek V3.2): FlashMLA sparse, block 64
    is_hybrid: bool = False
    attention_chunk_size: int | None = None    # the config's (ModelConfig.attention_chunk_size)
    warnings: tuple[str, ...] = field(default_factory=tuple)

    @property
    def kv_layers(self) -> tuple[LayerShape, ...]:
        return tuple(layer for layer in self.layers if layer.kind not in ("none", "unsupported"))
