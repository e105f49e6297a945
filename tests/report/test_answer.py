"""The answer `plan` and `profile` lead with (issue 24, items 3 and 6): KV memory per GPU with
what is exact and what is predicted (and the measured margin of a prediction), blocks and tokens,
concurrency at max_model_len and at --prompt-len, what to try next, before the breakdown."""

from __future__ import annotations

import io
import json
import math

import pytest
from rich.console import Console

from kvplan.report.plan_console import render_plan
from kvplan.semantics.kv.sizing import concurrency_at_length, sizing_limits
from kvplan.semantics.releases import RELEASES
from kvplan.units import format_gib
from kvplan.usecases.accuracy import kv_memory_margin
from kvplan.usecases.plan import PlanRequest, plan
from tests.edge import offline_home, run_cli

MODEL = "Qwen/Qwen2-0.5B-Instruct"


def shown(result) -> list[str]:
    stream = io.StringIO()
    render_plan(result, Console(file=stream, width=200, color_system=None, highlight=False))
    return stream.getvalue().splitlines()


@pytest.mark.parametrize("version", sorted(RELEASES))
def test_the_concurrency_at_max_model_len_is_vllms_figure(version):
    result = plan(PlanRequest.of(model=MODEL, kv_cache_memory_bytes=4 << 30, max_model_len=8192,
                              prompt_lens=(1024, 8192), release=RELEASES[version]))
    limits = sizing_limits(8192, result.setup.batch.max_num_batched_tokens, release=RELEASES[version])
    config = result.kv_config
    assert concurrency_at_length(config, limits, RELEASES[version], 8192) == result.sizing.max_concurrency
    [(short, at_short), (full, at_full)] = result.concurrency_at_lengths
    assert (short, full) == (1024, 8192) and at_full == result.sizing.max_concurrency
    # full attention: a 1,024-token request takes 1,024 / block_size blocks of the pool
    assert at_short == config.num_blocks / (1024 // result.setup.layout.block_size)


def test_lengths_past_max_model_len_are_left_out():
    result = plan(PlanRequest.of(model=MODEL, kv_cache_memory_bytes=4 << 30, max_model_len=2048))
    assert [tokens for tokens, _ in result.concurrency_at_lengths] == [1024]


def test_the_answer_comes_first_and_says_what_is_exact():
    result = plan(PlanRequest.of(model=MODEL, kv_cache_memory_bytes=4 << 30, max_model_len=8192, block_size=16))
    lines = shown(result)
    assert lines[1] == "KV cache per GPU: 4.0 GiB (as given)"
    assert f"{result.num_blocks:,} blocks of 16 tokens" in lines[2] and "exact" in lines[2]
    at_once = lines[3]
    assert f"{result.sizing.max_concurrency:,.2f}x at max_model_len 8,192 (vLLM's figure)" in at_once
    assert f"{math.floor(result.num_blocks / 64):,} requests of 1,024 tokens" in at_once
    assert lines[4].startswith("  next: --kv-cache-dtype fp8")
    assert lines.index("vLLM would log:") < next(i for i, line in enumerate(lines) if line.startswith("model "))


def test_a_predicted_memory_carries_the_margin_measured_against_real_logs():
    margin = kv_memory_margin()
    assert margin.num_logs >= 6 and 0 < margin.median_bytes <= margin.max_bytes
    with offline_home():
        code, out, err = run_cli(["plan", "--model", MODEL, "--gpu", "l4-24gb", "--prompt-len", "2048"])
    assert code == 0, err
    text = " ".join(out.split())         # the console wraps at 80 columns
    assert "KV cache per GPU: " in text.split("predicted; real vLLM start-ups differed by "
                                              f"{format_gib(margin.median_bytes)} GiB")[0]
    assert "requests of 2,048 tokens" in text and "requests of 1,024 tokens" not in text
    with offline_home():
        code, out, err = run_cli(["plan", "--model", MODEL, "--gpu", "l4-24gb", "--json"])
    document = json.loads(out)
    assert document["kv_cache_memory_margin"]["median_abs_difference_bytes"] == margin.median_bytes
    assert [row["tokens"] for row in document["concurrency_at_lengths"]] == [1024, 4096, 16384]


@pytest.mark.parametrize("value", ["0", "4k", "1024,,2048", "1024,1024", "-5"])
def test_a_bad_prompt_len_is_one_line(value):
    with offline_home():
        code, out, err = run_cli(["plan", "--model", MODEL, "--kv-cache-memory", "4GiB", f"--prompt-len={value}"])
    assert code == 2 and out == "" and err.count("\n") == 1 and "--prompt-len" in err, err
