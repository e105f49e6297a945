"""What one GPU computes per token, read from a plan: the input of the roofline with factors.

The plan knows the model's shape (layers, heads, head size, vocabulary) and its weights as vLLM
loads them; the step time needs the parameters each token multiplies, the bytes each step
streams, and the weights' format as the kernels run it. Quantized checkpoints are timed as what
they are: fp8 at 1 byte per linear weight (the plan's own count), AWQ / GPTQ int4 at half a byte
per linear weight plus a 16-bit scale and zero point per group of 128 (docs/accuracy.md); a
method kvplan cannot price keeps the plan's bytes and says so (``compute_shape``'s notes).
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING

from kvplan.semantics.models.shape import ModelShape
from kvplan.usecases.simulate.timing import ComputeShape, KernelFacts

if TYPE_CHECKING:
    from kvplan.usecases.plan import PlanResult

# vLLM's int4 weight-only methods (their Marlin kernels dequantize to bf16/fp16 in the GEMM)
INT4_METHODS = ("awq", "awq_marlin", "gptq", "gptq_marlin", "marlin")
FP8_METHODS = ("fp8", "fbgemm_fp8", "modelopt")
INT4_GROUP_SIZE = 128
INT4_BYTES_PER_GROUP = 2 + 2      # a 16-bit scale and a 16-bit (or packed) zero point per group


def compute_shape(result: PlanResult) -> tuple[ComputeShape | None, tuple[str, ...]]:
    """The per-GPU compute shape of a planned model, and a note when its weights cannot be priced."""
    weights = result.weights
    shape = result.setup.shape
    if weights is None or not weights.total_params:
        return None, ()
    tp = result.request.value("tensor_parallel_size")
    pp = result.request.value("pipeline_parallel_size")
    method = result.setup.quantization
    vocab_params = shape.vocab_size * shape.hidden_size
    total = weights.total_params
    # the lm_head multiplies every token; an untied input embedding is a lookup, not a product
    matmul = total - (0 if shape.tie_word_embeddings else vocab_params)
    streamed = weights.per_rank_bytes
    if not shape.tie_word_embeddings:
        streamed -= vocab_params * 2 // tp
    fmt = _dtype_name(result.setup.model_dtype)
    notes: tuple[str, ...] = ()
    if method in INT4_METHODS:
        fmt = "int4"
        # the plan counted every parameter at the model dtype; linear weights (all but embeddings) are 4-bit
        linear = max(0, total - vocab_params * (1 if shape.tie_word_embeddings else 2))
        quantized = linear // 2 + linear // INT4_GROUP_SIZE * INT4_BYTES_PER_GROUP
        streamed = (quantized + vocab_params * 2) // tp
    elif method in FP8_METHODS:
        fmt = "fp8"
    elif method is not None:
        notes = (f"kvplan cannot price {method!r} weights: the step time streams the plan's weight bytes "
                 f"and multiplies at the {fmt} peak",)
    layers = _layers_per_gpu(shape, pp)
    attention = sum(1 for layer in shape.layers if layer.kind not in ("none", "unsupported", "mamba", "indexer"))
    return ComputeShape(
        matmul_params=matmul // tp,
        streamed_bytes=max(streamed, 0),
        num_layers=layers,
        attention_layers=max(1, attention // pp) if attention else 0,
        attention_heads=max(1, shape.num_attention_heads // tp),
        head_size=shape.head_size,
        weight_format=fmt,
    ), notes


def kernel_facts(result: PlanResult) -> KernelFacts:
    """The model's config and the plan's parallelism and KV-cache dtype, for measured kernel tables."""
    request = result.request
    return KernelFacts(
        model_config=json.dumps(result.setup.resolved.config, sort_keys=True),
        tensor_parallel_size=request.value("tensor_parallel_size"),
        pipeline_parallel_size=request.value("pipeline_parallel_size"),
        kv_cache_dtype=request.value("kv_cache_dtype"),
    )


def _layers_per_gpu(shape: ModelShape, pp: int) -> int:
    return -(-shape.num_hidden_layers // pp)


def _dtype_name(dtype: str) -> str:
    return {"bfloat16": "bf16", "float16": "fp16", "float32": "fp32"}.get(dtype, dtype)
