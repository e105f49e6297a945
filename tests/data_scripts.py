"""Running a data-file script of scripts/ with --check (scripts/log_data.py): the file it writes is
what it computes now."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def assert_up_to_date(script: str) -> None:
    checked = subprocess.run([sys.executable, str(REPO / "scripts" / script), "--check"],
                             capture_output=True, text=True, timeout=900, check=False)
    assert checked.returncode == 0, checked.stdout + checked.stderr
