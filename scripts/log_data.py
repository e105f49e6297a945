"""What the two scripts that read the real vLLM logs share (scripts/measure_log_accuracy.py,
scripts/extract_non_torch.py): `kvplan explain --json` of one log, and the write-or-check of the data
file each makes from those documents (a test runs each with --check)."""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LOGS = REPO / "tests" / "data" / "logs"


def explained(log: Path, *flags: str) -> dict[str, object]:
    """`kvplan explain LOG FLAGS --json` of this checkout, offline, as a document."""
    shown = subprocess.run([sys.executable, "-m", "kvplan", "explain", str(log.relative_to(REPO)), *flags, "--json"],
                           capture_output=True, text=True, cwd=REPO, check=False,
                           env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)})
    document: dict[str, object] = json.loads(shown.stdout)
    return document


def write_or_check(description: str, output: Path, make: Callable[[], dict[str, object]]) -> int:
    """The command line of a data-file script: rewrite OUTPUT with what MAKE gives, or with --check
    say whether it is up to date (exit 1 when not)."""
    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--check", action="store_true", help="verify the file instead of rewriting it")
    args = parser.parse_args()
    text = json.dumps(make(), indent=2) + "\n"
    if args.check:
        same = output.exists() and output.read_text() == text
        print(f"{output.relative_to(REPO)}: {'up to date' if same else 'out of date: run without --check'}")
        return 0 if same else 1
    output.write_text(text)
    print(f"wrote {output.relative_to(REPO)}")
    return 0
