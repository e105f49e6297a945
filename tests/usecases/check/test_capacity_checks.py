"""Capacity assertions on vLLM 0.17.1's worked example, and hints that are exact: the change they
name is the smallest that makes the assertion hold."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvplan.errors import KvplanError
from kvplan.semantics.memory.budget import requested_memory
from kvplan.usecases.check import whatif
from kvplan.usecases.check.assertions import KINDS, Assertion, Concurrency
from kvplan.usecases.check.capacity_checks import evaluate_capacity
from kvplan.usecases.check.target import Budget
from kvplan.usecases.plan import plan
from tests.usecases.check.factories import GOLDEN_KV_BYTES, qwen_target


def check(target, key, required):
    return evaluate_capacity(Assertion(KINDS[key], required, f"assert[0].{key}"), target)


def test_measured_figures_are_vllms():
    target = qwen_target()
    assert check(target, "min_num_blocks", 131928).measured == 131928
    assert check(target, "min_usable_blocks", 1).measured == 131927
    assert check(target, "min_kv_tokens", 1).measured == 2_110_848
    assert check(target, "min_concurrency", Concurrency(1)).measured == 131928 / 2048  # "64.42x"
    assert check(target, "max_kv_bytes_per_token", 12288).measured == 12288
    assert check(target, "min_kv_cache_memory", 1).measured == GOLDEN_KV_BYTES
    assert check(target, "max_model_len_fits", 32768).measured == 32768


def test_concurrency_at_another_length_uses_vllms_formula():
    # 8,192 tokens = 512 blocks a request: 131,928 / 512
    result = check(qwen_target(), "min_concurrency", Concurrency(300, 8192))
    assert result.measured == 131928 / 512
    assert not result.passed and result.margin == pytest.approx(131928 / 512 - 300)


def test_max_model_len_fits_is_vllms_auto_fit():
    # vLLM: 300 MiB for Qwen2-0.5B -> "the estimated maximum model length is 25600"
    result = check(qwen_target(kv_cache_memory_bytes=300 * 2**20), "max_model_len_fits", 32768)
    assert (result.measured, result.passed, result.margin) == (25600, False, -7168)
    assert "402,653,184 bytes" in result.hint  # 2048 blocks x 8192 x 24: one 32,768-token request


def test_a_length_above_the_models_limit_says_so():
    result = check(qwen_target(), "max_model_len_fits", 40000)
    assert result.measured == 32768
    assert "above the model's limit of 32,768" in result.hint


def test_a_target_that_does_not_fit():
    target = qwen_target(kv_cache_memory_bytes=300 * 2**20)
    fits = check(target, "fits", True)
    assert not fits.passed
    assert fits.hint == ("raise kv_cache_memory to 402,653,184 bytes (0.38 GiB of KV cache) "
                         "or lower max_model_len to 25600")
    blocks = check(target, "min_num_blocks", 100)
    assert blocks.measured is None and not blocks.passed
    assert check(target, "max_kv_bytes_per_token", 12288).passed  # a property of the model, fit or not


@pytest.mark.parametrize(("key", "required", "blocks"), [
    ("min_num_blocks", 131929, 131929),
    ("min_usable_blocks", 131928, 131929),
    ("min_kv_tokens", 2_110_849, 131929),          # 131,929 blocks hold 2,110,864 tokens
    ("min_concurrency", Concurrency(65), 65 * 2048),
])
def test_kv_memory_hints_are_the_smallest_that_hold(key, required, blocks):
    target = qwen_target()
    result = check(target, key, required)
    assert not result.passed
    needed = blocks * 196608  # 24 layers x 8,192-byte pages per block
    assert f"raise kv_cache_memory to {needed:,} bytes" in result.hint
    assert f"for {blocks:,} blocks" in result.hint
    assert check(qwen_target(kv_cache_memory_bytes=needed), key, required).passed
    assert not check(qwen_target(kv_cache_memory_bytes=needed - 1), key, required).passed


def test_utilization_hints_are_the_smallest_that_hold():
    # a profile-like budget: an 80 GB device, 2 GiB of weights and activations
    total, non_kv = 80 * 10**9, 2 * 2**30
    budget = Budget(total, non_kv, 0.9)
    base = qwen_target(kv_cache_memory_bytes=requested_memory(total, 0.5) - non_kv)
    target = replace(base, budget=budget)
    required = base.plan.num_blocks * 3 // 2
    result = check(target, "min_num_blocks", required)
    utilization = float(result.hint.split("raise gpu_memory_utilization to ")[1].split()[0])

    def blocks_at(u: float) -> int:
        return plan(target.request.with_args(kv_cache_memory_bytes=requested_memory(total, u) - non_kv)).num_blocks

    assert blocks_at(utilization) >= required > blocks_at(round(utilization - 0.01, 2))


def test_utilization_that_cannot_suffice_says_so():
    target = replace(qwen_target(), budget=Budget(30 * 2**30, 2**30, 0.9))
    result = check(target, "min_num_blocks", 10**6)
    assert "more than gpu_memory_utilization 1.0 leaves" in result.hint


def test_num_gpu_blocks_override_is_the_knob_when_set():
    result = check(qwen_target(num_gpu_blocks_override=1000), "min_num_blocks", 5000)
    assert result.measured == 1000
    assert result.hint == "raise num_gpu_blocks_override to 5,000"


def test_kv_bytes_per_token_hint_is_computed():
    result = check(qwen_target(), "max_kv_bytes_per_token", 8000)
    assert result.hint == 'use kv_cache_dtype = "fp8" (6,144 bytes per token per GPU)'
    fp8 = qwen_target(kv_cache_dtype="fp8")
    assert check(fp8, "max_kv_bytes_per_token", 6144).passed
    # Qwen2-0.5B has 2 KV heads: TP 2 halves them, TP 4 replicates (vLLM: max(1, heads // tp))
    assert "tensor_parallel_size = 2 (3,072 bytes" in check(fp8, "max_kv_bytes_per_token", 4000).hint


def test_profile_only_kinds_need_a_profile():
    with pytest.raises(KvplanError, match=r"assert\[0\].max_activation_peak_bytes: .* profile only"):
        check(qwen_target(), "max_activation_peak_bytes", 2**30)


def test_tokens_per_request_above_the_limit_is_bad_input():
    with pytest.raises(KvplanError, match="tokens_per_request 65,536 is above the model's limit of 32,768"):
        check(qwen_target(), "min_concurrency", Concurrency(1, 65536))


def test_bytes_per_block_is_the_worst_pipeline_stage():
    # 24 layers over 5 stages: the largest stage has 5 layers
    target = qwen_target(pipeline_parallel_size=5)
    assert whatif.bytes_per_block(target) == 5 * 8192
    assert target.plan.num_blocks == GOLDEN_KV_BYTES // (5 * 8192)


def test_weights_that_could_not_be_counted_fail_with_how_to_count_them():
    target = qwen_target()
    assert target.plan is not None
    uncounted = replace(target, plan=replace(target.plan, weights_bytes=None, weights_per_gpu_bytes=None))
    result = check(uncounted, "max_weights_bytes", 10**12)
    assert not result.passed and result.measured is None
    assert "weights unknown" in result.detail and "kvplan profile --save" in result.hint
    counted = check(target, "max_weights_bytes", 1)
    assert not counted.passed and "weights alone exceed it" in counted.hint
