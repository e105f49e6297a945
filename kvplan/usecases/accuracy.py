"""How far a predicted KV cache memory is known to be from real vLLM start-ups: the figures
scripts/measure_log_accuracy.py measured with `kvplan explain` on the real logs in tests/data/logs
(kvplan/data/accuracy/kv_memory_vs_logs.json; docs/accuracy.md). Shown beside every predicted KV
memory (issue 24, item 3), so that a prediction reads as one.

The margin is the held-out one: each log's error with its own non-torch figure left out of
kvplan/data/accuracy/non_torch_from_logs.json (usecases/non_torch.py reads the term from those same
logs, so their in-sample errors flatter a setup no log shows)."""

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
    max_where: str          # the setup of the log the largest difference is of: `h100-sxm-80gb TP 2`


@cache
def kv_memory_margin() -> KvMemoryMargin:
    measured = json.loads(MEASURED.read_text())
    largest = max(measured["logs"], key=lambda row: abs(row["held_out_difference_bytes"]))
    tp = largest["tensor_parallel_size"]
    return KvMemoryMargin(measured["held_out_median_abs_difference_bytes"],
                          measured["held_out_max_abs_difference_bytes"], len(measured["logs"]),
                          largest["gpu"] + ("" if tp is None else f" TP {tp}"))
