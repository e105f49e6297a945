"""What-if questions about a target, answered by replanning it with vLLM's sizing functions:
the longest request that fits, the blocks a requirement needs, and the setting that gives
them ("raise gpu_memory_utilization to 0.93", "raise kv_cache_memory to ...")."""

from __future__ import annotations

from functools import lru_cache

from kvplan.errors import KvplanError
from kvplan.semantics.kv import sizing
from kvplan.units import format_gib
from kvplan.usecases.check.target import Target
from kvplan.usecases.plan import PlanRequest, PlanResult, plan, settle

# a pool this large always fits one request of any length; sizing it is arithmetic, nothing is allocated
AMPLE_BYTES = 1 << 44


@lru_cache(maxsize=64)
def planned(request: PlanRequest) -> PlanResult:
    return plan(request)


def model_limit(target: Target) -> int:
    """The longest max_model_len vLLM accepts for this model (its derived length)."""
    return settle(target.request.with_args(max_model_len=None)).max_model_len


def largest_max_model_len(target: Target) -> int:
    """The longest request one GPU's KV memory holds: vLLM's auto-fit (`--max-model-len -1`), at
    most the model's limit; 0 when not even one token fits."""
    if target.profile is not None and target.profile.largest_max_model_len is not None:
        return target.profile.largest_max_model_len
    if target.request.args.kv_cache_memory_bytes is None or target.request.args.kv_cache_memory_bytes <= 0:
        return 0
    result = planned(target.request.with_args(max_model_len=-1))
    return result.max_model_len if result.fits else 0


def bytes_for_max_model_len(target: Target, tokens: int) -> int:
    """KV memory per GPU that vLLM's check asks for one request of `tokens` tokens."""
    result = planned(target.request.with_args(max_model_len=tokens, kv_cache_memory_bytes=AMPLE_BYTES))
    return result.sizing.bytes_needed_for_one_max_len_request


def bytes_per_block(target: Target) -> int:
    """KV memory per GPU that one more block costs: num_blocks = memory // this (the worst
    pipeline stage's, since every stage gets the minimum block count)."""
    result = planned(target.request.with_args(kv_cache_memory_bytes=AMPLE_BYTES))
    return max(config.pool_bytes // config.num_blocks for config in result.sizing.worker_configs)


def blocks_per_request(target: Target, tokens: int, where: str) -> int:
    """The blocks vLLM's "Maximum concurrency" figure charges one request of `tokens` tokens."""
    limit = model_limit(target)
    if tokens > limit:
        raise KvplanError(f"{where}: tokens_per_request {tokens:,} is above the model's limit of {limit:,} tokens")
    result = planned(target.request.with_args(max_model_len=tokens, kv_cache_memory_bytes=AMPLE_BYTES))
    config, concurrency = result.kv_config, result.sizing.max_concurrency
    assert config is not None and concurrency is not None
    # vLLM's figure is num_blocks / blocks-per-request; recover that integer from the ample pool
    return round(config.num_blocks / concurrency)


def concurrency_at(target: Target, tokens: int, where: str) -> float | None:
    num_blocks = target.num_blocks
    if num_blocks is None:
        return None
    return num_blocks / blocks_per_request(target, tokens, where)


def blocks_for_kv_tokens(target: Target, tokens: int) -> int:
    """The fewest blocks whose "GPU KV cache size" figure is >= tokens, by the target's release."""
    plan = target.plan
    assert plan is not None
    per_request = blocks_per_request(target, plan.max_model_len, "kv tokens")
    return sizing.blocks_for_kv_tokens(tokens, plan.group_block_sizes, per_request, plan.max_model_len,
                                       target.request.release)


# ---------------------------------------------------------------------------- what to change


def advise_bytes(target: Target, kv_bytes: int, purpose: str = "") -> str:
    """The setting that gives the KV cache `kv_bytes` per GPU; `purpose` says what for ("8,192 blocks")."""
    budget = target.budget
    amount = f"{format_gib(kv_bytes)} GiB of KV cache" + (f" for {purpose}" if purpose else "")
    if budget is None:
        return f"raise kv_cache_memory to {kv_bytes:,} bytes ({amount})"
    from kvplan.semantics.memory.budget import utilization_for

    utilization = utilization_for(budget.total_bytes, budget.non_kv_bytes, kv_bytes, decimals=2)
    if utilization is None:
        return (f"{amount} per GPU is more than gpu_memory_utilization 1.0 leaves: use a GPU with more memory "
                "or shard the model (tensor_parallel_size)")
    return f"raise gpu_memory_utilization to {utilization:g} (from {budget.utilization:g}: {amount})"


def advise_blocks(target: Target, blocks: int) -> str:
    if target.request.args.num_gpu_blocks_override is not None:
        return f"raise num_gpu_blocks_override to {blocks:,}"
    return advise_bytes(target, blocks * bytes_per_block(target), f"{blocks:,} blocks")


def smaller_kv_per_token(target: Target, limit: float) -> str | None:
    """An fp8 KV cache or tensor parallelism that brings the KV bytes per token under `limit`."""
    request = target.request
    trials: list[tuple[str, PlanRequest]] = []
    if request.value("kv_cache_dtype") == "auto":
        trials.append(('kv_cache_dtype = "fp8"', request.with_args(kv_cache_dtype="fp8")))
    for size in (2, 4, 8):
        if size > request.value("tensor_parallel_size"):
            trials.append((f"tensor_parallel_size = {size}", request.with_args(tensor_parallel_size=size)))
    for change, trial in trials:
        try:
            per_token = planned(trial.with_args(kv_cache_memory_bytes=AMPLE_BYTES)).kv_bytes_per_token
        except KvplanError:
            continue  # vLLM refuses this split (heads not divisible)
        if per_token <= limit:
            return f"use {change} ({per_token:,} bytes per token per GPU)"
    return None
