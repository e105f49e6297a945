"""KV cache groups as the block manager sees them (vLLM's `KVCacheGroupSpec`): the spec class that is
the group's type (one of `GROUP_TYPES`, which the coordinator's managers are keyed by, as vLLM keys
its own), its block size and its window, chunk or Mamba cache mode. Every group takes its blocks from
the one shared pool; `resolve_groups` fills in what vLLM derives from the engine config and the
release. A type's spelling in traces and outputs is its spec class's `kind`."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from math import lcm

from kvplan.errors import KvplanError
from kvplan.semantics.kv.specs import (
    GROUP_TYPES,
    LAYER_SPECS,
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheGroupSpec,
    KVCacheSpec,
    MambaSpec,
    UniformTypeKVCacheSpecs,
    group_type,
)
from kvplan.semantics.releases import DEFAULT_RELEASE, RELEASES, HybridBlockSizes, MambaPrefillCheckpoints, Release

# A group type by its spelling in traces, workload files and outputs.
GROUP_TYPE_OF_KIND: dict[str, type[KVCacheSpec]] = {spec.kind: spec for spec in GROUP_TYPES}
# The group fields that bound what a type's layers read (the types' `window_field`s).
WINDOW_FIELDS: tuple[str, ...] = tuple(dict.fromkeys(spec.window_field for spec in GROUP_TYPES if spec.window_field))
# A group's type-specific fields, in the order outputs write them (each None on the other types).
GROUP_PARAMETERS = (*WINDOW_FIELDS, "mamba_cache_mode")
# "none" (one state block per request) is forced when prefix caching is off; given with caching
# on it means "vLLM's default", which is "align" ("all" only for models that opt in, in releases
# that have it: the release's `mamba_cache_modes`).
MAMBA_CACHE_MODES = ("none", "align", "all")
# Whether several groups must share the engine's block size, by the release's `hybrid_block_sizes`.
ONE_BLOCK_SIZE: dict[HybridBlockSizes, bool] = {"multiples": False, "uniform": True}
# The Mamba layer types (kvplan's and vLLM's `mamba_type`) that take one prefill checkpoint block,
# by the release's `mamba_prefill_checkpoints`, with their checkpoint alignment: a Mamba-2 mixer
# exports any token position (1); a gated delta net keeps its checkpoints on the prefix-cache grid,
# the Mamba block size (None here). vLLM 0.33.0 gives gated delta nets checkpoint blocks only with
# FlashInfer's GDN prefill kernel, its choice on CUDA Hopper (and Blackwell with head_k_dim 128 on
# CUDA 13); elsewhere (Triton prefill) they have none: kvplan plans for the CUDA default.
CHECKPOINTING_MAMBA_TYPES: dict[MambaPrefillCheckpoints, dict[str, int | None]] = {
    "none": {},
    "mamba2_and_gdn": {"mamba2": 1, "gdn_attention": None},
}


@dataclass(frozen=True)
class KVCacheGroup:
    """One KV cache group. `spec` is its type, a spec class of `GROUP_TYPES`; `block_size` None means
    the engine's block size (the hash block size); `layout` stands for the rest of vLLM's spec (heads,
    head size, dtype, Mamba state shapes): groups equal in everything but `num_layers` are looked up
    together for prefix hits.
    `num_prefill_checkpoint_blocks` and `prefill_checkpoint_alignment` are vLLM 0.33.0's MambaSpec
    fields (a Mamba-2 or gated-delta-net layer's 1 and its alignment; 0 and None: a Mamba-1 layer's)."""

    spec: type[KVCacheSpec] = FullAttentionSpec
    sliding_window: int | None = None
    attention_chunk_size: int | None = None
    mamba_cache_mode: str | None = None
    block_size: int | None = None
    num_layers: int = 1
    layout: str = ""
    num_prefill_checkpoint_blocks: int = 0
    prefill_checkpoint_alignment: int | None = None

    def validate(self) -> None:
        if self.spec not in GROUP_TYPES:
            raise KvplanError(f"KV cache group type must be one of {', '.join(GROUP_TYPE_OF_KIND)}, "
                              f"got {getattr(self.spec, '__name__', self.spec)!r}")
        kind = self.spec.kind
        for name in WINDOW_FIELDS:
            value = getattr(self, name)
            if name == self.spec.window_field:
                if type(value) is not int or value < 1:
                    raise KvplanError(f"a {kind} group needs {name}, a positive integer; got {value!r}")
            elif value is not None:
                owners = " or ".join(spec.kind for spec in GROUP_TYPES if spec.window_field == name)
                raise KvplanError(f"{name} applies only to {owners} groups, not {kind}")
        if self.mamba_cache_mode is not None and (self.spec is not MambaSpec
                                                  or self.mamba_cache_mode not in MAMBA_CACHE_MODES):
            raise KvplanError(f"mamba_cache_mode is one of {', '.join(MAMBA_CACHE_MODES)} and applies to mamba "
                              f"groups only; got {self.mamba_cache_mode!r} on a {kind} group")
        for name in ("block_size", "num_layers", "prefill_checkpoint_alignment"):
            value = getattr(self, name)
            if value is not None and (type(value) is not int or value < 1):
                raise KvplanError(f"KV cache group {name} must be a positive integer, got {value!r}")
        blocks = self.num_prefill_checkpoint_blocks
        if type(blocks) is not int or blocks < 0:
            raise KvplanError(f"num_prefill_checkpoint_blocks must be a non-negative integer, got {blocks!r}")
        if self.spec is not MambaSpec and (blocks or self.prefill_checkpoint_alignment is not None):
            raise KvplanError(f"prefill checkpoint blocks apply to mamba groups only, not {kind}")

    @property
    def parameters(self) -> dict[str, int | str]:
        """The type-specific fields this group sets (`GROUP_PARAMETERS`), by name."""
        return {name: value for name in GROUP_PARAMETERS if (value := getattr(self, name)) is not None}

    @property
    def lookup_key(self) -> KVCacheGroup:
        """What vLLM compares to batch groups in the prefix lookup: the spec without its layers."""
        return replace(self, num_layers=1)


def spec_layout(type_name: str, attention: tuple[int, int, str] | None = None,
                mamba: tuple[str, Sequence[Sequence[int]], Sequence[str]] | None = None) -> str:
    """A group's `layout`: what tells two specs of one kind apart (heads, head size and dtype; a
    Mamba state's type, shapes and dtypes), spelt the same from a spec or from a plan record."""
    if mamba is not None:
        kind, shapes, dtypes = mamba
        return f"{kind} {[list(shape) for shape in shapes]} {list(dtypes)}"
    heads, head_size, dtype = attention or (0, 0, "")
    return f"{type_name} {heads}x{head_size} {dtype}"


def engine_group(spec: type[KVCacheSpec] | str, block_size: int, num_layers: int, layout: str, *,
                 sliding_window: int | None = None, attention_chunk_size: int | None = None,
                 mamba_cache_mode: str | None = None, mamba_type: str | None = None,
                 release: Release = DEFAULT_RELEASE) -> KVCacheGroup:
    """The engine's group for one of vLLM's spec classes (or its name). A Mamba group of a layer type
    that exports prefill checkpoints in `release` (`CHECKPOINTING_MAMBA_TYPES`) gets its checkpoint
    block, as the layer's `get_kv_cache_spec` gives it."""
    found = LAYER_SPECS.get(spec) if isinstance(spec, str) else spec
    group_spec = group_type(found) if found is not None else None
    if group_spec is None:
        raise KvplanError(f"the engine has no manager for {getattr(spec, '__name__', spec)} groups")
    checkpointing = CHECKPOINTING_MAMBA_TYPES[release.mamba_prefill_checkpoints]
    checkpoint_blocks, checkpoint_alignment = 0, None
    if group_spec is MambaSpec and mamba_type in checkpointing:
        alignment = checkpointing[mamba_type]
        checkpoint_blocks, checkpoint_alignment = 1, block_size if alignment is None else alignment
    # a group keeps only its own type's window field (a full-attention spec records one for merging only)
    window = group_spec.window_field
    return KVCacheGroup(
        spec=group_spec, block_size=block_size, num_layers=num_layers, layout=layout,
        sliding_window=sliding_window if window == "sliding_window" else None,
        attention_chunk_size=attention_chunk_size if window == "attention_chunk_size" else None,
        mamba_cache_mode=mamba_cache_mode if group_spec is MambaSpec else None,
        num_prefill_checkpoint_blocks=checkpoint_blocks, prefill_checkpoint_alignment=checkpoint_alignment,
    )


def groups_from_kv_cache_config(groups: Sequence[KVCacheGroupSpec],
                                release: Release = DEFAULT_RELEASE) -> tuple[KVCacheGroup, ...]:
    """The engine's groups for a worker's KV cache groups (`kvplan.semantics.kv`), as vLLM's
    scheduler receives them: a group of unequal pages (`UniformTypeKVCacheSpecs`) runs with its
    first layer's spec (`generate_scheduler_kv_cache_config`); Mamba groups take the prefill
    checkpoint blocks of `release` (`engine_group`)."""
    engine_groups = []
    for group in groups:
        spec = group.kv_cache_spec
        if isinstance(spec, UniformTypeKVCacheSpecs):
            spec = next(iter(spec.kv_cache_specs.values()))
        if isinstance(spec, MambaSpec):
            layout = spec_layout(spec.type_name, mamba=(spec.mamba_type, spec.shapes, spec.dtypes))
        else:
            layout = spec_layout(spec.type_name, attention=(spec.num_kv_heads, spec.head_size, spec.dtype))
        engine_groups.append(engine_group(
            type(spec), spec.block_size, len(group.layer_names), layout,
            sliding_window=getattr(spec, "sliding_window", None),
            attention_chunk_size=getattr(spec, "attention_chunk_size", None),
            mamba_cache_mode=getattr(spec, "mamba_cache_mode", None),
            mamba_type=getattr(spec, "mamba_type", None), release=release,
        ))
    return tuple(engine_groups)


def resolve_groups(groups: tuple[KVCacheGroup, ...] | None, block_size: int, enable_caching: bool,
                   max_model_len: int, enable_chunked_prefill: bool = True,
                   release: Release = DEFAULT_RELEASE) -> tuple[KVCacheGroup, ...]:
    """The groups with vLLM's derived values filled in, checked against the rules the release
    enforces (KvplanError, exit 2, where vLLM would refuse or assert). None: one full-attention
    group of `block_size`."""
    if groups is None:
        return (KVCacheGroup(block_size=block_size),)
    if not isinstance(groups, tuple) or not groups or not all(isinstance(g, KVCacheGroup) for g in groups):
        raise KvplanError("kv_cache_groups must be a non-empty list of KV cache groups")
    for group in groups:
        group.validate()
        if group.num_prefill_checkpoint_blocks and not CHECKPOINTING_MAMBA_TYPES[release.mamba_prefill_checkpoints]:
            others = " or ".join(r.version for r in RELEASES.values()
                                 if CHECKPOINTING_MAMBA_TYPES[r.mamba_prefill_checkpoints])
            raise KvplanError(f"num_prefill_checkpoint_blocks is not a field of vLLM {release.version}'s MambaSpec "
                              f"(its Mamba layers take no prefill checkpoint blocks): drop it, or use "
                              f"vllm_version {others}")
    resolved = tuple(_resolve(g, block_size, enable_caching, max_model_len, release) for g in groups)
    modes = {g.mamba_cache_mode for g in resolved if g.spec is MambaSpec}
    if len(modes) > 1:
        raise KvplanError(f"Mamba groups share vLLM's one mamba_cache_mode; got {', '.join(sorted(map(str, modes)))}")
    if "align" in modes and not enable_chunked_prefill:
        if "all" in release.mamba_cache_modes:
            fix = "or use mamba_cache_mode 'all'"
        else:
            fix = (f"or disable prefix caching ('align' is the only Mamba cache mode with prefix caching in "
                   f"vLLM {release.version})")
        raise KvplanError(f"mamba_cache_mode 'align' requires chunked prefill (a vLLM rule): enable chunked "
                          f"prefill {fix}")
    for group in resolved:
        if group.mamba_cache_mode != "none" and group.block_size % block_size:  # type: ignore[operator]
            raise KvplanError(f"a {group.spec.kind} group's block size ({group.block_size}) must be a multiple of "
                              f"the block size ({block_size}), which is the prefix-cache hash block size")
    if ONE_BLOCK_SIZE[release.hybrid_block_sizes] and len(resolved) > 1:
        sizes = sorted({g.block_size or block_size for g in resolved if g.mamba_cache_mode != "none"})
        if sizes != [block_size]:
            others = " or ".join(r.version for r in RELEASES.values() if not ONE_BLOCK_SIZE[r.hybrid_block_sizes])
            raise KvplanError(f"KV cache groups with their own block sizes ({', '.join(map(str, sizes))}) are "
                              f"not reproduced for vLLM {release.version}: it hashes at the groups' common "
                              f"divisor and, with Mamba 'align', hits inside a block; give every group the block "
                              f"size ({block_size}), or use vllm_version {others}")
    if enable_caching:
        _check_lookup(resolved, block_size)
    return resolved


def _resolve(group: KVCacheGroup, block_size: int, enable_caching: bool, max_model_len: int,
             release: Release) -> KVCacheGroup:
    if group.spec is not MambaSpec:
        return replace(group, block_size=group.block_size or block_size)
    if not enable_caching:
        # vLLM keeps one state per request: a Mamba block spans the whole model length.
        return replace(group, mamba_cache_mode="none", block_size=max_model_len)
    # A mode the release lacks (0.33.0 has no "all") runs as "align", vLLM's default.
    mode = group.mamba_cache_mode if group.mamba_cache_mode in release.mamba_cache_modes else "align"
    return replace(group, mamba_cache_mode=mode, block_size=group.block_size or block_size)


def _check_lookup(groups: tuple[KVCacheGroup, ...], block_size: int) -> None:
    """The coordinators' assertions (vLLM 0.17.1 and 0.33.0 alike), with prefix caching on."""
    if len(groups) == 1:
        if groups[0].block_size != block_size:
            raise KvplanError(f"a single KV cache group must use the block size ({block_size}) with prefix "
                              f"caching on (vLLM's unitary coordinator), got {groups[0].block_size}")
        return
    if len({g.lookup_key for g in groups}) < 2:
        raise KvplanError("several KV cache groups with one identical spec: vLLM's hybrid coordinator needs "
                          "two kinds of group at least (give one group, or groups that differ)")
    alignment = lcm(*(g.block_size for g in groups if g.block_size))
    for group in groups:
        if group.spec is ChunkedLocalAttentionSpec and group.block_size != alignment:
            raise KvplanError("chunked local attention needs every KV cache group to use its block size "
                              f"({group.block_size}) with prefix caching on; the groups' lcm is {alignment}")
