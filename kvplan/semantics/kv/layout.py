"""How attention backends lay out one layer's KV cache (vLLM 0.17.1's `get_kv_cache_shape` and
`prepare_kernel_block_sizes`), as pure arithmetic: shapes, kernel block sizes and each layer's
spec in a pool. The tensors themselves are allocated in `kvplan.measure.kv_tensors`.

    ATTENTION_BACKENDS
    kv_cache_shape(backend, num_blocks, block_size, num_kv_heads, head_size) -> shape
    kv_cache_stride_order(backend, hybrid) -> the memory order of that shape
    kv_addressing(spec, backend, num_blocks, hybrid) -> KvAddressing: where the kernels find a slot's K/V bytes
    shared_backing_addressing(spec, num_blocks, base) -> KvAddressing: the same in 0.33.0's one backing allocation
    kernel_block_size(backend, block_size) -> int
    mla_row_width(spec) -> elements one MLA token's row holds
    view_shape(spec, num_blocks, backend="flash_attn") -> a layer's logical shape (None for Mamba)
    specs_by_layer(config) -> {layer name: spec}"""

from __future__ import annotations

from dataclasses import dataclass
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
from kvplan.semantics.releases import KvTensorLayout

ATTENTION_BACKENDS = ("flash_attn", "flashinfer", "triton", "flex", "cpu")
AttentionBackend = Literal["flash_attn", "flashinfer", "triton", "flex", "cpu"]
# where K/V sits in each backend's logical shape: (2, blocks, ...), (blocks, 2, ...), or CPU's
# (2, blocks, heads, block_size, head)
KV_FIRST = ("flash_attn", "flex")
BLOCK_FIRST = ("flashinfer", "triton")
# FlashInfer kernels take these block sizes; a larger manager block is split into kernel blocks
_FLASHINFER_KERNEL_BLOCKS = (64, 32, 16)
# vLLM 0.33.0's layer views of its one backing allocation (`KVCacheLayout.LBNHC`, the default): in
# memory [layer, block, token, head, K|V x head_size] whatever the attention backend, which
# transposes the logical [block, head, token, K|V] view and splits K from V
SHARED_BACKING = "lbnhc"


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


def kv_cache_stride_order(backend: str, hybrid: bool = False) -> tuple[int, ...]:
    """`get_kv_cache_stride_order()` of vLLM 0.17.1 under the default NHD layout: the identity for
    every backend kvplan models (HND, not modelled, would be (0, 1, 3, 2, 4) for FlashAttention and
    FlashInfer). With Mamba layers in the model, `_update_hybrid_attention_mamba_layout` re-strides
    the (2, num_blocks, ...) tensors to (num_blocks, 2, ...) in memory: one block's K and V together."""
    check_backend(backend)
    if hybrid:
        if backend not in KV_FIRST:
            raise KvplanError(f"hybrid attention/Mamba layouts are only modelled for {', '.join(KV_FIRST)}")
        return (1, 0, 2, 3, 4)
    return (0, 1, 2, 3, 4)


def element_offset(shape: tuple[int, ...], stride_order: tuple[int, ...], index: tuple[int, ...]) -> int:
    """The element at logical `index` of a tensor of logical `shape` whose memory holds `shape`
    permuted by `stride_order`, row-major (vLLM's `raw.view(shape[order]).permute(inverse)`)."""
    offset = 0
    for dim in stride_order:
        if not 0 <= index[dim] < shape[dim]:
            raise IndexError(f"index {index} is outside the shape {shape}")
        offset = offset * shape[dim] + index[dim]
    return offset


@dataclass(frozen=True)
class KvAddressing:
    """Where vLLM's attention kernels find a token in one layer's raw KV bytes, from the documented
    layout alone: the backend's logical shape (in kernel blocks) and stride order (0.17.1), or the
    layer's region of the one backing allocation, from byte `base` (0.33.0, backend SHARED_BACKING);
    and the slot mapping's `block = slot // kernel_block_size`, `offset = slot % kernel_block_size`."""

    backend: str
    mla: bool
    shape: tuple[int, ...]
    stride_order: tuple[int, ...]
    element_size: int
    kernel_block_size: int
    base: int = 0

    @property
    def sides(self) -> tuple[int, ...]:
        """0 for K and 1 for V; MLA keeps one latent row per token."""
        return (0,) if self.mla else (0, 1)

    @property
    def row_bytes(self) -> int:
        """Bytes of one row: a head's `head_size` elements, or an MLA token's latent."""
        return self.shape[-1] * self.element_size

    @property
    def rows_per_token(self) -> int:
        return 1 if self.mla else self.shape[2 if self.backend in ("cpu", SHARED_BACKING) else 3]

    def rows(self, side: int, slot: int) -> tuple[int, ...]:
        """Byte offsets of the rows holding K (`side` 0) or V (1) of the token at `slot`, one per KV head."""
        block, offset = divmod(slot, self.kernel_block_size)
        indices: list[tuple[int, ...]]
        if self.mla:
            indices = [(block, offset, 0)]
        elif self.backend == SHARED_BACKING:
            indices = [(block, offset, head, side, 0) for head in range(self.rows_per_token)]
        elif self.backend in KV_FIRST:
            indices = [(side, block, offset, head, 0) for head in range(self.rows_per_token)]
        elif self.backend in BLOCK_FIRST:
            indices = [(block, side, offset, head, 0) for head in range(self.rows_per_token)]
        else:
            indices = [(side, block, head, offset, 0) for head in range(self.rows_per_token)]
        return tuple(self.base + element_offset(self.shape, self.stride_order, index) * self.element_size
                     for index in indices)


def kv_addressing(spec: AttentionSpec, backend: str, num_blocks: int, hybrid: bool = False) -> KvAddressing:
    """The addressing of one attention layer's tensor of `num_blocks` manager blocks."""
    if isinstance(spec, MLAAttentionSpec):
        shape: tuple[int, ...] = (num_blocks, spec.block_size, mla_row_width(spec))
        return KvAddressing(backend, True, shape, (0, 1, 2), dtype_size(spec.dtype), spec.block_size)
    kernel = kernel_block_size(backend, spec.block_size)
    kernel_blocks = num_blocks * (spec.block_size // kernel)
    shape = kv_cache_shape(backend, kernel_blocks, kernel, spec.num_kv_heads, spec.head_size)
    return KvAddressing(backend, False, shape, kv_cache_stride_order(backend, hybrid), dtype_size(spec.dtype), kernel)


def shared_backing_addressing(spec: AttentionSpec, num_blocks: int, base: int) -> KvAddressing:
    """The addressing of one attention layer whose region of the backing allocation starts at byte
    `base`: `num_blocks` pages of `[token, head, K|V, head_size]` (MLA: `[token, latent]`) back to back."""
    size = dtype_size(spec.dtype)
    if isinstance(spec, MLAAttentionSpec):
        shape: tuple[int, ...] = (num_blocks, spec.block_size, mla_row_width(spec))
        return KvAddressing(SHARED_BACKING, True, shape, (0, 1, 2), size, spec.block_size, base)
    shape = (num_blocks, spec.block_size, spec.num_kv_heads, 2, spec.head_size)
    if spec.page_size_bytes != spec.block_size * spec.num_kv_heads * 2 * spec.head_size * size:
        raise KvplanError(f"a {spec.page_size_bytes}-byte page (another V head size, or a padded page) is not "
                          "modelled in the 0.33.0 layout")
    return KvAddressing(SHARED_BACKING, False, shape, (0, 1, 2, 3, 4), size, spec.block_size, base)


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


def view_shape(spec: GroupSpec, num_blocks: int, backend: str = "flash_attn",
               tensor_layout: KvTensorLayout = "tensor_per_layer") -> tuple[int, ...] | None:
    """The logical shape of one layer's tensor of `num_blocks` blocks (MLA backends keep
    (blocks, block_size, width)); None for Mamba state and for groups of unequal pages. In a shared
    backing (0.33.0) an attention layer is `(blocks, block_size, heads, K|V, head_size)` whatever the
    backend, which transposes and splits the layer's `[blocks, heads, tokens, K|V]` view."""
    if isinstance(spec, MLAAttentionSpec):
        return (num_blocks, spec.block_size, mla_row_width(spec))
    if isinstance(spec, AttentionSpec):
        if tensor_layout == "shared_backing":
            return (num_blocks, spec.block_size, spec.num_kv_heads, 2, spec.head_size)
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
