"""vLLM's scheduler settings (`EngineArgs` defaults, `SchedulerConfig` checks): how many tokens and
requests one step may take, as `vllm serve` settles them. The GPU tiers of the defaults are the
release's `batch_defaults` policy (BATCH_DEFAULTS).

    batch_defaults(gpu_total_bytes, gpu_name, usage, capability=None, *, release) -> (tokens, seqs)
    resolve_batch_limits(max_model_len, max_num_batched_tokens=None, max_num_seqs=None, ...) -> BatchLimits
    verify_batch_limits(max_num_batched_tokens, max_num_seqs, max_model_len, enable_chunked_prefill) -> warnings"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from kvplan.errors import ConfigRejected
from kvplan.semantics.releases import BatchDefaults, Release

GiB = 1 << 30
Usage = Literal["openai_api_server", "llm_class"]


@dataclass(frozen=True)
class BatchLimits:
    max_num_batched_tokens: int
    max_num_seqs: int


# (tokens, seqs) for the LLM class and for the API server (`vllm serve`), per tier
_LARGEST = {"llm_class": (16384, 1024), "openai_api_server": (16384, 1024)}
_LARGE = {"llm_class": (16384, 1024), "openai_api_server": (8192, 1024)}
_SMALL = {"llm_class": (8192, 256), "openai_api_server": (2048, 256)}
GB10_CAPABILITY = (12, 1)


def _two_tiers(total: int, name: str, capability: tuple[int, int] | None) -> dict[str, tuple[int, int]]:
    """0.17.1: 70 GiB and more, except the A100, is large."""
    return _LARGE if total >= 70 * GiB and "a100" not in name else _SMALL


def _three_tiers(total: int, name: str, capability: tuple[int, int] | None) -> dict[str, tuple[int, int]]:
    """0.33.0: 160 GiB and more is largest (the API server too); GB10 stays small."""
    if total >= 160 * GiB:
        return _LARGEST
    if total >= 70 * GiB and "a100" not in name and capability != GB10_CAPABILITY:
        return _LARGE
    return _SMALL


# Release.batch_defaults -> the GPU tiers of `EngineArgs.get_batch_defaults`
BATCH_DEFAULTS: dict[BatchDefaults, Callable[[int, str, tuple[int, int] | None], dict[str, tuple[int, int]]]] = {
    "two_tiers": _two_tiers,
    "three_tiers": _three_tiers,
}


def batch_defaults(
    gpu_total_bytes: int | None, gpu_name: str = "", usage: Usage = "openai_api_server",
    capability: tuple[int, int] | None = None, *, release: Release,
) -> tuple[int, int]:
    """vLLM's `get_batch_defaults` on CUDA: (max_num_batched_tokens, max_num_seqs). An unknown GPU
    counts as a small one."""
    tiers = BATCH_DEFAULTS[release.batch_defaults](gpu_total_bytes or 0, gpu_name.lower(), capability)
    return tiers[usage]


def resolve_batch_limits(
    max_model_len: int,
    max_num_batched_tokens: int | None = None,
    max_num_seqs: int | None = None,
    *,
    gpu_total_bytes: int | None = None,
    gpu_name: str = "",
    gpu_capability: tuple[int, int] | None = None,
    usage: Usage = "openai_api_server",
    enable_chunked_prefill: bool = True,
    performance_mode: Literal["balanced", "interactivity", "throughput"] = "balanced",
    release: Release,
) -> BatchLimits:
    """The values `EngineArgs` settles on: the user's where given, else the defaults, adjusted."""
    default_tokens, default_seqs = batch_defaults(gpu_total_bytes, gpu_name, usage, gpu_capability, release=release)
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
