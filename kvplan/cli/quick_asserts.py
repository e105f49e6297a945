"""The `--assert-*` flags of plan, profile and simulate: their verdict on stderr, and the exit code."""

from __future__ import annotations

from typing import TYPE_CHECKING

from kvplan.errors import EXIT_FINDING, EXIT_OK

if TYPE_CHECKING:
    from kvplan.usecases.check.evaluate import CheckReport


def verdict_exit_code(report: CheckReport | None, *, finding: bool = False) -> int:
    """Print the verdict of the flags (if any were given) to stderr; the command's exit code: 1 for a
    failed assertion or a finding of the command itself (the configuration does not fit), else 0."""
    command_code = EXIT_FINDING if finding else EXIT_OK
    if report is None:
        return command_code
    from rich.console import Console

    from kvplan.report.check_console import render_check

    render_check(report, Console(stderr=True, highlight=False))
    return max(command_code, report.exit_code)
