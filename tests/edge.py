"""Running the CLI in-process for the edge tests: exit code, stdout and stderr of one command line,
offline, and what the files of a directory hold (to show that no input changed)."""

from __future__ import annotations

import contextlib
import io
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from kvplan.cli import run_app


@contextlib.contextmanager
def offline_home() -> Iterator[Path]:
    """HF_HUB_OFFLINE=1 and an empty HF_HOME for the block, restored afterwards."""
    with tempfile.TemporaryDirectory() as home:
        saved = {name: os.environ.get(name) for name in ("HF_HUB_OFFLINE", "HF_HOME")}
        os.environ.update(HF_HUB_OFFLINE="1", HF_HOME=home)
        try:
            yield Path(home)
        finally:
            for name, value in saved.items():
                if value is None:
                    os.environ.pop(name, None)
                else:
                    os.environ[name] = value


def run_cli(argv: list[str]) -> tuple[int, str, str]:
    """(exit code, stdout, stderr); any exception but SystemExit escapes, as a traceback would."""
    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        try:
            run_app(argv)
            code = 0
        except SystemExit as stop:
            code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    return code, out.getvalue(), err.getvalue()


def snapshot(directory: Path) -> dict[str, bytes]:
    return {str(path): path.read_bytes() for path in sorted(directory.rglob("*")) if path.is_file()}
