"""Grouping layers into KV-cache groups, as vLLM's `get_kv_cache_groups` does (0.17.1:
`v1/core/kv_cache_utils.py`, docs/vllm/kv-semantics.md §4; 0.33.0: `v1/core/kv_cache_planning.py`,
docs/vllm/changes-0.33.md §2.7). The release decides which layers may share a group (SPEC_BUCKETS), how unequal pages
are made equal (PAGE_UNIFICATION) and when layer types are padded to one group size.

Public API:
    get_kv_cache_groups(specs, disable_hybrid_kv_cache_manager=False, *, release) -> Grouping
        `specs` maps layer names (in model order) to per-layer specs. Returns the groups and the
        warnings vLLM logs on the way ("Add %d padding layers, ..."). Raises `GroupingError`
        (exit 2) where vLLM refuses the model's specs.
    merge_specs(specs) -> spec      -- the spec one group of layers shares (vLLM's `spec.merge`)
    is_uniform_type(specs) -> bool  -- `UniformTypeKVCacheSpecs.is_uniform_type`
    unify_kv_cache_spec_page_size(specs, release) -> specs
    with_block_size(spec, block_size) -> spec   -- `copy_with_new_block_size`

Dict order matters: buckets of equal specs keep the order of their first layer, and each
bucket is split round-robin (`layers[i::n]`) so that pipeline stages stay balanced."""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from kvplan.errors import KvplanError
from kvplan.semantics.kv.specs import (
    AttentionSpec,
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheGroupSpec,
    KVCacheSpec,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
    group_type,
)
from kvplan.semantics.releases import PageUnification, Release, SpecBuckets
from kvplan.units import cdiv

HYBRID_DISABLED_WARNING = (
    "Hybrid KV cache manager is disabled for this hybrid model, This means we do not enable any "
    "optimizations for saving KV cache memory (e.g., dropping the KV cache outside the sliding "
    "window). The compute of layers like sliding window is still saved."
)


class GroupingError(KvplanError):
    """vLLM cannot put these layers into KV-cache groups; its engine would fail at start-up."""


class _NotMergeable(Exception):
    """vLLM's AssertionError inside `merge`: the layers cannot share one spec."""


@dataclass(frozen=True)
class Grouping:
    groups: tuple[KVCacheGroupSpec, ...]
    logs: tuple[str, ...] = ()


def with_block_size(spec: KVCacheSpec, block_size: int) -> KVCacheSpec:
    """vLLM's `copy_with_new_block_size`: a padded attention page grows with the block."""
    if isinstance(spec, AttentionSpec) and spec.page_size_padded is not None:
        ratio = block_size // spec.block_size
        return replace(spec, block_size=block_size, page_size_padded=spec.page_size_padded * ratio)
    return replace(spec, block_size=block_size)


def _one_window(values: set[int]) -> int | None:
    if len(values) > 1:
        # a ValueError in vLLM, not an assertion: it escapes the uniformity test
        raise GroupingError(
            "All attention layers in the same KV cache group must have the same window size."
        )
    return next(iter(values), None)


def _attention_fields_equal(a: AttentionSpec, b: AttentionSpec) -> bool:
    # vLLM compares only the fields of the AttentionSpec base (head_size_v is not among them)
    return (a.block_size, a.num_kv_heads, a.head_size, a.dtype, a.page_size_padded) == (
        b.block_size, b.num_kv_heads, b.head_size, b.dtype, b.page_size_padded
    )


def _merge_mla(specs: Sequence[KVCacheSpec]) -> MLAAttentionSpec:
    if not all(isinstance(spec, MLAAttentionSpec) for spec in specs):
        raise _NotMergeable
    cache_dtypes = {spec.cache_dtype_str for spec in specs}  # type: ignore[union-attr]
    if len(cache_dtypes) != 1:
        raise _NotMergeable
    first = specs[0]
    assert isinstance(first, MLAAttentionSpec)
    return MLAAttentionSpec(
        block_size=first.block_size, num_kv_heads=first.num_kv_heads, head_size=first.head_size,
        dtype=first.dtype, page_size_padded=first.page_size_padded, cache_dtype_str=cache_dtypes.pop(),
    )


def _merge_full(specs: Sequence[KVCacheSpec]) -> FullAttentionSpec:
    if not all(isinstance(spec, FullAttentionSpec) for spec in specs):
        raise _NotMergeable
    if any(isinstance(spec, MLAAttentionSpec) for spec in specs):
        raise _NotMergeable
    fulls = [spec for spec in specs if isinstance(spec, FullAttentionSpec)]
    first = fulls[0]
    merged = FullAttentionSpec(
        block_size=first.block_size, num_kv_heads=first.num_kv_heads, head_size=first.head_size,
        dtype=first.dtype, page_size_padded=first.page_size_padded, head_size_v=first.head_size_v,
        sliding_window=_one_window({s.sliding_window for s in fulls if s.sliding_window is not None}),
        attention_chunk_size=_one_window(
            {s.attention_chunk_size for s in fulls if s.attention_chunk_size is not None}
        ),
    )
    if not all(_attention_fields_equal(spec, merged) for spec in fulls):
        raise _NotMergeable
    if merged.sliding_window is not None and merged.attention_chunk_size is not None:
        raise _NotMergeable
    return merged


def _merge(specs: Sequence[KVCacheSpec]) -> KVCacheSpec:
    first = specs[0]
    if isinstance(first, MLAAttentionSpec):
        return _merge_mla(specs)
    if isinstance(first, FullAttentionSpec):
        return _merge_full(specs)
    if not all(spec == first for spec in specs[1:]):
        raise _NotMergeable
    return first


def merge_specs(specs: Sequence[KVCacheSpec]) -> KVCacheSpec:
    """The one spec a group of layers shares; `GroupingError` when they cannot share one."""
    try:
        return _merge(specs)
    except _NotMergeable:
        raise GroupingError("All layers in the same KV cache group must be the same.") from None


def _is_uniform(specs: Mapping[str, KVCacheSpec]) -> bool:
    if not specs:
        return True
    try:
        _merge(list(specs.values()))
    except _NotMergeable:
        return False
    return True


def is_uniform_type(specs: Mapping[str, KVCacheSpec]) -> bool:
    """Same block size and the same token needs: one group of per-layer page sizes will do."""
    values = list(specs.values())
    if len({spec.block_size for spec in values}) > 1:
        return False
    one = values[0]
    kind = group_type(type(one))
    if kind is None:
        raise GroupingError(f"Unsupported KV cache spec type: {one.type_name}")
    # one group type (MLA counts as full attention), agreeing on what the type needs of its tokens
    return all(
        group_type(type(spec)) is kind
        and all(getattr(spec, name) == getattr(one, name) for name in kind.uniform_fields)
        for spec in values
    )


def unify_hybrid_kv_cache_specs(
    specs: dict[str, KVCacheSpec],
) -> tuple[dict[str, KVCacheSpec], tuple[str, ...]]:
    """`--disable-hybrid-kv-cache-manager`: sliding-window and chunked-local layers become full
    attention layers that remember their window (so they keep all tokens' KV)."""
    if _is_uniform(specs) or is_uniform_type(specs):
        return specs, ()
    has_full = any(isinstance(spec, FullAttentionSpec) for spec in specs.values())
    has_local = any(
        isinstance(spec, SlidingWindowSpec | ChunkedLocalAttentionSpec) for spec in specs.values()
    )
    unified = dict(specs)
    if has_full and has_local:
        for name, spec in specs.items():
            if isinstance(spec, SlidingWindowSpec):
                unified[name] = FullAttentionSpec(
                    block_size=spec.block_size, num_kv_heads=spec.num_kv_heads, head_size=spec.head_size,
                    dtype=spec.dtype, sliding_window=spec.sliding_window,
                    page_size_padded=spec.page_size_padded,
                )
            elif isinstance(spec, ChunkedLocalAttentionSpec):
                unified[name] = FullAttentionSpec(
                    block_size=spec.block_size, num_kv_heads=spec.num_kv_heads, head_size=spec.head_size,
                    dtype=spec.dtype, attention_chunk_size=spec.attention_chunk_size,
                    page_size_padded=spec.page_size_padded,
                )
    if not (_is_uniform(unified) or is_uniform_type(unified)):
        raise GroupingError(
            "Hybrid KV cache manager is disabled but failed to convert the KV cache specs to one "
            "unified type."
        )
    return unified, (HYBRID_DISABLED_WARNING,)


def _scale_block_size(name: str, spec: KVCacheSpec, max_page: int) -> KVCacheSpec:
    """0.17.1: a smaller page grows with its block size until it is the largest page."""
    page = spec.page_size_bytes
    if max_page % page != 0:
        raise GroupingError(
            "The page size of the layer is not divisible by the maximum page size. "
            "Cannot unify by adjusting block_size."
        )
    grown = with_block_size(spec, spec.block_size * (max_page // page))
    if grown.page_size_bytes != max_page:
        # vLLM asserts (a bare AssertionError in unify_kv_cache_spec_page_size): a Mamba state's page does
        # not grow with its block size
        raise GroupingError(
            f"vLLM's engine fails at start-up (AssertionError in unify_kv_cache_spec_page_size): the "
            f"{spec.type_name} of {name} has {page}-byte pages, which its block size cannot raise to the "
            f"largest page ({max_page} bytes); the attention and Mamba pages must be equal"
        )
    return grown


def _scale_or_pad(name: str, spec: KVCacheSpec, max_page: int) -> KVCacheSpec:
    """0.33.0: a Mamba page is padded (its size does not follow the block size); an attention page
    that divides the largest grows with its block size; a non-MLA one that does not is padded."""
    if isinstance(spec, MambaSpec):
        return replace(spec, page_size_padded=max_page)
    if max_page % spec.page_size_bytes == 0:
        return replace(spec, block_size=spec.block_size * (max_page // spec.page_size_bytes))
    if isinstance(spec, AttentionSpec) and not isinstance(spec, MLAAttentionSpec):
        return replace(spec, page_size_padded=max_page)
    raise GroupingError(
        f"Layer {name}: page size is not divisible by the maximum page size and cannot be padded. "
        "Padding is only supported for non-MLA attention layers."
    )


# Release.page_unification -> how a layer with a smaller page is made to take the largest page
PAGE_UNIFICATION: dict[PageUnification, Callable[[str, KVCacheSpec, int], KVCacheSpec]] = {
    "scale_block_size": _scale_block_size,
    "scale_or_pad": _scale_or_pad,
}


def unify_kv_cache_spec_page_size(specs: dict[str, KVCacheSpec], release: Release) -> dict[str, KVCacheSpec]:
    """Make every page the largest one, by the release's rule."""
    page_sizes = {spec.page_size_bytes for spec in specs.values()}
    if len(page_sizes) <= 1:
        return specs
    max_page = max(page_sizes)
    unify = PAGE_UNIFICATION[release.page_unification]
    return {name: spec if spec.page_size_bytes == max_page else unify(name, spec, max_page)
            for name, spec in specs.items()}


def _groups(specs: Mapping[str, KVCacheSpec], grouped_names: list[list[str]]) -> tuple[KVCacheGroupSpec, ...]:
    return tuple(
        KVCacheGroupSpec(tuple(names), merge_specs([specs[name] for name in names]))
        for names in grouped_names
    )


def _equal_specs(specs: Mapping[str, KVCacheSpec]) -> list[list[str]]:
    """0.17.1: layers share a bucket when their specs are equal (in order of first appearance)."""
    buckets: dict[KVCacheSpec, list[str]] = {}
    for name, spec in specs.items():
        buckets.setdefault(spec, []).append(name)
    return list(buckets.values())


def _mergeable_specs(specs: Mapping[str, KVCacheSpec]) -> list[list[str]]:
    """0.33.0: buckets of equal specs join an earlier bucket whose specs they merge with (full attention
    layers that differ only in window or chunk size), so there are fewer groups."""
    merged: list[tuple[list[str], list[KVCacheSpec]]] = []
    for names in _equal_specs(specs):
        spec = specs[names[0]]
        for bucket_names, bucket_specs in merged:
            try:
                _merge([*bucket_specs, spec])
            except (_NotMergeable, GroupingError):
                continue
            bucket_names.extend(names)
            bucket_specs.append(spec)
            break
        else:
            merged.append((list(names), [spec]))
    return [names for names, _ in merged]


# Release.spec_buckets -> which layers may share a KV cache group
SPEC_BUCKETS: dict[SpecBuckets, Callable[[Mapping[str, KVCacheSpec]], list[list[str]]]] = {
    "equal_specs": _equal_specs,
    "mergeable_specs": _mergeable_specs,
}


def _group_uniform_page_size(specs: Mapping[str, KVCacheSpec], release: Release) -> Grouping:
    buckets = SPEC_BUCKETS[release.spec_buckets](specs)
    sizes = [len(layers) for layers in buckets]
    group_size = min(sizes)
    # nearly balanced types (gpt-oss + eagle: 12 sw + 13 full) pad the smaller one instead
    if max(sizes) < group_size * release.group_padding_ratio:
        group_size = max(sizes)
    grouped: list[list[str]] = []
    logs: list[str] = []
    for layers in buckets:
        padding = group_size - len(layers) % group_size
        if padding != group_size:
            logs.append(
                f"Add {padding} padding layers, may waste at most "
                f"{padding / len(layers) * 100:.2f}% KV cache memory"
            )
        num_groups = cdiv(len(layers), group_size)
        grouped.extend(layers[i::num_groups] for i in range(num_groups))
    return Grouping(_groups(specs, grouped), tuple(logs))


def get_kv_cache_groups(
    specs: Mapping[str, KVCacheSpec], disable_hybrid_kv_cache_manager: bool = False, *,
    release: Release,
) -> Grouping:
    """vLLM's `get_kv_cache_groups` over the merged specs of all workers."""
    layer_specs = dict(specs)
    logs: tuple[str, ...] = ()
    if disable_hybrid_kv_cache_manager and layer_specs:
        layer_specs, logs = unify_hybrid_kv_cache_specs(layer_specs)
    if not layer_specs:
        return Grouping((), logs)  # attention-free: only the null block
    if _is_uniform(layer_specs):
        return Grouping(_groups(layer_specs, [list(layer_specs)]), logs)
    if is_uniform_type(layer_specs):
        uniform = UniformTypeKVCacheSpecs(
            block_size=next(iter(layer_specs.values())).block_size, kv_cache_specs=layer_specs
        )
        return Grouping((KVCacheGroupSpec(tuple(layer_specs), uniform),), logs)
    hybrid = _group_uniform_page_size(unify_kv_cache_spec_page_size(layer_specs, release), release)
    return Grouping(hybrid.groups, logs + hybrid.logs)
