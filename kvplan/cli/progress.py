"""Progress of long work, on stderr: a live line on a terminal; elsewhere (a pipe, a log, CI) one
plain line per phase, and for counted work one line at each tenth, so that a log shows where a
run stands without being flooded."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any, TextIO

PREFIX = "kvplan: "
STEPS = 10      # counted work: a line at each tenth when stderr is not a terminal


class Reporter:
    """`stage(text)` names the phase that starts; `count(done, total)` advances counted work in it."""

    def __init__(self, stream: TextIO, live: Any = None) -> None:
        self._stream = stream
        self._live = live           # a rich status on a terminal, else None
        self._stage = ""
        self._tenth = -1

    def stage(self, text: str) -> None:
        self._stage, self._tenth = text, -1
        if self._live is not None:
            self._live.update(_as_written(text))
        else:
            print(PREFIX + text, file=self._stream, flush=True)

    def count(self, done: int, total: int, what: str = "requests") -> None:
        text = f"{self._stage}: {done:,} of {total:,} {what} done"
        if self._live is not None:
            self._live.update(_as_written(text))
            return
        tenth = done * STEPS // total if total else STEPS
        if tenth > self._tenth:
            self._tenth = tenth
            print(PREFIX + text, file=self._stream, flush=True)


def _as_written(text: str) -> str:
    """A phase names the model and the workload: user text, never read as rich markup (`[/] x`)."""
    from kvplan.report.text import plain

    return plain(text)


@contextlib.contextmanager
def reporting(stream: TextIO | None = None) -> Iterator[Reporter]:
    stream = stream or sys.stderr
    if not stream.isatty():
        yield Reporter(stream)
        return
    from rich.console import Console

    with Console(file=stream, highlight=False).status("", spinner="dots") as status:
        yield Reporter(stream, status)
