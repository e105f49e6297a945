"""How far a predicted KV cache memory is known to be from real vLLM start-ups: the figures
scripts/measure_log_accuracy.py measured with `kvplan explain` on the real logs in tests/data/logs
(kvplan/data/accuracy/kv_memory_vs_logs.json; docs/accuracy.md). Shown beside every predicted KV
memory (issue 24, item 3), so that a prediction reads as one."""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path

MEASURED = Path(__file__).resolve().parents[1] / "data" / "accuracy" / "kv_memory_vs_logs.json"


@dataclass(frozen=True)
class KvMemoryMargin:
    """Absolute difference of the available KV cache memory, predicted against logged."""

    median_bytes: int
    max_bytes: int
    num_logs: int


@cache
def kv_memory_margin() -> KvMemoryMargin:
    measured = json.loads(MEASURED.read_text())
    return KvMemoryMargin(measured["median_abs_difference_bytes"], measured["max_abs_difference_bytes"],
                          len(measured["logs"]))
