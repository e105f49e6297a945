"""The KV-cache tensors as vLLM's GPU worker makes them, and a round trip through a slot mapping that
proves the memory is real and addressed the way the kernels address it: the bytes are read back
where the documented layout puts them (`kvplan.semantics.kv.layout.kv_addressing` and
`shared_backing_addressing`), never through the view that wrote them.

0.17.1 (docs/vllm/kv-semantics.md §5): one zero-filled int8 tensor per `KVCacheTensor`, shared by
its layers, viewed per layer in the attention backend's layout. 0.33.0 (the config's
`tensor_layout` "shared_backing", docs/vllm/changes-0.33.md §2.2): one zero-filled int8 backing allocation; each
layer is a strided view of its region (layout LBNHC: `[block, token, head, K|V, head_size]` in
memory), which the attention backends transpose and split into K and V; groups alias from byte 0.

Public API:
    allocate_kv_cache(config, backend, device) -> KvCacheAllocation
    slot_mapping_check(allocation, seed=0) -> SlotCheck
    slot_index(layout, backend, which, slots) -> the view index of K (0) or V (1) at those slots"""

from __future__ import annotations

from dataclasses import dataclass, field
from math import prod

import torch

from kvplan.errors import KvplanError
from kvplan.measure.backend import LayerKind, LayerLayout, SlotCheck
from kvplan.semantics.dtypes import dtype_size
from kvplan.semantics.kv.layout import (
    BLOCK_FIRST,
    KV_FIRST,
    SHARED_BACKING,
    KvAddressing,
    check_backend,
    kernel_block_size,
    kv_addressing,
    kv_cache_shape,
    mla_row_width,
    shared_backing_addressing,
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


# the index layout of 0.33.0's per-layer views, in place of an attention backend's
SHARED_BACKING_LAYOUT = SHARED_BACKING


@dataclass
class KvCacheAllocation:
    """The raw tensors (one per `KVCacheTensor`, or the one backing allocation) and every layer's
    view(s) of them. `backend` is how the views are indexed: the attention backend's layout, or
    SHARED_BACKING_LAYOUT."""

    config: KVCacheConfig
    backend: str
    raw: list[torch.Tensor]
    views: dict[str, tuple[torch.Tensor, ...]] = field(default_factory=dict)
    layouts: list[LayerLayout] = field(default_factory=list)

    @property
    def total_bytes(self) -> int:
        return sum(tensor.numel() for tensor in self.raw)

    def raw_of(self, layout: LayerLayout) -> torch.Tensor:
        """The raw tensor behind a layer's views."""
        return self.raw[0] if self.backend == SHARED_BACKING_LAYOUT else self.raw[layout.tensor_index]

    def addressing(self, layout: LayerLayout, spec: AttentionSpec, hybrid: bool) -> KvAddressing:
        """Where the kernels find the layer's tokens in its raw tensor."""
        if self.backend != SHARED_BACKING_LAYOUT:
            return kv_addressing(spec, self.backend, self.config.num_blocks, hybrid)
        region = self.config.kv_cache_tensors[layout.tensor_index]
        assert region.layer_stride is not None
        base = region.offset + region.shared_by.index(layout.layer_name) * region.layer_stride
        return shared_backing_addressing(spec, self.config.num_blocks, base)


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
        elements = raw.view(_torch_dtype(dtype_name))
        view = elements.as_strided(
            (num_blocks, *shape), (spec.page_size_bytes // size, *contiguous),
            elements.storage_offset() + offset_bytes // size,
        )
        views.append(view)
        offset_bytes += prod(shape) * size
    return tuple(views)


def _backed_attention_view(
    elements: torch.Tensor, spec: AttentionSpec, num_blocks: int, block_stride: int, offset: int
) -> torch.Tensor:
    """0.33.0's `create_kv_cache_views` for one layer, as `(block, token, head, K|V, head_size)`:
    the backend's `kv_cache.transpose(1, 2).split(head_size, dim=-1)` without the copy."""
    size = dtype_size(spec.dtype)
    if isinstance(spec, MLAAttentionSpec):
        width = mla_row_width(spec)
        return elements.as_strided((num_blocks, spec.block_size, width), (block_stride // size, width, 1),
                                   offset // size)
    head, heads = spec.head_size, spec.num_kv_heads
    row = spec.page_size_bytes // size // spec.block_size // heads
    if row != 2 * head:
        raise KvplanError(f"a {row}-element K|V row of head size {head} (another V head size, or a padded page) "
                          "is not modelled in the 0.33.0 layout")
    return elements.as_strided(
        (num_blocks, spec.block_size, heads, 2, head), (block_stride // size, heads * row, row, head, 1), offset // size
    )


def _allocate_shared_backing(config: KVCacheConfig, device: torch.device | str) -> KvCacheAllocation:
    specs = specs_by_layer(config)
    raw = torch.zeros(config.pool_bytes, dtype=torch.int8, device=device)
    allocation = KvCacheAllocation(config=config, backend=SHARED_BACKING_LAYOUT, raw=[raw])
    for index, region in enumerate(config.kv_cache_tensors):
        assert region.layer_stride is not None and region.block_stride is not None
        for position, name in enumerate(region.shared_by):
            spec = specs[name]
            offset = region.offset + position * region.layer_stride
            if isinstance(spec, MambaSpec):
                views, dtype = _mamba_views(raw[offset:offset + region.layer_stride], spec), spec.dtypes[0]
            else:
                elements = raw.view(_torch_dtype(spec.dtype))
                views = (_backed_attention_view(elements, spec, config.num_blocks, region.block_stride, offset),)
                dtype = spec.dtype
            allocation.views[name] = views
            allocation.layouts.append(LayerLayout(
                layer_name=name, tensor_index=index, kind=_kind(spec), dtype=dtype,
                shapes=tuple(tuple(v.shape) for v in views), strides=tuple(tuple(v.stride()) for v in views),
                block_size=spec.block_size, kernel_block_size=spec.block_size,
            ))
    return allocation


def allocate_kv_cache(
    config: KVCacheConfig, backend: str = "flash_attn", device: torch.device | str = "cpu"
) -> KvCacheAllocation:
    """`_allocate_kv_cache_tensors` + `_reshape_kv_cache_tensors` (0.17.1) or the one backing
    allocation and its views (0.33.0). On `meta` nothing is allocated but every shape, stride and
    byte count is exact."""
    check_backend(backend)
    if config.tensor_layout == "shared_backing":
        return _allocate_shared_backing(config, device)
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
    if backend == SHARED_BACKING_LAYOUT:
        return (blocks, offsets, slice(None), which)
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


@dataclass(frozen=True)
class _Probe:
    """The tokens a check writes (their slots), and where the layout puts the bytes of the blocks it
    reads back: every row of the blocks written, then every row of a few blocks left alone."""

    block_table: tuple[int, ...]
    slots: tuple[int, ...]
    written_rows: torch.Tensor      # the byte offsets of the rows of the blocks written
    data_rows: dict[int, torch.Tensor]  # side -> where its (token, head) rows sit among written_rows
    untouched_rows: torch.Tensor    # the byte offsets of the rows of the blocks left alone


def _probe(addressing: KvAddressing, block_size: int, block_table: list[int], untouched: list[int],
           device: torch.device) -> _Probe:
    tokens = block_size * (len(block_table) - 1) + max(1, block_size // 2)
    # the slot mapping: slot = block_table[p // block_size] * block_size + p % block_size, which is
    # also the slot in kernel blocks when a manager block is split into several
    slots = [block_table[p // block_size] * block_size + p % block_size for p in range(tokens)]
    rows: list[int] = []
    where: dict[tuple[int, int], int] = {}          # (side, slot) -> its first row among `rows`
    for block in block_table:
        for slot in range(block * block_size, (block + 1) * block_size):
            for side in addressing.sides:
                where[(side, slot)] = len(rows)
                rows.extend(addressing.rows(side, slot))
    heads = addressing.rows_per_token
    data_rows = {side: torch.tensor([where[(side, slot)] + head for slot in slots for head in range(heads)],
                                    device=device) for side in addressing.sides}
    untouched_rows = [offset for block in untouched for slot in range(block * block_size, (block + 1) * block_size)
                      for side in addressing.sides for offset in addressing.rows(side, slot)]
    def offsets(values: list[int]) -> torch.Tensor:
        return torch.tensor(values, dtype=torch.int64, device=device)

    return _Probe(tuple(block_table), tuple(slots), offsets(rows), data_rows, offsets(untouched_rows))


def _read_rows(raw: torch.Tensor, starts: torch.Tensor, row_bytes: int) -> torch.Tensor:
    """The `row_bytes` bytes at each byte offset of `starts`, one row each."""
    return raw[starts.unsqueeze(1) + torch.arange(row_bytes, device=starts.device)]


def _check_layer(
    allocation: KvCacheAllocation, layout: LayerLayout, addressing: KvAddressing, probe: _Probe,
    generator: torch.Generator,
) -> tuple[bool, bool, bool]:
    """Write K/V of the probe's tokens through the layer's view at their slots, read them back through
    the view, then read the raw bytes where the backend's documented layout puts each of them (never
    through the view's strides), and find every other byte of the blocks looked at still zero."""
    raw = allocation.raw_of(layout)
    (view,) = allocation.views[layout.layer_name]
    device = view.device
    slots = torch.tensor(probe.slots, device=device)
    expected = torch.zeros(len(probe.written_rows), addressing.row_bytes, dtype=torch.int8, device=device)
    view_ok = True
    for side in addressing.sides:
        index = slot_index(layout, allocation.backend, side, slots)
        shape = view[index].shape
        if view.dtype.is_floating_point:
            data = (torch.rand(shape, generator=generator) + 0.5).to(view.dtype)
        else:
            data = torch.randint(1, 255, shape, generator=generator, dtype=torch.int16).to(view.dtype)
        data = data.to(device)
        view[index] = data
        view_ok &= bool(torch.equal(view[index], data))
        expected[probe.data_rows[side]] = data.contiguous().view(torch.int8).reshape(-1, addressing.row_bytes)
    raw_ok = bool(torch.equal(_read_rows(raw, probe.written_rows, addressing.row_bytes), expected))
    zero_ok = not bool(_read_rows(raw, probe.untouched_rows, addressing.row_bytes).any())
    return view_ok, raw_ok, zero_ok


def slot_mapping_check(allocation: KvCacheAllocation, seed: int = 0) -> SlotCheck:
    """Round-trip a few tokens through every attention tensor (one layer per shared tensor)."""
    if allocation.raw and allocation.raw[0].device.type == "meta":
        raise ValueError("meta tensors hold no data; check a small real pool instead")
    if allocation.config.num_blocks < 2:
        return SlotCheck(False, 0, 0, (), (), False, False, False, False,
                         "the pool has fewer than 2 blocks (block 0 is the null block)")
    generator = torch.Generator().manual_seed(seed)
    num_blocks = allocation.config.num_blocks
    # a few blocks, never block 0 (vLLM's null block: requests never get it), the last one half full
    block_table = (torch.randperm(num_blocks - 1, generator=generator)[:min(3, num_blocks - 1)] + 1).tolist()
    untouched = [block for block in range(1, num_blocks) if block not in block_table][:3]
    view_ok = raw_ok = zero_ok = True
    checked = 0
    seen_tensors: set[int] = set()
    specs = specs_by_layer(allocation.config)
    hybrid = any(isinstance(spec, MambaSpec) for spec in specs.values())
    probes: dict[KvAddressing, _Probe] = {}
    probe: _Probe | None = None
    for layout in allocation.layouts:
        if layout.kind == "mamba" or layout.tensor_index in seen_tensors:
            continue
        seen_tensors.add(layout.tensor_index)
        spec = specs[layout.layer_name]
        assert isinstance(spec, AttentionSpec)
        addressing = allocation.addressing(layout, spec, hybrid)
        if addressing not in probes:
            probes[addressing] = _probe(addressing, spec.block_size, block_table, untouched,
                                        allocation.raw_of(layout).device)
        probe = probes[addressing]
        v, r, z = _check_layer(allocation, layout, addressing, probe, generator)
        view_ok, raw_ok, zero_ok, checked = view_ok and v, raw_ok and r, zero_ok and z, checked + 1
    tokens, table, slots = (len(probe.slots), probe.block_table, probe.slots[:8]) if probe else (0, (), ())
    # every layer of a shared tensor must see the very same memory
    shared_ok = all(
        view.untyped_storage().data_ptr() == allocation.raw_of(layout).untyped_storage().data_ptr()
        for layout in allocation.layouts
        for view in allocation.views[layout.layer_name]
    )
    passed = checked > 0 and view_ok and raw_ok and zero_ok and shared_ok
    detail = "" if checked else "no attention layer to check"
    return SlotCheck(passed, checked, tokens, table, slots, view_ok, raw_ok, zero_ok, shared_ok, detail)
