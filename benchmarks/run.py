"""`make bench`: the speed targets first, each PASS or MISS (`benchmarks/targets.py`), then the
figures of the other benchmarks. Exit 1 when a target is missed. `--targets`: the targets only;
`--million`: the one-day simulate target too (1,000,000 requests: minutes)."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

BENCHMARKS = ["bench_replay", "bench_simulate", "bench_profile", "bench_workload_check"]


def main() -> None:
    from benchmarks import targets

    passed = targets.run(million="--million" in sys.argv[1:])
    if "--targets" not in sys.argv[1:]:
        for name in BENCHMARKS:
            print(f"running {name} ...", file=sys.stderr, flush=True)
            figures = importlib.import_module(f"benchmarks.{name}").run()
            print(f"\n## {name}")
            for key, value in figures.items():
                shown = f"{value:.3f}" if isinstance(value, float) else json.dumps(value)
                print(f"  {key:<40} {shown}")
        print("\nspeed targets: " + ("every one PASS" if passed else "at least one MISS (above)"))
    sys.exit(0 if passed else 1)


if __name__ == "__main__":
    main()
