"""A kvplan command in a fresh Python process that reports, on its last stderr line, which heavy
modules it imported (`HEAVY=torch,transformers`, or `HEAVY=` for none): the simulation path must
import no torch (brief; docs/architecture.md)."""

from __future__ import annotations

import subprocess
import sys

RUN_AND_REPORT_IMPORTS = (
    "import sys\n"
    "from kvplan.cli import run_app\n"
    "code = 0\n"
    "try:\n"
    "    run_app(sys.argv[1:])\n"
    "except SystemExit as exit:\n"
    "    code = exit.code\n"
    "heavy = sorted(m for m in ('torch', 'transformers') if m in sys.modules)\n"
    "print('HEAVY=' + ','.join(heavy), file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def kvplan_process(*args: str, **run: object) -> subprocess.CompletedProcess[str]:
    """`kvplan ARGS` in a child process; `run` goes to subprocess.run (cwd, env, timeout)."""
    return subprocess.run([sys.executable, "-c", RUN_AND_REPORT_IMPORTS, *args], capture_output=True, text=True,
                          **run)  # type: ignore[call-overload]
