"""How attention backends lay out one layer's KV cache (vLLM 0.17.1's `get_kv_cache_shape` and
`prepare_kernel_block_sizes`), as pure arithmetic: shapes, kernel block sizes and each layer's
spec in a pool. The tensors themselves are allocated in `kvplan.measure.kv_tensors`.

    ATTENTION_BACKENDS
    kv_cache_shape(backend, num_blocks, block_size, num_kv_heads, head_size) -> shape
    kernel_block_size(backend, block_size) -> int
    mla_row_width(spec) -> elements one MLA token's row holds
    view_shape(spec, num_blocks, backend="flash_attn") -> a layer's logical shape (None for Mamba)
    specs_by_layer(config) -> {layer name: spec}"""

from __future__ import annotations

from typing import Literal

from kvplan.errors import KvplanError
from kvplan.semantics.dtypes import dtype_size
from kvplan.semantics.kv.specs import (
    AttentionSpec,
    GroupSpec,
    KVCacheConfig,
    KVCacheSpec,
    MLAAttentionSpec,
    UniformTypeKVCacheSpecs,
)

ATTENTION_BACKENDS = ("flash_attn", "flashinfer", "triton", "flex", "cpu")
AttentionBackend = Literal["flash_attn", "flashinfer", "triton", "flex", "cpu"]
# where K/V sits in each backend's logical shape: (2, blocks, ...), (blocks, 2, ...), or CPU's
# (2, blocks, heads, block_size, head)
KV_FIRST = ("flash_attn", "flex")
BLOCK_FIRST = ("flashinfer", "triton")
# FlashInfer kernels take these block sizes; a larger manager block is split into kernel blocks
_FLASHINFER_KERNEL_BLOCKS = (64, 32, 16)


def check_backend(backend: str) -> None:
    if backend not in ATTENTION_BACKENDS:
        raise KvplanError(f"unknown attention backend {backend!r}; choose one of {', '.join(ATTENTION_BACKENDS)}")


def kv_cache_shape(
    backend: str, num_blocks: int, block_size: int, num_kv_heads: int, head_size: int
) -> tuple[int, ...]:
    """`AttentionBackend.get_kv_cache_shape` of vLLM 0.17.1 (NHD layout, the default)."""
    if backend in KV_FIRST:
        return (2, num_blocks, block_size, num_kv_heads, head_size)
    if backend in BLOCK_FIRST:
        return (num_blocks, 2, block_size, num_kv_heads, head_size)
    if backend == "cpu":
        return (2, num_blocks, num_kv_heads, block_size, head_size)
    check_backend(backend)
    raise AssertionError("unreachable")


def kernel_block_size(backend: str, block_size: int) -> int:
    """The kernel's block size for a manager block (`prepare_kernel_block_sizes`)."""
    if backend == "flashinfer" and block_size not in _FLASHINFER_KERNEL_BLOCKS:
        for size in _FLASHINFER_KERNEL_BLOCKS:
            if block_size % size == 0:
                return size
        raise KvplanError(f"FlashInfer cannot split {block_size}-token blocks into 16, 32 or 64-token blocks")
    if backend in ("flash_attn", "triton") and block_size % 16:
        raise KvplanError(f"the {backend} backend needs a block size that is a multiple of 16, not {block_size}")
    return block_size


def mla_row_width(spec: MLAAttentionSpec) -> int:
    """Elements of one token's row in an MLA cache: the latent (kv_lora_rank + qk_rope_head_dim),
    or the bytes of the packed fp8_ds_mla format."""
    return spec.page_size_bytes // spec.block_size // dtype_size(spec.dtype)


def view_shape(spec: GroupSpec, num_blocks: int, backend: str = "flash_attn") -> tuple[int, ...] | None:
    """The logical shape of one layer's tensor of `num_blocks` blocks (MLA backends keep
    (blocks, block_size, width)); None for Mamba state and for groups of unequal pages."""
    if isinstance(spec, MLAAttentionSpec):
        return (num_blocks, spec.block_size, mla_row_width(spec))
    if isinstance(spec, AttentionSpec):
        return kv_cache_shape(backend, num_blocks, spec.block_size, spec.num_kv_heads, spec.head_size)
    return None


def specs_by_layer(config: KVCacheConfig) -> dict[str, KVCacheSpec]:
    """Each layer's own spec (a uniform-type group holds one per layer)."""
    specs: dict[str, KVCacheSpec] = {}
    for group in config.kv_cache_groups:
        spec = group.kv_cache_spec
        for name in group.layer_names:
            specs[name] = spec.kv_cache_specs[name] if isinstance(spec, UniformTypeKVCacheSpecs) else spec
    return specs
