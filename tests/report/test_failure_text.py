"""Failure text people can act on (issue 24, item 9): weights that alone exceed the GPU are said to,
with the GPUs of that kind that would hold them; `fit` says a reason shared by many setups once
and lists the setups; durations read as "17 min 10 s"."""

from __future__ import annotations

import pytest

from kvplan.report.plan_console import _kv_memory
from kvplan.semantics.memory.weights_fit import weights_alone
from kvplan.units import format_duration

GIB = 1 << 30
DEEPSEEK = "deepseek-ai/DeepSeek-V3"


@pytest.mark.parametrize(("seconds", "shown"), [
    (1030, "17 min 10 s"), (1020, "17 min"), (0.5, "500 ms"), (0.0704, "70.4 ms"), (12.4, "12.4 s"),
    (59.6, "59.6 s"), (7500, "2 h 5 min"), (7200, "2 h"),
])
def test_durations_read_as_people_say_them(seconds, shown):
    assert format_duration(seconds) == shown


def test_weights_alone_count_the_gpus_that_would_hold_them():
    alone = weights_alone(627 * GIB, 627 * GIB, 80 * GIB, 0.9)
    assert alone is not None and alone.budget_bytes == 72 * GIB
    assert (alone.gpus_needed, alone.parallel_size) == (9, 16)          # 8 x 72 GiB < 627 GiB <= 9 x 72 GiB
    assert "the weights alone do not fit" in alone.sentence("h100-sxm-80gb")
    assert weights_alone(60 * GIB, 60 * GIB, 80 * GIB, 0.9) is None     # they fit: the KV cache is the question
    assert weights_alone(None, None, 80 * GIB, 0.9) is None


def test_a_negative_kv_budget_is_said_as_what_it_means():
    assert _kv_memory(-561 * GIB) == "none: the non-KV memory is 561.00 GiB more than the budget"
    assert _kv_memory(GIB).startswith("1,073,741,824 B")


def test_plan_says_the_weights_alone_do_not_fit(kvplan):
    code, out, _ = kvplan("plan", DEEPSEEK, "--gpu", "h100-sxm-80gb", "--kv-cache-memory", "1GiB")
    assert code == 1
    text = " ".join(out.split())
    assert "the weights alone do not fit: 627.12 GiB per GPU" in text and "at least 9 GPUs of that kind" in text


def test_fit_says_a_shared_reason_once_and_lists_the_setups(kvplan):
    code, out, _ = kvplan("fit", "--model", DEEPSEEK, "--concurrency", "1@1024", "--gpus",
                          "l4-24gb,h100-sxm-80gb,a100-sxm-80gb", "--kv-cache-memory", "100MiB",
                          "--max-model-len", "4096", "--workers", "1")
    assert code == 1
    assert out.count("To serve at least one request") == 1
    for gpu, needed in (("l4-24gb", 32), ("h100-sxm-80gb", 9), ("a100-sxm-80gb", 9)):
        assert f"{gpu} x1 (TP1) auto: the weights alone do not fit" in out
        assert f"at least {needed} GPUs" in out
