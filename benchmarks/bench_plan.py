"""`kvplan plan` on a catalog model in a cold process (target: well under a second)."""

from __future__ import annotations

from benchmarks.common import time_cold_process


def run() -> dict[str, float]:
    args = ["plan", "--model", "Qwen/Qwen2-0.5B-Instruct", "--kv-cache-memory", "25938100224", "--json"]
    figures = time_cold_process(args, repeats=7)
    baseline = time_cold_process(["version"], repeats=5)
    return {"plan_cold_median_s": figures["median_s"], "plan_cold_max_s": figures["max_s"],
            "interpreter_and_cli_import_median_s": baseline["median_s"]}
