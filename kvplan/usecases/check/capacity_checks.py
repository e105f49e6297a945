"""Capacity assertions: one figure of the target's plan (or profile) each, and for a failure the one
change that makes it hold, computed with the sizing functions."""

from __future__ import annotations

import math
from typing import Any

from kvplan.errors import KvplanError
from kvplan.usecases.check import whatif
from kvplan.usecases.check.assertions import PROFILE_ONLY, Assertion, AssertionResult, Concurrency, verdict
from kvplan.usecases.check.target import Target

GROUP = "capacity"
# figures that exist only once vLLM has sized a pool
POOL_FIGURES = ("min_kv_tokens", "min_num_blocks", "min_usable_blocks", "min_concurrency")


def evaluate_capacity(assertion: Assertion, target: Target) -> AssertionResult:
    measured, detail = capacity_figure(assertion, target)
    passed, margin = verdict(assertion.kind, assertion.required, measured)
    hint = None if passed else what_to_change(assertion, target)
    return AssertionResult(assertion.name, GROUP, assertion.kind, assertion.required, measured, passed, margin,
                           hint, detail)


def capacity_figure(assertion: Assertion, target: Target) -> tuple[Any, str]:
    """The figure of the plan or the profile the assertion tests, and where it comes from."""
    key = assertion.kind.key
    profile, plan = target.profile, target.plan
    if key in PROFILE_ONLY:
        if profile is None:
            raise KvplanError(f"{assertion.where}: {key} is measured by a profile only: give target.profile "
                              "(a file from `kvplan profile --save`)")
        measured = profile.activation_peak_bytes if key == "max_activation_peak_bytes" else profile.non_torch_bytes
        return measured, "measured by the profile"
    if key == "fits":
        return target.fits, ""
    if not target.fits and key in POOL_FIGURES:
        return None, "vLLM would not start: the target does not fit"
    if key == "max_model_len_fits":
        return whatif.largest_max_model_len(target), "vLLM's auto-fit (max_model_len -1)"
    if plan is None:
        return None, ""
    if key == "min_kv_tokens":
        return plan.gpu_kv_cache_tokens, ""
    if key == "min_num_blocks":
        return plan.num_blocks, ""
    if key == "min_usable_blocks":
        return plan.num_usable_blocks, ""
    if key == "min_concurrency":
        required: Concurrency = assertion.required
        if required.tokens_per_request is None:
            return plan.max_concurrency, f"at max_model_len {plan.max_model_len:,}"
        tokens = required.tokens_per_request
        return whatif.concurrency_at(target, tokens, assertion.where), f"at {tokens:,} tokens per request"
    if key == "min_kv_cache_memory":
        if profile is not None:
            return profile.available_kv_bytes, ""
        return plan.kv_cache_memory_bytes, ""
    if key == "max_kv_bytes_per_token":
        return plan.kv_bytes_per_token, ""
    if key == "max_weights_bytes":
        if profile is not None:
            return profile.weights_bytes, "measured by the profile"
        if plan.weights_per_gpu_bytes is None:
            return None, "weights unknown: kvplan could not count them for this model"
        return plan.weights_per_gpu_bytes, "per GPU"
    raise AssertionError(f"no capacity measurement for {key}")


def what_to_change(assertion: Assertion, target: Target) -> str:
    key, required = assertion.kind.key, assertion.required
    plan = target.plan
    if plan is None:
        error = (target.profile.error if target.profile else None) or "the profile did not reach sizing"
        return f"vLLM would not start ({error.split('. ')[0]}): lower gpu_memory_utilization or free the GPU"
    if key == "max_kv_bytes_per_token":
        return whatif.smaller_kv_per_token(target, required) or (
            "no fp8 KV cache or tensor-parallel split up to 8 GPUs brings it that low")
    if key == "max_weights_bytes":
        if target.profile is None and plan.weights_per_gpu_bytes is None:
            return ("count the weights with a profile: give target.profile (a file from `kvplan profile --save`), "
                    "or install kvplan's profile extra so the plan can build the model")
        return "the weights alone exceed it: shard them (tensor_parallel_size) or use a quantized checkpoint"
    if key == "max_activation_peak_bytes":
        tokens = target.profile.profile_run_tokens if target.profile else None
        return f"lower max_num_batched_tokens (the profile run's batch, {tokens:,} tokens here)" if tokens else (
            "lower max_num_batched_tokens (the profile run's batch)")
    if key == "max_non_torch_bytes":
        return ("memory outside torch (CUDA context, cuBLAS, NCCL, other processes) exceeds it: "
                "free the GPU of other work")
    if key == "max_model_len_fits":
        limit = whatif.model_limit(target)
        if required > limit:
            return f"{required:,} tokens is above the model's limit of {limit:,}: vLLM refuses a longer max_model_len"
    blocks = _blocks_needed(assertion, target)
    if blocks is not None and target.request.args.num_gpu_blocks_override is not None:
        return f"raise num_gpu_blocks_override to {blocks:,}"
    needed = _bytes_needed(assertion, target) if blocks is None else blocks * whatif.bytes_per_block(target)
    # vLLM refuses to start until one max_model_len request fits, whatever else is asked
    fit_needed = 0 if target.fits else plan.bytes_needed_for_one_max_len_request or 0
    purpose = ""
    if blocks is not None and needed >= fit_needed:
        purpose = f"{blocks:,} blocks"
    elif key == "max_model_len_fits":
        purpose = f"one {required:,}-token request"
    advice = whatif.advise_bytes(target, max(needed, fit_needed), purpose)
    estimated = plan.estimated_max_model_len
    if fit_needed and estimated and needed <= (target.request.args.kv_cache_memory_bytes or 0):
        advice += f" or lower max_model_len to {estimated}"
    return advice


def _blocks_needed(assertion: Assertion, target: Target) -> int | None:
    """The pool size the requirement asks for, for the kinds that count blocks."""
    key, required = assertion.kind.key, assertion.required
    if key == "min_kv_tokens":
        return whatif.blocks_for_kv_tokens(target, required)
    if key == "min_num_blocks":
        return required
    if key == "min_usable_blocks":
        return required + 1
    if key == "min_concurrency":
        assert target.plan is not None
        tokens = required.tokens_per_request or target.plan.max_model_len
        return math.ceil(required.at_least * whatif.blocks_per_request(target, tokens, assertion.where))
    return None


def _bytes_needed(assertion: Assertion, target: Target) -> int:
    key, required = assertion.kind.key, assertion.required
    if key == "max_model_len_fits":
        return whatif.bytes_for_max_model_len(target, required)
    if key == "min_kv_cache_memory":
        return required
    return 0  # fits: only the memory check's own need
