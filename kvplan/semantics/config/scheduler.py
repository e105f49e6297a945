"""vLLM 0.17.1's scheduler settings (`EngineArgs` defaults, `SchedulerConfig` checks): how many tokens
and requests one step may take, as `vllm serve` settles them.

    batch_defaults(gpu_total_bytes, gpu_name, usage) -> (max_num_batched_tokens, max_num_seqs)
    resolve_batch_limits(max_model_len, max_num_batched_tokens=None, max_num_seqs=None, ...) -> BatchLimits
    verify_batch_limits(max_num_batched_tokens, max_num_seqs, max_model_len, enable_chunked_prefill) -> warnings"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kvplan.errors import ConfigRejected

GiB = 1 << 30
Usage = Literal["openai_api_server", "llm_class"]


@dataclass(frozen=True)
class BatchLimits:
    max_num_batched_tokens: int
    max_num_seqs: int


def batch_defaults(
    gpu_total_bytes: int | None, gpu_name: str = "", usage: Usage = "openai_api_server"
) -> tuple[int, int]:
    """vLLM's `get_batch_defaults` on CUDA: (max_num_batched_tokens, max_num_seqs).

    Large GPUs other than the A100 get bigger batches; an unknown GPU counts as a small one."""
    large = (gpu_total_bytes or 0) >= 70 * GiB and "a100" not in gpu_name.lower()
    if large:
        return (16384, 1024) if usage == "llm_class" else (8192, 1024)
    return (8192, 256) if usage == "llm_class" else (2048, 256)


def resolve_batch_limits(
    max_model_len: int,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    *,
    gpu_total_bytes: int | None = None,
    gpu_name: str = "",
    usage: Usage = "openai_api_server",
    enable_chunked_prefill: bool = True,
    performance_mode: Literal["balanced", "interactivity", "throughput"] = "balanced",
) -> BatchLimits:
    """The values `EngineArgs` settles on: the user's where given, else the defaults, adjusted."""
    default_tokens, default_seqs = batch_defaults(gpu_total_bytes, gpu_name, usage)
    tokens = default_tokens if max_num_batched_tokens is None else max_num_batched_tokens
    seqs = default_seqs if max_num_seqs is None else max_num_seqs
    if performance_mode == "throughput":
        tokens = tokens * 2 if max_num_batched_tokens is None else tokens
        seqs = seqs * 2 if max_num_seqs is None else seqs
    if max_num_batched_tokens is None:
        if not enable_chunked_prefill:
            tokens = max(max_model_len, tokens)
        tokens = min(seqs * max_model_len, tokens)
    if max_num_seqs is None:
        seqs = min(seqs, tokens)
    return BatchLimits(tokens, seqs)


def verify_batch_limits(
    max_num_batched_tokens: int, max_num_seqs: int, max_model_len: int, enable_chunked_prefill: bool = True
) -> tuple[str, ...]:
    """`SchedulerConfig.verify_max_model_len`: errors raise, the warning is returned."""
    if max_num_batched_tokens < max_model_len and not enable_chunked_prefill:
        raise ConfigRejected(
            f"max_num_batched_tokens ({max_num_batched_tokens}) is smaller than max_model_len "
            f"({max_model_len}). This effectively limits the maximum sequence length to "
            "max_num_batched_tokens and makes vLLM reject longer sequences. Please increase "
            "max_num_batched_tokens or decrease max_model_len."
        )
    if max_num_batched_tokens < max_num_seqs:
        raise ConfigRejected(
            f"max_num_batched_tokens ({max_num_batched_tokens}) must be greater than or equal to "
            f"max_num_seqs ({max_num_seqs})."
        )
    if max_num_batched_tokens > max_num_seqs * max_model_len:
        return (
            f"max_num_batched_tokens ({max_num_batched_tokens}) exceeds max_num_seqs * max_model_len "
            f"({max_num_seqs * max_model_len}). This may lead to unexpected behavior.",
        )
    return ()
