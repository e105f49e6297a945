"""Standard output for people: the rich console every report prints with."""

from __future__ import annotations

from rich.console import Console

from kvplan.errors import ReaderGone


class ReportConsole(Console):
    """A console whose reader may stop reading (`| head`, a pager): rich would exit 1 there, which is
    kvplan's code for a finding; the command line ends quietly instead (exit 0, `kvplan.cli.run_app`), as
    `kvplan replay`'s records do."""

    def on_broken_pipe(self) -> None:
        self.quiet = True
        raise ReaderGone
