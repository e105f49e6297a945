"""vLLM's KV-cache spec family (`v1/kv_cache_interface.py`) as frozen dataclasses.

Page sizes are bytes per layer per block; `max_memory_usage_bytes` is what one request of
`max_model_len` tokens may need, the quantity vLLM's memory check and concurrency log use.

Public API:
    SizingLimits(max_model_len, max_num_batched_tokens, max_in_flight_tokens=None)
                                                        -- the scheduler settings specs read
    FullAttentionSpec, MLAAttentionSpec, SlidingWindowSpec, ChunkedLocalAttentionSpec, MambaSpec
                                                        -- one layer's spec (`KVCacheSpec`)
    UniformTypeKVCacheSpecs                             -- one group of same-type layers of unequal pages
    KVCacheTensor(size, shared_by, layer_stride=None, block_stride=None, offset=0),
    KVCacheGroupSpec(layer_names, kv_cache_spec),
    KVCacheConfig(num_blocks, kv_cache_tensors, kv_cache_groups)
                                                        -- what sizing produces, as in vLLM"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod
from typing import ClassVar

from kvplan.semantics.dtypes import dtype_size
from kvplan.semantics.releases import KvTensorLayout
from kvplan.units import cdiv

# DeepSeek V3.2's packed fp8 MLA cache: 512 fp8 latent values, 4 float32 scales, 64 bf16 RoPE values
FP8_DS_MLA_TOKEN_BYTES = 656


@dataclass(frozen=True)
class SizingLimits:
    """The scheduler settings that enter `max_memory_usage_bytes`. `max_in_flight_tokens` is what a
    sliding-window or chunked-local request may hold beyond its window (vLLM 0.33.0's
    `VllmConfig.max_in_flight_tokens`); None: one batch, `max_num_batched_tokens` (0.17.1)."""

    max_model_len: int
    max_num_batched_tokens: int
    max_in_flight_tokens: int | None = None

    @property
    def in_flight_tokens(self) -> int:
        return self.max_num_batched_tokens if self.max_in_flight_tokens is None else self.max_in_flight_tokens


class _PaddablePage:
    """`page_size_padded` (set by vLLM's hybrid hook) overrides the real page size, never below it.

    A spec class is also a KV cache group's type (`GROUP_TYPES`): `kind` is how traces, workload
    files and outputs spell it, `window_field` names the field that bounds what its layers read
    (a window, a chunk; None: the whole sequence or a state), and `uniform_fields` the fields its
    layers must agree on to share one group of unequal pages (`is_uniform_type`)."""

    page_size_padded: int | None
    kind: ClassVar[str]
    window_field: ClassVar[str | None] = None
    uniform_fields: ClassVar[tuple[str, ...]] = ()

    @property
    def real_page_size_bytes(self) -> int:
        raise NotImplementedError(type(self).__name__)

    @property
    def page_size_bytes(self) -> int:
        real = self.real_page_size_bytes
        if self.page_size_padded is not None:
            assert self.page_size_padded >= real
            return self.page_size_padded
        return real

    @property
    def type_name(self) -> str:
        return type(self).__name__


@dataclass(frozen=True)
class AttentionSpec(_PaddablePage):
    block_size: int
    num_kv_heads: int
    head_size: int
    dtype: str
    page_size_padded: int | None = None

    @property
    def real_page_size_bytes(self) -> int:
        return 2 * self.block_size * self.num_kv_heads * self.head_size * dtype_size(self.dtype)

    def max_memory_usage_bytes(self, limits: SizingLimits) -> int:
        raise NotImplementedError(self.type_name)


@dataclass(frozen=True)
class FullAttentionSpec(AttentionSpec):
    kind: ClassVar[str] = "full_attention"
    head_size_v: int | None = None
    # recorded only so that `merge` can tell unified sliding-window layers apart
    sliding_window: int | None = None
    attention_chunk_size: int | None = None

    @property
    def real_page_size_bytes(self) -> int:
        head_v = self.head_size if self.head_size_v is None else self.head_size_v
        return (
            self.block_size * self.num_kv_heads * (self.head_size + head_v) * dtype_size(self.dtype)
        )

    def __post_init__(self) -> None:
        # as vLLM: an unset V head size is the K head size, so both spellings compare equal
        if self.head_size_v is None:
            object.__setattr__(self, "head_size_v", self.head_size)

    def max_memory_usage_bytes(self, limits: SizingLimits) -> int:
        return cdiv(limits.max_model_len, self.block_size) * self.page_size_bytes


@dataclass(frozen=True)
class MLAAttentionSpec(FullAttentionSpec):
    cache_dtype_str: str | None = None

    @property
    def real_page_size_bytes(self) -> int:
        if self.cache_dtype_str == "fp8_ds_mla":
            return self.block_size * FP8_DS_MLA_TOKEN_BYTES
        return self.block_size * self.num_kv_heads * self.head_size * dtype_size(self.dtype)


@dataclass(frozen=True)
class SlidingWindowSpec(AttentionSpec):
    kind: ClassVar[str] = "sliding_window"
    window_field: ClassVar[str | None] = "sliding_window"
    uniform_fields: ClassVar[tuple[str, ...]] = ("sliding_window",)
    sliding_window: int = 0

    def max_memory_usage_bytes(self, limits: SizingLimits) -> int:
        tokens = min(self.sliding_window - 1 + limits.in_flight_tokens, limits.max_model_len)
        # +1: the window need not start at a block boundary
        return (cdiv(tokens, self.block_size) + 1) * self.page_size_bytes


@dataclass(frozen=True)
class ChunkedLocalAttentionSpec(AttentionSpec):
    kind: ClassVar[str] = "chunked_local_attention"
    window_field: ClassVar[str | None] = "attention_chunk_size"
    uniform_fields: ClassVar[tuple[str, ...]] = ("attention_chunk_size",)
    attention_chunk_size: int = 0

    def max_memory_usage_bytes(self, limits: SizingLimits) -> int:
        tokens = min(self.attention_chunk_size + limits.in_flight_tokens, limits.max_model_len)
        return cdiv(tokens, self.block_size) * self.page_size_bytes


@dataclass(frozen=True)
class MambaSpec(_PaddablePage):
    kind: ClassVar[str] = "mamba"
    uniform_fields: ClassVar[tuple[str, ...]] = ("num_speculative_blocks",)
    block_size: int
    shapes: tuple[tuple[int, ...], ...]
    dtypes: tuple[str, ...]
    page_size_padded: int | None = None
    mamba_type: str = "mamba2"
    mamba_cache_mode: str = "none"    # "none" | "align" | "all"
    num_speculative_blocks: int = 0

    @property
    def real_page_size_bytes(self) -> int:
        return sum(
            prod(shape) * dtype_size(dtype) for shape, dtype in zip(self.shapes, self.dtypes, strict=True)
        )

    def max_memory_usage_bytes(self, limits: SizingLimits) -> int:
        if self.mamba_cache_mode == "all":
            return cdiv(limits.max_model_len, self.block_size) * self.page_size_bytes
        if self.mamba_cache_mode == "align":
            return (2 + self.num_speculative_blocks) * self.page_size_bytes
        return (1 + self.num_speculative_blocks) * self.page_size_bytes


KVCacheSpec = AttentionSpec | MambaSpec
# Every layer spec, by vLLM's class name (what plan and profile records spell).
LAYER_SPECS: dict[str, type[KVCacheSpec]] = {
    spec.__name__: spec
    for spec in (FullAttentionSpec, MLAAttentionSpec, SlidingWindowSpec, ChunkedLocalAttentionSpec, MambaSpec)
}
# The specs that are a KV cache group's type, in the order traces and outputs list them: vLLM's
# scheduler keys its block managers by these classes (`spec_manager_map`, docs/vllm/kv-semantics.md
# section 9); a spec that subclasses one of them (MLA) runs as its group type (`group_type`).
GROUP_TYPES: tuple[type[KVCacheSpec], ...] = (FullAttentionSpec, SlidingWindowSpec, ChunkedLocalAttentionSpec,
                                              MambaSpec)


def group_type(spec: type[KVCacheSpec]) -> type[KVCacheSpec] | None:
    """The group type of a layer spec class: the class itself or the nearest of its bases that is one
    (MLA is full attention, as vLLM's `spec_manager_map` and `is_uniform_type` treat it); None: none."""
    return next((base for base in spec.__mro__ if base in GROUP_TYPES), None)


@dataclass(frozen=True)
class UniformTypeKVCacheSpecs:
    """One group of layers of one attention type whose per-layer page sizes differ."""

    block_size: int
    kv_cache_specs: dict[str, KVCacheSpec] = field(hash=False)

    @property
    def page_size_bytes(self) -> int:
        return sum(spec.page_size_bytes for spec in self.kv_cache_specs.values())

    @property
    def type_name(self) -> str:
        return type(self).__name__

    def max_memory_usage_bytes(self, limits: SizingLimits) -> int:
        blocks = max(
            cdiv(spec.max_memory_usage_bytes(limits), spec.page_size_bytes)
            for spec in self.kv_cache_specs.values()
        )
        return blocks * self.page_size_bytes


GroupSpec = KVCacheSpec | UniformTypeKVCacheSpecs


@dataclass(frozen=True)
class KVCacheTensor:
    """0.17.1: one raw allocation of `size` bytes, used by every layer in `shared_by` (one per group).
    0.33.0: one region of the pool's single backing allocation of `size` bytes, holding the layers in
    `shared_by` (of one group and one spec), layer `i`'s block `b` at byte
    `offset + i * layer_stride + b * block_stride`; every group's tensors start at byte 0."""

    size: int
    shared_by: tuple[str, ...]
    layer_stride: int | None = None
    block_stride: int | None = None
    offset: int = 0


@dataclass(frozen=True)
class KVCacheGroupSpec:
    """Layers that share one block table, hence one spec."""

    layer_names: tuple[str, ...]
    kv_cache_spec: GroupSpec


@dataclass(frozen=True)
class KVCacheConfig:
    """One worker's pool: `num_blocks` blocks (the null block included), its tensors and groups, and
    how the tensors make up the pool (the release's `kv_tensor_layout`)."""

    num_blocks: int
    kv_cache_tensors: tuple[KVCacheTensor, ...]
    kv_cache_groups: tuple[KVCacheGroupSpec, ...]
    tensor_layout: KvTensorLayout = "tensor_per_layer"

    @property
    def pool_bytes(self) -> int:
        """The bytes the pool allocates: every tensor, or the one backing allocation that shared-backing
        tensors describe regions of."""
        if self.tensor_layout == "shared_backing":
            return max((tensor.size for tensor in self.kv_cache_tensors), default=0)
        return sum(tensor.size for tensor in self.kv_cache_tensors)

    @property
    def needs_kv_cache_zeroing(self) -> bool:
        # 0.17.1 zeroes new attention blocks of models that have Mamba layers
        return any(isinstance(group.kv_cache_spec, MambaSpec) for group in self.kv_cache_groups)
