"""The command line's text for fit: objectives, goals, rates, prices and lists, one line per mistake."""

from __future__ import annotations

import pytest

from kvplan.errors import KvplanError
from kvplan.usecases.fit.request import (
    ConcurrencyTarget,
    SloBound,
    parse_concurrency,
    parse_list,
    parse_prices,
    parse_rate,
    parse_slo,
    read_list,
)


def test_objectives():
    assert parse_slo("ttft_p95=500ms, tpot_p95=0.06s,preemptions=0,e2e_max=2") == (
        SloBound("ttft_p95", 0.5), SloBound("tpot_p95", 0.06), SloBound("preemptions", 0.0), SloBound("e2e_max", 2.0))
    assert parse_slo(None) == ()
    assert SloBound("ttft_p95", 0.5).describe() == "ttft_p95 <= 500 ms"
    assert SloBound("preemptions", 0).describe() == "preemptions <= 0"


@pytest.mark.parametrize(("text", "message"), [
    ("ttft_p96=1s", "unknown objective 'ttft_p96'"),
    ("ttft_p95", "write KEY=VALUE"),
    ("ttft_p95=fast", "not a duration"),
    ("ttft_p95=0ms", "positive duration"),
    ("preemptions=0.5", "takes a whole number"),
    ("preemptions=-1", "0 or more"),
    ("ttft_p95=1s,ttft_p95=2s", "given twice"),
])
def test_bad_objectives(text, message):
    with pytest.raises(KvplanError, match=message):
        parse_slo(text)


def test_goals_rates_and_prices():
    assert parse_concurrency("32@8_192") == ConcurrencyTarget(32, 8192)
    assert parse_rate("5/s") == parse_rate("5") == parse_rate("300/min") == 5.0
    assert parse_prices("h100-sxm-80gb=2.5,l4-24=0.8") == (("h100-sxm-80gb", 2.5), ("l4-24gb", 0.8))
    for bad in ("32", "32@", "@8192", "0@8192", "x@1"):
        with pytest.raises(KvplanError, match="REQUESTS@TOKENS"):
            parse_concurrency(bad)
    for bad in ("fast", "0/s", "5/day", "-1"):
        with pytest.raises(KvplanError, match="requests per second"):
            parse_rate(bad)
    with pytest.raises(KvplanError, match="GPU=PRICE"):
        parse_prices("h100-sxm-80gb")
    with pytest.raises(KvplanError, match="unknown GPU"):
        parse_prices("tpu-v5=1")


def test_lists():
    assert parse_list("l4-24gb, h100-sxm-80gb", "--gpus", str) == ("l4-24gb", "h100-sxm-80gb")
    # each item is read as the flag's own value: typer's type, then the setting's reader and range
    assert read_list("tensor_parallel_size", "1, 2,4", "--tp") == (1, 2, 4)
    assert read_list("gpu_memory_utilization", "0.9,0.95,1") == (0.9, 0.95, 1.0)
    assert read_list("max_num_batched_tokens", "2048,8K") == (2048, 8192)
    assert read_list("kv_cache_memory_bytes", "1GiB,1073741825") == (1 << 30, (1 << 30) + 1)
    assert read_list("max_model_len", "4096,32K") == (4096, 32768)
    assert read_list("tensor_parallel_size", None) == ()
    for text, message in (("1,,2", "empty item"), ("1,two", "'two' is not"), ("0", "--tp: 0 is out of range"),
                          ("2,2", "given twice"), ("2,02", "'02' is given twice")):
        with pytest.raises(KvplanError, match=message):
            read_list("tensor_parallel_size", text, "--tp")
