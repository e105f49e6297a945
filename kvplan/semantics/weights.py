"""Weight bytes of a model, whole and per GPU under tensor and pipeline parallelism.

The parameter list comes from a meta-device build of the Hugging Face model (no memory, tied weights
counted once). For the catalog it is precomputed by scripts/compute_catalog_weights.py and stored in
kvplan/data/weights.json (read by `kvplan.sources.catalog.catalog_layouts`, in `layout_to_json`'s
form), so planning a catalog model needs neither torch nor transformers. Per-rank
bytes follow vLLM's sharding: column- and row-parallel linears, vocab-parallel embedding and lm_head
(vocab padded to a multiple of 64), replicated norms and routers, KV projections replicated when there
are fewer KV heads than ranks, MoE experts split along their intermediate size, Mamba mixers split by
head; pipeline stages take the layers `pp_layer_ranges` gives them, embeddings on the first stage,
lm_head and the final norm on the last. Quantized checkpoints are counted from their scheme."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass
from math import prod
from typing import Any

from kvplan.errors import KvplanError
from kvplan.semantics.config.parallel import pp_layer_ranges
from kvplan.semantics.dtypes import dtype_size, normalize_dtype
from kvplan.units import cdiv, round_up

VOCAB_PADDING = 64   # vLLM's DEFAULT_VOCAB_PADDING_SIZE


@dataclass(frozen=True)
class ParamGroup:
    """Parameters of one name and shape: `name` has "{i}" for the decoder-layer index, and `layers`
    lists the decoder layers that hold one (empty for parameters outside the decoder stack). Repeated
    blocks outside the decoder (vision encoder blocks) have "{n}" in the name and `copies` > 1."""

    name: str
    shape: tuple[int, ...]
    module: str                   # class of the owning module: "Linear", "Embedding", "Qwen3NextExperts", ...
    dtype: str | None = None      # a dtype the model keeps regardless of the build dtype (float32 routers)
    layers: tuple[int, ...] = ()
    copies: int = 1

    @property
    def numel(self) -> int:
        return prod(self.shape)

    @property
    def count(self) -> int:
        return len(self.layers) or self.copies


@dataclass(frozen=True)
class WeightLayout:
    """What a meta-device build tells about a model's parameters, plus the config facts that the
    sharding rules need."""

    model_id: str
    model_class: str
    num_hidden_layers: int
    vocab_size: int
    hidden_size: int
    num_attention_heads: int
    num_kv_heads: int
    tie_word_embeddings: bool
    groups: tuple[ParamGroup, ...]
    expert_intermediate_size: int = 0
    mamba_num_heads: int = 0
    mamba_head_dim: int = 0
    mamba_n_groups: int = 0
    mamba_state_size: int = 0
    built_with: str = ""          # "transformers 5.24.0, torch 2.13.0+cpu"
    config_sha256: str = ""

    @property
    def total_params(self) -> int:
        return sum(group.numel * group.count for group in self.groups)


@dataclass(frozen=True)
class QuantScheme:
    method: str                   # "none", "fp8", "mxfp4", or a method kvplan does not model
    block: tuple[int, int] | None = None
    keep_unquantized: tuple[str, ...] = ()

    @property
    def modelled(self) -> bool:
        return self.method in ("none", "fp8", "mxfp4")


@dataclass(frozen=True)
class WeightEstimate:
    total_bytes: int                        # the whole model, unsharded
    per_rank_bytes: int                     # the most any one GPU holds
    method: str                             # how the bytes were computed
    exact: bool                             # a parameter count, not a scheme-based estimate
    dtype: str = ""
    total_params: int = 0
    per_stage_bytes: tuple[int, ...] = ()   # one rank of each pipeline stage
    notes: tuple[str, ...] = ()


# --- which parameters shard how (vLLM's parallel layers, matched on Hugging Face names) -------------

_COLUMN = {"q_proj", "q_b_proj", "kv_b_proj", "gate_proj", "up_proj", "gate_up_proj", "w1", "w3", "fc1", "c_fc",
           "linear_fc1", "in_proj_qkvz", "in_proj_ba", "in_proj_qkv", "in_proj_z", "in_proj_b", "in_proj_a"}
_ROW = {"o_proj", "down_proj", "out_proj", "w2", "fc2", "linear_fc2", "dense", "c_proj", "proj"}
_KV = {"k_proj", "v_proj"}
_ROUTERS = {"gate", "router", "shared_expert_gate"}   # built with quant_config=None by vLLM
_REPLICATED = {"q_a_proj", "kv_a_proj_with_mqa", "mm_input_projection_weight", *_ROUTERS}
_PER_HEAD = {"A_log", "D", "dt_bias", "sinks"}
_EMBEDDINGS = {"embed_tokens", "embeddings", "wte", "word_embeddings"}


def _is_vision(name: str) -> bool:
    return any(part in name for part in ("vision", "visual", "multi_modal_projector"))


def shard_rule(group: ParamGroup, layout: WeightLayout) -> str:
    """One of: vocab, column, row, kv, qkv, expert, mamba_in_proj, mamba_conv, per_head, replicated,
    unclassified."""
    parts = group.name.split(".")
    param, module = parts[-1], parts[-2] if len(parts) > 1 else ""
    if group.name.endswith("lm_head.weight") or (
        module in _EMBEDDINGS and param == "weight" and group.shape[0] == layout.vocab_size
        and not _is_vision(group.name)
    ):
        return "vocab"
    if "Norm" in group.module:
        # Mamba2's gated norm spans the mixer's whole intermediate size and is split with it
        return "per_head" if group.name.endswith("mixer.norm.weight") and layout.mamba_num_heads else "replicated"
    if group.module.endswith("Experts") or module == "experts":
        if param in ("gate_up_proj", "down_proj"):
            return "expert"
        return "column" if param == "gate_up_proj_bias" else "replicated"
    if module == "in_proj" and layout.mamba_num_heads:
        return "mamba_in_proj"
    if module == "conv1d":
        return "mamba_conv" if layout.mamba_num_heads else "column"
    if param in _PER_HEAD or module in _REPLICATED or param in _REPLICATED or "Router" in group.module:
        return "per_head" if param in _PER_HEAD else "replicated"
    if group.module != "Linear":
        return "replicated" if _is_vision(group.name) else "unclassified"
    if param == "bias" and module in _ROW:
        return "replicated"   # a row-parallel bias is added once, after the reduction
    if module in _KV and not _is_vision(group.name):
        return "kv"
    if module == "qkv_proj" and not _is_vision(group.name):
        return "qkv"
    if module in _COLUMN or module in _KV or module in ("qkv", "qkv_proj"):
        return "column"
    if module in _ROW:
        return "row"
    return "unclassified"


def _split(shape: tuple[int, ...], axis: int, parts: int) -> tuple[int, ...]:
    return (*shape[:axis], cdiv(shape[axis], parts), *shape[axis + 1:])


def rank_shape(group: ParamGroup, layout: WeightLayout, tp: int) -> tuple[int, ...]:
    """The shape of one TP rank's shard of `group` (the largest shard when sizes do not divide)."""
    rule, shape = shard_rule(group, layout), group.shape
    if rule == "vocab":
        padded = round_up(shape[0], VOCAB_PADDING)
        return (cdiv(padded, tp), *shape[1:])
    if rule in ("column", "per_head"):
        return _split(shape, 1 if group.module.endswith("Experts") else 0, tp)
    if rule == "row":
        return _split(shape, 1, tp) if len(shape) > 1 else shape
    if rule == "kv":
        per_head = shape[0] // layout.num_kv_heads
        # fewer KV heads than ranks: every rank keeps one whole head
        return (per_head * max(1, layout.num_kv_heads // tp), *shape[1:])
    if rule == "qkv":
        heads, kv = layout.num_attention_heads, layout.num_kv_heads
        head = shape[0] // (heads + 2 * kv)
        return (cdiv(heads * head, tp) + 2 * head * max(1, kv // tp), *shape[1:])
    if rule == "expert":
        return _split(shape, _expert_axis(group, layout), tp)
    if rule in ("mamba_in_proj", "mamba_conv"):
        intermediate = layout.mamba_num_heads * layout.mamba_head_dim
        groups = layout.mamba_n_groups
        # MambaMixer2 replicates groups (n_groups + tp - n_groups) so that every rank's heads have theirs
        groups_padded = groups if groups % tp == 0 else tp
        conv_dim = intermediate + 2 * groups_padded * layout.mamba_state_size
        rows = conv_dim + intermediate + layout.mamba_num_heads if rule == "mamba_in_proj" else conv_dim
        return (cdiv(rows, tp), *shape[1:])
    return shape


def _expert_axis(group: ParamGroup, layout: WeightLayout) -> int:
    """The intermediate-size axis of a stacked expert tensor (layouts differ: (E, out, in) or (E, in, out))."""
    wanted = layout.expert_intermediate_size * (2 if group.name.endswith("gate_up_proj") else 1)
    return next((axis for axis in (2, 1) if group.shape[axis] == wanted), 1)


# --- quantization schemes -------------------------------------------------------------------------

def quant_scheme(config: Mapping[str, Any]) -> QuantScheme:
    quantization = config.get("quantization_config")
    if not isinstance(quantization, Mapping):
        return QuantScheme("none")
    method = str(quantization.get("quant_method", "unknown"))
    keep = tuple(quantization.get("modules_to_not_convert") or quantization.get("ignored_layers") or ())
    if method == "fp8":
        block = quantization.get("weight_block_size")
        return QuantScheme("fp8", (int(block[0]), int(block[1])) if block else None, keep)
    return QuantScheme(method, None, keep)


def _kept_unquantized(group: ParamGroup, scheme: QuantScheme) -> bool:
    module_path = group.name.rsplit(".", 1)[0].replace("{i}", "0")
    for pattern in scheme.keep_unquantized:
        regex = re.escape(pattern).replace(r"\*", r"[^.]+")
        if re.match(rf"^(.*\.)?{regex}(\..*)?$", module_path):
            return True
    return False


def _quantized(group: ParamGroup, scheme: QuantScheme) -> bool:
    """vLLM's fp8 config quantizes linear layers and MoE experts, mxfp4 only the MoE experts; embeddings,
    lm_head, norms, routers and vision towers stay in the model dtype."""
    if scheme.method not in ("fp8", "mxfp4") or _is_vision(group.name) or _kept_unquantized(group, scheme):
        return False
    param = group.name.rsplit(".", 1)[-1]
    expert = group.module.endswith("Experts") and param in ("gate_up_proj", "down_proj")
    if scheme.method == "mxfp4":
        return expert
    linear = group.module == "Linear" and param == "weight" and not group.name.endswith("lm_head.weight")
    return expert or (linear and group.name.split(".")[-2] not in _ROUTERS)


def group_bytes(group: ParamGroup, shape: tuple[int, ...], dtype: str, scheme: QuantScheme) -> int:
    """Bytes of one instance of `group` with the given (per-rank) shape."""
    numel = prod(shape)
    if not _quantized(group, scheme):
        return numel * dtype_size(group.dtype or dtype)
    if scheme.method == "mxfp4":
        # 4-bit values, one e8m0 scale byte per 32 along the contraction axis (all multiples of 32 here)
        return cdiv(numel, 2) + cdiv(numel, 32)
    matrices, rows, cols = (shape[0], shape[1], shape[2]) if len(shape) == 3 else (1, shape[0], shape[1])
    if scheme.block is None:
        return numel + 4 * matrices      # one float32 scale per tensor
    block_rows, block_cols = scheme.block
    return numel + 4 * matrices * cdiv(rows, block_rows) * cdiv(cols, block_cols)


# --- putting it together ------------------------------------------------------------------------------

def _is_last_stage_group(group: ParamGroup) -> bool:
    return group.name.endswith("lm_head.weight") or ("Norm" in group.module and not _is_vision(group.name))


def estimate(layout: WeightLayout, dtype: str, tp: int, pp: int, scheme: QuantScheme, source: str,
             layer_partition: str | None = None) -> WeightEstimate:
    """Bytes of the whole model and of one rank of each pipeline stage; the stages take the layers
    `pp_layer_ranges` gives them (VLLM_PP_LAYER_PARTITION as `layer_partition`), as the KV layers do."""
    dtype = normalize_weight_dtype(dtype)
    if tp < 1:
        raise KvplanError(f"--tensor-parallel-size must be at least 1, got {tp}")
    stages = pp_layer_ranges(layout.num_hidden_layers, pp, layer_partition)
    notes: list[str] = []
    unclassified = sorted({g.name for g in layout.groups if shard_rule(g, layout) == "unclassified"})
    if unclassified and tp > 1:
        notes.append("counted whole on every rank (sharding unknown): " + ", ".join(unclassified))
    tied_vocab = [g for g in layout.groups if shard_rule(g, layout) == "vocab"] if layout.tie_word_embeddings else []
    per_stage = []
    for number, layer_range in enumerate(stages):
        first, last = number == 0, number == len(stages) - 1
        total = 0
        for group in layout.groups:
            if group.layers:
                count = sum(1 for layer in group.layers if layer in layer_range)
            elif _is_last_stage_group(group):
                count = int(last)
            else:
                count = group.copies * int(first)
            if count:
                total += count * group_bytes(group, rank_shape(group, layout, tp), dtype, scheme)
        if last and not first:
            # the last stage builds its own lm_head; with tied embeddings it is a copy of embed_tokens
            total += sum(group_bytes(g, rank_shape(g, layout, tp), dtype, scheme) for g in tied_vocab)
        per_stage.append(total)
    whole = sum(group.count * group_bytes(group, group.shape, dtype, scheme) for group in layout.groups)
    if scheme.method == "none":
        method = f"{source} ({layout.built_with})"
    elif scheme.modelled:
        method = f"{_SCHEME_LABEL[scheme.method]}, parameters from {source} ({layout.built_with})"
    else:
        method = f"quantization {scheme.method!r} not modelled: every parameter counted at {dtype}; {source}"
        notes.append(method)
    return WeightEstimate(
        total_bytes=whole, per_rank_bytes=max(per_stage), method=method, exact=scheme.method == "none",
        dtype=dtype, total_params=layout.total_params, per_stage_bytes=tuple(per_stage), notes=tuple(notes),
    )


_SCHEME_LABEL = {
    "fp8": "fp8 checkpoint scheme (1 byte per linear/expert weight plus float32 block scales; embeddings, "
           "lm_head, norms and routers unquantized)",
    "mxfp4": "mxfp4 checkpoint scheme (4-bit expert weights plus one scale byte per 32; every other module "
             "unquantized)",
}


def normalize_weight_dtype(dtype: str) -> str:
    text = normalize_dtype(dtype)
    if text not in ("float32", "float16", "bfloat16"):
        raise KvplanError(f"weight dtype {dtype!r} is not one of float32, float16, bfloat16 (resolve 'auto' first)")
    return text


# --- catalog data ------------------------------------------------------------------

def layout_to_json(layout: WeightLayout) -> dict[str, Any]:
    data = asdict(layout)
    data["groups"] = [
        {"name": g.name, "shape": list(g.shape), "module": g.module, "dtype": g.dtype, "layers": _ranges(g.layers),
         "copies": g.copies}
        for g in layout.groups
    ]
    return data


def layout_from_json(data: Mapping[str, Any]) -> WeightLayout:
    groups = tuple(
        ParamGroup(g["name"], tuple(g["shape"]), g["module"], g["dtype"],
                   tuple(i for first, last in g["layers"] for i in range(first, last + 1)), g["copies"])
        for g in data["groups"]
    )
    return WeightLayout(**{**data, "groups": groups})


def _ranges(indices: tuple[int, ...]) -> list[list[int]]:
    ranges: list[list[int]] = []
    for index in indices:
        if ranges and ranges[-1][1] == index - 1:
            ranges[-1][1] = index
        else:
            ranges.append([index, index])
    return ranges
