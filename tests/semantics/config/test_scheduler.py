"""vLLM's scheduler settings: batch defaults (per release) and their checks."""

from __future__ import annotations

import pytest

from kvplan.errors import ConfigRejected
from kvplan.semantics.config import scheduler
from kvplan.semantics.releases import VLLM_0_17_1, VLLM_0_33_0

GiB = 1 << 30
H100 = (9, 0)
A100 = (8, 0)


@pytest.mark.parametrize(
    ("total", "name", "usage", "expected"),
    [
        (80 * GiB, "NVIDIA H100 80GB HBM3", "openai_api_server", (8192, 1024)),
        (80 * GiB, "NVIDIA H100 80GB HBM3", "llm_class", (16384, 1024)),
        (80 * GiB, "NVIDIA A100-SXM4-80GB", "openai_api_server", (2048, 256)),
        (80 * GiB, "NVIDIA A100-SXM4-80GB", "llm_class", (8192, 256)),
        (48 * GiB, "NVIDIA L40S", "openai_api_server", (2048, 256)),
        (None, "", "openai_api_server", (2048, 256)),
    ],
)
def test_batch_defaults(total, name, usage, expected) -> None:
    assert scheduler.batch_defaults(total, name, usage, release=VLLM_0_17_1) == expected
    # below 160 GiB, 0.33.0 picks what 0.17.1 does
    assert scheduler.batch_defaults(total, name, usage, release=VLLM_0_33_0) == expected


@pytest.mark.parametrize(
    ("total", "name", "capability", "usage", "in_0_17_1", "in_0_33_0"),
    [
        # 0.33.0's tier for 160 GiB and more: the API server takes 16384 tokens too
        (178 * GiB, "NVIDIA B200", (10, 0), "openai_api_server", (8192, 1024), (16384, 1024)),
        (178 * GiB, "NVIDIA B200", (10, 0), "llm_class", (16384, 1024), (16384, 1024)),
        (192 * GiB, "AMD Instinct MI300X", None, "openai_api_server", (8192, 1024), (16384, 1024)),
        # GB10 (compute capability 12.1) has the memory of a large GPU but stays on the small tier
        (119 * GiB, "NVIDIA GB10", (12, 1), "openai_api_server", (8192, 1024), (2048, 256)),
        (119 * GiB, "NVIDIA GB10", (12, 1), "llm_class", (16384, 1024), (8192, 256)),
    ],
)
def test_batch_default_tiers_by_release(total, name, capability, usage, in_0_17_1, in_0_33_0) -> None:
    assert scheduler.batch_defaults(total, name, usage, capability, release=VLLM_0_17_1) == in_0_17_1
    assert scheduler.batch_defaults(total, name, usage, capability, release=VLLM_0_33_0) == in_0_33_0


def limits(*args, **kwargs) -> scheduler.BatchLimits:
    return scheduler.resolve_batch_limits(*args, **kwargs, release=VLLM_0_17_1)


def test_batch_limits_adjustments() -> None:
    # chunked prefill off: the batch must hold a whole max_model_len prompt
    assert limits(32768, enable_chunked_prefill=False) == scheduler.BatchLimits(32768, 256)
    # never more than max_num_seqs full-length requests; seqs never above the token budget
    assert limits(4, max_num_seqs=100) == scheduler.BatchLimits(400, 100)
    assert limits(4096, max_num_batched_tokens=128) == scheduler.BatchLimits(128, 128)
    assert limits(4096, performance_mode="throughput") == scheduler.BatchLimits(4096, 512)
    # user values stay as given
    assert limits(8192, 1000, 64) == scheduler.BatchLimits(1000, 64)


def test_scheduler_validation_texts() -> None:
    with pytest.raises(ConfigRejected, match=r"max_num_batched_tokens \(2048\) is smaller than max_model_len"):
        scheduler.verify_batch_limits(2048, 256, 8192, enable_chunked_prefill=False)
    with pytest.raises(ConfigRejected) as rejected:
        scheduler.verify_batch_limits(128, 256, 8192)
    assert str(rejected.value) == "max_num_batched_tokens (128) must be greater than or equal to max_num_seqs (256)."
    assert scheduler.verify_batch_limits(2048, 256, 8192) == ()
    assert scheduler.verify_batch_limits(8192, 1, 4096) == (
        "max_num_batched_tokens (8192) exceeds max_num_seqs * max_model_len (4096). "
        "This may lead to unexpected behavior.",
    )
