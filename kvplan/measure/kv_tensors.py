"""The KV-cache tensors as vLLM 0.17.1's GPU worker makes them (`vllm-kv-semantics.md` section 5):
one zero-filled int8 tensor per `KVCacheTensor`, shared by its layers, viewed per layer in the
attention backend's layout; and a round trip through a slot mapping that proves the memory is
real and addressed the way the kernels address it.

Public API:
    allocate_kv_cache(config, backend, device) -> KvCacheAllocation
    slot_mapping_check(allocation, seed=0) -> SlotCheck
    slot_index(layout, backend, which, slots) -> the view index of K (0) or V (1) at those slots"""

from __future__ import annotations

from dataclasses import dataclass, field
from itertools import islice
from math import prod

import torch

from kvplan.errors import KvplanError
from kvplan.measure.backend import LayerKind, LayerLayout, SlotCheck
from kvplan.semantics.dtypes import dtype_size
from kvplan.semantics.kv.layout import (
    BLOCK_FIRST,
    KV_FIRST,
    check_backend,
    kernel_block_size,
    kv_cache_shape,
    mla_row_width,
    specs_by_layer,
)
from kvplan.semantics.kv.specs import (
    AttentionSpec,
    KVCacheConfig,
    KVCacheSpec,
    MambaSpec,
    MLAAttentionSpec,
)


def _torch_dtype(name: str) -> torch.dtype:
    return getattr(torch, name)


def _kind(spec: KVCacheSpec) -> LayerKind:
    if isinstance(spec, MambaSpec):
        return "mamba"
    return "mla" if isinstance(spec, MLAAttentionSpec) else "attention"


@dataclass
class KvCacheAllocation:
    """The raw tensors (one per `KVCacheTensor`) and every layer's view(s) of them."""

    config: KVCacheConfig
    backend: str
    raw: list[torch.Tensor]
    views: dict[str, tuple[torch.Tensor, ...]] = field(default_factory=dict)
    layouts: list[LayerLayout] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(tensor.numel() for tensor in self.raw)


def _attention_view(
    raw: torch.Tensor, spec: AttentionSpec, backend: str, hybrid: bool
) -> tuple[torch.Tensor, int]:
    if isinstance(spec, MLAAttentionSpec):
        num_blocks = raw.numel() // spec.page_size_bytes
        rows = raw.view(_torch_dtype(spec.dtype)).view(num_blocks, spec.block_size, mla_row_width(spec))
        return rows, spec.block_size
    kernel = kernel_block_size(backend, spec.block_size)
    num_blocks = raw.numel() // spec.page_size_bytes * (spec.block_size // kernel)
    shape = kv_cache_shape(backend, num_blocks, kernel, spec.num_kv_heads, spec.head_size)
    elements = raw.view(_torch_dtype(spec.dtype))
    if not hybrid:
        if prod(shape) != elements.numel():
            raise KvplanError(f"a padded {spec.page_size_bytes}-byte page does not fit the {backend} layout")
        return elements.view(shape), kernel
    # With Mamba layers present, one block's K and V sit together and blocks are one (padded)
    # page apart (`_update_hybrid_attention_mamba_layout`).
    if backend not in KV_FIRST:
        raise KvplanError(f"hybrid attention/Mamba layouts are only modelled for {', '.join(KV_FIRST)}")
    half = kernel * spec.num_kv_heads * spec.head_size
    page = spec.page_size_bytes // dtype_size(spec.dtype) // (spec.block_size // kernel)
    stride = (half, page, spec.num_kv_heads * spec.head_size, spec.head_size, 1)
    return elements.as_strided(shape, stride), kernel


def _mamba_views(raw: torch.Tensor, spec: MambaSpec) -> tuple[torch.Tensor, ...]:
    """Each state `as_strided` with one page per block, the states of a block back to back."""
    num_blocks = raw.numel() // spec.page_size_bytes
    views, offset_bytes = [], 0
    for shape, dtype_name in zip(spec.shapes, spec.dtypes, strict=True):
        size = dtype_size(dtype_name)
        contiguous = torch.empty(shape, device="meta").stride()
        view = raw.view(_torch_dtype(dtype_name)).as_strided(
            (num_blocks, *shape), (spec.page_size_bytes // size, *contiguous), offset_bytes // size
        )
        views.append(view)
        offset_bytes += prod(shape) * size
    return tuple(views)


def allocate_kv_cache(
    config: KVCacheConfig, backend: str = "flash_attn", device: torch.device | str = "cpu"
) -> KvCacheAllocation:
    """`_allocate_kv_cache_tensors` + `_reshape_kv_cache_tensors`. On `meta` nothing is allocated
    but every shape, stride and byte count is exact."""
    check_backend(backend)
    specs = specs_by_layer(config)
    hybrid = any(isinstance(spec, MambaSpec) for spec in specs.values())
    allocation = KvCacheAllocation(config=config, backend=backend, raw=[])
    for index, kv_tensor in enumerate(config.kv_cache_tensors):
        raw = torch.zeros(kv_tensor.size, dtype=torch.int8, device=device)
        allocation.raw.append(raw)
        for name in kv_tensor.shared_by:
            spec = specs[name]
            if isinstance(spec, MambaSpec):
                views, kernel, dtype = _mamba_views(raw, spec), spec.block_size, spec.dtypes[0]
            else:
                view, kernel = _attention_view(raw, spec, backend, hybrid)
                views, dtype = (view,), spec.dtype
            allocation.views[name] = views
            allocation.layouts.append(LayerLayout(
                layer_name=name, tensor_index=index, kind=_kind(spec), dtype=dtype,
                shapes=tuple(tuple(v.shape) for v in views), strides=tuple(tuple(v.stride()) for v in views),
                block_size=spec.block_size, kernel_block_size=kernel,
            ))
    return allocation


def _index(kind: LayerKind, backend: str, which: int | torch.Tensor, blocks: torch.Tensor,
           offsets: torch.Tensor) -> tuple:
    """The logical index of (K or V, block, offset) -> an (n, heads, head) or (n, width) selection."""
    if kind == "mla":
        return (blocks, offsets)
    if backend in KV_FIRST:
        return (which, blocks, offsets)
    if backend in BLOCK_FIRST:
        return (blocks, which, offsets)
    return (which, blocks, slice(None), offsets)


def slot_index(layout: LayerLayout, backend: str, which: int | torch.Tensor, slots: torch.Tensor) -> tuple:
    """Where the kernels put K (`which` 0) or V (1) of the tokens at `slots` (slot = manager block x
    block_size + offset, the same number in kernel blocks): index the layer's view with it. A
    `which` of shape (2, 1) with slots of shape (1, n) selects K and V together, (2, n, ...)."""
    kernel = layout.kernel_block_size
    return _index(layout.kind, backend, which, slots // kernel, slots % kernel)


def _raw_bytes_at(raw: torch.Tensor, view: torch.Tensor, index: tuple) -> torch.Tensor:
    """The bytes behind `view[index]`, read straight from the raw int8 tensor through the view's
    strides: one row of `view.shape[-1]` contiguous elements per selected (token, head)."""
    entries = list(index) + [slice(None)] * (view.dim() - 1 - len(index))
    tokens: torch.Tensor | int = int(view.storage_offset())
    heads: torch.Tensor | int = 0
    for dim, entry in enumerate(entries):
        stride = view.stride(dim)
        if isinstance(entry, torch.Tensor):
            tokens = tokens + entry.reshape(-1) * stride
        elif isinstance(entry, int):
            tokens = tokens + entry * stride
        else:
            heads = heads + torch.arange(view.shape[dim], device=view.device) * stride
    assert isinstance(tokens, torch.Tensor)
    rows = tokens.unsqueeze(1) + heads if isinstance(heads, torch.Tensor) else tokens
    element = view.element_size()
    spans = rows.unsqueeze(-1) * element + torch.arange(view.shape[-1] * element, device=view.device)
    return raw[spans]


def _check_layer(
    allocation: KvCacheAllocation, layout: LayerLayout, generator: torch.Generator
) -> tuple[bool, bool, bool, int, tuple[int, ...], tuple[int, ...]]:
    raw = allocation.raw[layout.tensor_index]
    (view,) = allocation.views[layout.layer_name]
    device = view.device
    manager_blocks = allocation.config.num_blocks
    split = layout.block_size // layout.kernel_block_size
    used = min(3, manager_blocks - 1)
    # block 0 is vLLM's null block; requests never get it
    block_table = (torch.randperm(manager_blocks - 1, generator=generator)[:used] + 1).tolist()
    tokens = layout.block_size * (used - 1) + max(1, layout.block_size // 2)
    positions = torch.arange(tokens)
    manager = torch.tensor(block_table)[positions // layout.block_size]
    within = positions % layout.block_size
    kernel_blocks = manager * split + within // layout.kernel_block_size
    offsets = within % layout.kernel_block_size
    slots = kernel_blocks * layout.kernel_block_size + offsets
    # the kernels' view of a slot: block = slot // block_size, offset = slot % block_size
    blocks_dev = (slots // layout.kernel_block_size).to(device)
    offsets_dev = (slots % layout.kernel_block_size).to(device)

    sides = (0,) if layout.kind == "mla" else (0, 1)
    view_ok = raw_ok = True
    row = view.shape[-1]
    for which in sides:
        index = _index(layout.kind, allocation.backend, which, blocks_dev, offsets_dev)
        target_shape = view[index].shape
        if view.dtype.is_floating_point:
            data = (torch.rand(target_shape, generator=generator) + 0.5).to(view.dtype)
        else:
            data = torch.randint(1, 255, target_shape, generator=generator, dtype=torch.int16).to(view.dtype)
        data = data.to(device)
        view[index] = data
        view_ok &= bool(torch.equal(view[index], data))
        written = data.contiguous().view(torch.int8).reshape(*target_shape[:-1], row * view.element_size())
        raw_ok &= bool(torch.equal(_raw_bytes_at(raw, view, index), written))
    untouched = list(islice((b for b in range(manager_blocks) if b not in block_table), 3))
    zero_ok = True
    for block in untouched:
        for kernel_block in range(block * split, (block + 1) * split):
            for which in sides:
                sel = (kernel_block,) if layout.kind == "mla" else _index(
                    layout.kind, allocation.backend, which, torch.tensor([kernel_block], device=device),
                    torch.arange(layout.kernel_block_size, device=device).view(1, -1),
                )
                zero_ok &= bool((view[sel] == 0).all())
    return view_ok, raw_ok, zero_ok, tokens, tuple(block_table), tuple(slots[:8].tolist())


def slot_mapping_check(allocation: KvCacheAllocation, seed: int = 0) -> SlotCheck:
    """Round-trip a few tokens through every attention tensor (one layer per shared tensor)."""
    if allocation.raw and allocation.raw[0].device.type == "meta":
        raise ValueError("meta tensors hold no data; check a small real pool instead")
    if allocation.config.num_blocks < 2:
        return SlotCheck(False, 0, 0, (), (), False, False, False, False,
                         "the pool has fewer than 2 blocks (block 0 is the null block)")
    generator = torch.Generator().manual_seed(seed)
    view_ok = raw_ok = zero_ok = True
    checked, tokens = 0, 0
    table: tuple[int, ...] = ()
    slots: tuple[int, ...] = ()
    seen_tensors: set[int] = set()
    for layout in allocation.layouts:
        if layout.kind == "mamba" or layout.tensor_index in seen_tensors:
            continue
        seen_tensors.add(layout.tensor_index)
        v, r, z, tokens, table, slots = _check_layer(allocation, layout, generator)
        view_ok, raw_ok, zero_ok, checked = view_ok and v, raw_ok and r, zero_ok and z, checked + 1
    # every layer of a shared tensor must see the very same memory
    shared_ok = all(
        view.untyped_storage().data_ptr() == allocation.raw[layout.tensor_index].untyped_storage().data_ptr()
        for layout in allocation.layouts
        for view in allocation.views[layout.layer_name]
    )
    passed = checked > 0 and view_ok and raw_ok and zero_ok and shared_ok
    detail = "" if checked else "no attention layer to check"
    return SlotCheck(passed, checked, tokens, table, slots, view_ok, raw_ok, zero_ok, shared_ok, detail)
