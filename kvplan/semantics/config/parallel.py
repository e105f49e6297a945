"""vLLM 0.17.1's parallel settings: how decoder layers split over pipeline stages
(`distributed/utils.py::get_pp_indices`) and how attention heads split over tensor-parallel ranks.

    pp_partition(num_hidden_layers, pp_size, layer_partition=None) -> (sizes, log line | None)
    get_pp_indices(num_hidden_layers, pp_rank, pp_size, layer_partition=None) -> (start, end)
    pp_layer_ranges(num_layers, pp_size, layer_partition=None) -> [range, ...]   (checked)
    kv_heads_per_rank(total_kv_heads, tp, replicate=True) -> int
    verify_tensor_parallel(shape, tp) -> None"""

from __future__ import annotations

from kvplan.errors import ConfigRejected, KvplanError
from kvplan.semantics.models.shape import ModelShape


def pp_partition(
    num_hidden_layers: int, pp_size: int, layer_partition: str | None = None
) -> tuple[tuple[int, ...], str | None]:
    """Layers per pipeline stage and vLLM's log line when the split is uneven.

    The remainder goes one layer each to stages -2, -3, ...: never the last stage (it holds the
    final norm), the first only when the remainder is pp_size - 1."""
    if layer_partition is not None:
        try:
            sizes = [int(part) for part in layer_partition.split(",")]
        except ValueError:
            raise ConfigRejected(f"Invalid partition string: {layer_partition}") from None
        if len(sizes) != pp_size:
            raise ConfigRejected(f"len(partitions)={len(sizes)} does not match pp_size={pp_size}.")
        if sum(sizes) != num_hidden_layers:
            raise ConfigRejected(
                f"sum(partitions)={sum(sizes)} does not match num_hidden_layers={num_hidden_layers}."
            )
        return tuple(sizes), None
    sizes = [num_hidden_layers // pp_size] * pp_size
    remainder = num_hidden_layers % pp_size
    if not remainder:
        return tuple(sizes), None
    for i in range(2, remainder + 2):
        sizes[-i] += 1
    return tuple(sizes), (
        f"Hidden layers were unevenly partitioned: [{','.join(str(size) for size in sizes)}]. "
        "This can be manually overridden using the VLLM_PP_LAYER_PARTITION environment variable"
    )


def get_pp_indices(
    num_hidden_layers: int, pp_rank: int, pp_size: int, layer_partition: str | None = None
) -> tuple[int, int]:
    """The `[start, end)` layer range of one pipeline stage."""
    sizes, _ = pp_partition(num_hidden_layers, pp_size, layer_partition)
    start = sum(sizes[:pp_rank])
    return start, start + sizes[pp_rank]


# gpt-oss's attention divides its KV heads plainly instead of replicating them
PLAIN_KV_SPLIT_ARCHITECTURES = frozenset({"GptOssForCausalLM"})


def kv_heads_per_rank(total_kv_heads: int, tp: int, replicate: bool = True) -> int:
    """KV heads one rank stores: fewer heads than ranks are replicated (one each), unless the
    model divides plainly (gpt-oss's attention does)."""
    return max(1, total_kv_heads // tp) if replicate else total_kv_heads // tp


def verify_tensor_parallel(shape: ModelShape, tp: int) -> None:
    """vLLM's checks on the attention heads; the KV-head checks are bare asserts in vLLM's
    attention layers, so kvplan words them."""
    if shape.num_attention_heads % tp:
        raise ConfigRejected(
            f"Total number of attention heads ({shape.num_attention_heads}) must be divisible by "
            f"tensor parallel size ({tp})."
        )
    if shape.use_mla:
        return  # one latent per layer, replicated on every rank
    replicate = shape.architecture not in PLAIN_KV_SPLIT_ARCHITECTURES
    attention = ("full", "sliding_window", "chunked_local")
    for total in sorted({layer.num_kv_heads for layer in shape.kv_layers if layer.kind in attention}):
        if not replicate and kv_heads_per_rank(total, tp, replicate) == 0:
            # vLLM builds the attention layer with 0 KV heads and fails on `num_heads % num_kv_heads`
            raise ConfigRejected(
                f"{shape.architecture} splits its {total} KV heads over the tensor-parallel ranks without "
                f"replicating them, so with tensor parallel size {tp} a rank holds none (vLLM fails with "
                f"ZeroDivisionError in its attention layer): use a tensor parallel size of at most {total}."
            )
        if total >= tp and total % tp:
            raise ConfigRejected(
                f"Total number of KV heads ({total}) must be divisible by tensor parallel size ({tp})."
            )
        if total < tp and tp % total:
            raise ConfigRejected(
                f"Tensor parallel size ({tp}) must be divisible by the total number of KV heads ({total}) "
                "when there are fewer KV heads than ranks."
            )
        # the Attention layer's own assertion, on one rank's heads
        heads, kv_heads = shape.num_attention_heads // tp, kv_heads_per_rank(total, tp)
        if heads % kv_heads:
            raise ConfigRejected(
                f"num_heads ({heads}) is not divisible by num_kv_heads ({kv_heads}): each KV head must serve "
                "the same number of query heads (vLLM's Attention layer asserts it); fix num_key_value_heads"
            )


def pp_layer_ranges(num_layers: int, pp_size: int, layer_partition: str | None = None) -> list[range]:
    """The decoder-layer indices each pipeline stage instantiates, e.g. 32 layers over 3 stages ->
    11, 11, 10 layers; 61 over 4 -> 15, 15, 16, 15; VLLM_PP_LAYER_PARTITION where given. The one
    split both the KV layers (`get_pp_indices`) and the weights of each stage follow."""
    if pp_size < 1:
        raise KvplanError(f"--pipeline-parallel-size must be at least 1, got {pp_size}")
    if pp_size > num_layers:
        raise KvplanError(f"--pipeline-parallel-size {pp_size} exceeds the model's {num_layers} layers")
    sizes, _ = pp_partition(num_layers, pp_size, layer_partition)
    ranges, start = [], 0
    for size in sizes:
        ranges.append(range(start, start + size))
        start += size
    return ranges
