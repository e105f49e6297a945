"""`make bench`: run every benchmark and print one table of what was measured."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BENCHMARKS = ["bench_plan", "bench_replay", "bench_simulate", "bench_profile", "bench_workload_check"]


def main() -> None:
    results = {}
    for name in BENCHMARKS:
        try:
            module = importlib.import_module(f"benchmarks.{name}")
        except ModuleNotFoundError:
            continue
        print(f"running {name} ...", file=sys.stderr, flush=True)
        results[name] = module.run()
    for name, figures in results.items():
        print(f"\n## {name}")
        for key, value in figures.items():
            shown = f"{value:.3f}" if isinstance(value, float) else json.dumps(value)
            print(f"  {key:<40} {shown}")


if __name__ == "__main__":
    main()
