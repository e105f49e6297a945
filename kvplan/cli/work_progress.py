"""Progress of many tasks on stderr (`kvplan sweep`, `kvplan fit`): done, failed and the time left.
A live bar on a terminal; elsewhere (a pipe, a log, CI) one line when a round starts and one at
each tenth of it, so that a log shows where the run stands without being flooded."""

from __future__ import annotations

import contextlib
import sys
import time
from collections.abc import Iterator
from typing import Any, TextIO

from kvplan.units import format_duration

STEPS = 10


class WorkProgress:
    """`update(what, done, total, failed)`: `what` names the round ("cells", "planning", ...)."""

    def __init__(self, stream: TextIO, bar: Any = None) -> None:
        self._stream = stream
        self._bar = bar
        self._tasks: dict[str, Any] = {}
        self._tenth: dict[str, int] = {}
        self._started: dict[str, float] = {}

    def update(self, what: str, done: int, total: int, failed: int = 0) -> None:
        if self._bar is not None:
            if what not in self._tasks:
                self._tasks[what] = self._bar.add_task(what, total=total, failed=0)
            self._bar.update(self._tasks[what], completed=done, total=total, failed=failed)
            return
        start = self._started.setdefault(what, time.monotonic())
        tenth = done * STEPS // total if total else STEPS
        if tenth <= self._tenth.get(what, -1):
            return
        self._tenth[what] = tenth
        line = f"kvplan: {what}: {done:,} of {total:,} done"
        if failed:
            line += f", {failed:,} failed"
        if 0 < done < total:
            left = (time.monotonic() - start) / done * (total - done)
            line += f", about {_duration(left)} left"
        print(line, file=self._stream, flush=True)


def _duration(seconds: float) -> str:
    return format_duration(seconds)


@contextlib.contextmanager
def work_progress(stream: TextIO | None = None) -> Iterator[WorkProgress]:
    stream = stream or sys.stderr
    if not stream.isatty():
        yield WorkProgress(stream)
        return
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn

    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(),
               TextColumn("{task.fields[failed]} failed"), TextColumn("ETA"), TimeRemainingColumn())
    with Progress(*columns, console=Console(file=stream), transient=True) as bar:
        yield WorkProgress(stream, bar)
