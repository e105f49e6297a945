"""docs/accuracy.md's comparison with the published vLLM 0.31.0 start-up log (issue 13): kvplan's
columns of its table are what `kvplan profile` prints for that configuration, at both token
budgets, so the page cannot drift from the product."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("torch")

ACCURACY = Path(__file__).resolve().parents[2] / "docs" / "accuracy.md"
COMMAND = ("profile", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "a100-sxm-80gb",
           "--max-model-len", "131072", "--vllm-version", "0.33.0", "--no-allocate", "--json")
GIB = 1 << 30


def log_table() -> dict[str, list[str]]:
    """The rows of the table under 'Against a published 0.33-era start-up log': term -> cells."""
    section = ACCURACY.read_text().split("### Against a published 0.33-era start-up log", 1)[1]
    rows = [line for line in section.splitlines() if line.startswith("| ") and not line.startswith("| term")]
    return {cells[0].strip("* "): [cell.strip("* ") for cell in cells[1:]]
            for cells in ([cell.strip() for cell in row.strip("|").split("|")] for row in rows)}


def leading_number(cell: str) -> float:
    match = re.match(r"[\d,.]+", cell)
    assert match, cell
    return float(match.group(0).replace(",", ""))


def gib(value: int) -> float:
    return round(value / GIB, 2)


@pytest.mark.slow
@pytest.mark.parametrize(("column", "budget"), [(1, None), (2, "8192")])
def test_kvplans_columns_are_what_profile_prints(kvplan: Any, column: int, budget: str | None) -> None:
    extra = ("--max-num-batched-tokens", budget) if budget else ()
    code, out, err = kvplan(*COMMAND, *extra)
    assert code == 0, err
    profile = json.loads(out)
    table = log_table()

    def cell(term: str) -> str:
        return table[term][column]

    assert leading_number(cell("total")) == gib(profile["total_bytes"])
    assert leading_number(cell("requested (x 0.92)")) == gib(profile["requested_bytes"])
    assert leading_number(cell("model loading / weights")) == gib(profile["weights_bytes"])
    assert leading_number(cell("consumed (weights + non-torch)")) == gib(profile["total_consumed_bytes"])
    transient, graphs = (float(v) for v in re.findall(r"\(([\d.]+) \+ ([\d.]+)\)", cell(
        "peak activation (transient + graph estimate)"))[0])
    assert leading_number(cell("peak activation (transient + graph estimate)")) == gib(
        profile["peak_activation_logged_bytes"])
    assert (transient, graphs) == (gib(profile["transient_peak_bytes"]), gib(profile["cuda_graph_estimate_bytes"]))
    assert leading_number(cell("CUDAGraph memory")) == gib(profile["cuda_graph_estimate_bytes"])
    available = cell("Available KV cache memory")
    assert leading_number(available) == gib(profile["available_kv_bytes"])
    published = leading_number(table["Available KV cache memory"][0])
    assert f"(+{leading_number(available) - published:.2f})" in available
    tokens, concurrency = cell("GPU KV cache size").split(" tokens, ")
    assert leading_number(tokens) == profile["gpu_kv_cache_tokens"]
    assert concurrency == f"{profile['max_concurrency']:.2f}x"
