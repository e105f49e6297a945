"""Helpers shared by the benchmarks: time a command in fresh processes."""

from __future__ import annotations

import statistics
import subprocess
import sys
import time


def time_cold_process(args: list[str], repeats: int = 5) -> dict[str, float]:
    """Wall seconds of `python -m kvplan ARGS` in fresh processes: median, min, max."""
    walls = []
    for _ in range(repeats):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-m", "kvplan", *args], check=False, capture_output=True)
        walls.append(time.perf_counter() - start)
    return {"median_s": statistics.median(walls), "min_s": min(walls), "max_s": max(walls)}
