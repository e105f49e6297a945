"""Standard output that cannot be written: a reader that stops reading (`kvplan gpus | head -1`) ends
the command quietly, a full device is one line (exit 2), never a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# a rich table (gpus, models), plan's fast path without typer, and JSON
COMMANDS = [("gpus",), ("models",), ("plan", "Qwen/Qwen2-0.5B-Instruct", "--kv-cache-memory", "1GiB"),
            ("gpus", "--json")]


def _run(args: tuple[str, ...], stdout: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1"}
    return subprocess.run([sys.executable, "-m", "kvplan", *args], stdout=stdout, stderr=subprocess.PIPE,
                          text=True, cwd=REPO, env=env, timeout=120)


@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_reader_that_stops_reading_ends_the_command_quietly(args):
    read, write = os.pipe()
    os.close(read)        # before the command writes: every write it makes finds the reader gone
    try:
        done = _run(args, write)
    finally:
        os.close(write)
    assert done.returncode == 0, done.stderr
    assert "Traceback" not in done.stderr and "Error" not in done.stderr


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full")
@pytest.mark.parametrize("args", COMMANDS, ids=" ".join)
def test_a_full_device_is_one_line(args):
    with open("/dev/full", "w") as full:
        done = _run(args, full.fileno())
    assert done.returncode == 2
    assert done.stderr.splitlines()[-1] == "kvplan: error: cannot write the output: No space left on device"
    assert "Traceback" not in done.stderr
