"""vLLM 0.17.1's scheduler settings: batch defaults and their checks."""

from __future__ import annotations

import pytest

from kvplan.errors import ConfigRejected
from kvplan.semantics.config import scheduler

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
    assert scheduler.batch_defaults(total, name, usage) == expected


def test_batch_limits_adjustments() -> None:
    # chunked prefill off: the batch must hold a whole max_model_len prompt
    assert scheduler.resolve_batch_limits(32768, enable_chunked_prefill=False) == scheduler.BatchLimits(32768, 256)
    # never more than max_num_seqs full-length requests; seqs never above the token budget
    assert scheduler.resolve_batch_limits(4, max_num_seqs=100) == scheduler.BatchLimits(400, 100)
    assert scheduler.resolve_batch_limits(4096, max_num_batched_tokens=128) == scheduler.BatchLimits(128, 128)
    assert scheduler.resolve_batch_limits(4096, performance_mode="throughput") == scheduler.BatchLimits(4096, 512)
    # user values stay as given
    assert scheduler.resolve_batch_limits(8192, 1000, 64) == scheduler.BatchLimits(1000, 64)


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
