"""vLLM 0.17.1's accounting from the start-up snapshot to the KV budget, and its log lines (0.33.0's:
test_budget_0_33.py)."""

from __future__ import annotations

import math
from dataclasses import replace

from kvplan.semantics.memory.budget import (
    REDUNDANCY_BUFFER_BYTES,
    MemoryBudget,
    available_memory_lines,
    kv_cache_memory_suggestion,
    logs_kv_cache_memory_suggestion,
    model_loading_line,
    requested_memory,
    startup_refusal,
    utilization_for,
)
from kvplan.semantics.releases import VLLM_0_17_1, VLLM_0_33_0

H100 = 85_045_477_376
GIB = 1 << 30


def test_requested_is_the_float_product_rounded_up():
    assert requested_memory(H100, 0.9) == math.ceil(H100 * 0.9)
    assert requested_memory(10, 0.25) == 3
    assert requested_memory(H100, 1.0) == H100


def test_startup_refusal_uses_vllms_text():
    assert startup_refusal(H100, H100, 0.9, "cuda:0") is None
    message = startup_refusal(12 * GIB, 24 * GIB, 0.92, "cuda:0")
    assert message == (
        "Free memory on device cuda:0 (12.0/24.0 GiB) on startup is less than desired GPU memory "
        "utilization (0.92, 22.08 GiB). Decrease GPU memory utilization or reduce GPU memory used by "
        "other processes."
    )


def test_available_is_requested_minus_non_kv():
    budget = MemoryBudget(H100, H100, 0.9, weights_bytes=988_097_536, activation_peak_bytes=2_276_759_552,
                          non_torch_bytes=100, release=VLLM_0_17_1)
    assert budget.non_kv_bytes == 988_097_536 + 2_276_759_552 + 100
    assert budget.available_kv_bytes == math.ceil(H100 * 0.9) - budget.non_kv_bytes
    assert available_memory_lines(budget) == (
        f"Available KV cache memory: {round(budget.available_kv_bytes / GIB, 2)} GiB",
    )


def test_kv_cache_memory_skips_profiling_with_vllms_line():
    budget = MemoryBudget(H100, H100, 0.9, 10, 10, 0, kv_cache_memory_override=25_938_100_224, release=VLLM_0_17_1)
    assert budget.available_kv_bytes == 25_938_100_224
    (line,) = available_memory_lines(budget)
    assert line.startswith("Initial free memory 79.2 GiB, reserved 24.16 GiB memory for KV Cache as specified")


def test_model_loading_line():
    assert model_loading_line(988_097_536) == "Model loading took 0.92 GiB memory"


def test_suggestion_follows_compile_or_warm_up_model():
    budget = MemoryBudget(H100, H100 - GIB, 0.9, 2 * GIB, GIB, GIB // 2, release=VLLM_0_17_1)
    suggestion = kv_cache_memory_suggestion(budget, cuda_graph_bytes=GIB // 4)
    non_kv = 2 * GIB + GIB + GIB // 2 + GIB // 4
    assert suggestion.to_requested_limit == math.ceil(H100 * 0.9) - non_kv - REDUNDANCY_BUFFER_BYTES
    assert suggestion.to_gpu_limit == H100 - GIB - non_kv - REDUNDANCY_BUFFER_BYTES
    assert f"`--kv-cache-memory={suggestion.to_requested_limit}`" in suggestion.line
    assert "0.25 GiB for CUDAGraph memory" in suggestion.line
    assert suggestion.log_level == "DEBUG"       # 0.17.1: `logger.debug(msg)`
    assert kv_cache_memory_suggestion(replace(budget, release=VLLM_0_33_0), 0).log_level == "INFO"


def test_the_suggestion_is_logged_only_once_the_kv_cache_exists_after_a_memory_profile():
    """`compile_or_warm_up_model` runs after `get_kv_cache_configs`, which raises when the cache does
    not fit, and suggests only when kv_cache_memory_bytes is unset (both releases)."""
    profiled = MemoryBudget(H100, H100, 0.9, 2 * GIB, GIB, 0, release=VLLM_0_17_1)
    given = replace(profiled, kv_cache_memory_override=20 * GIB)
    for release in (VLLM_0_17_1, VLLM_0_33_0):
        assert logs_kv_cache_memory_suggestion(replace(profiled, release=release), kv_cache_created=True)
        assert not logs_kv_cache_memory_suggestion(replace(profiled, release=release), kv_cache_created=False)
        assert not logs_kv_cache_memory_suggestion(replace(given, release=release), kv_cache_created=True)


def test_utilization_for_is_the_smallest_that_fits():
    non_kv, needed = 5 * GIB, 402_653_184
    util = utilization_for(H100, non_kv, needed)
    assert util is not None
    assert requested_memory(H100, util) - non_kv >= needed
    assert requested_memory(H100, round(util - 0.0001, 4)) - non_kv < needed
    assert utilization_for(H100, H100, 1) is None
