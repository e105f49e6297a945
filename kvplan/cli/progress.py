"""Progress of long work, on stderr: a live line on a terminal; elsewhere (a pipe, a log, CI) one
plain line per phase, and for counted work one line at each tenth, so that a log shows where a
run stands without being flooded. A phase that runs on (a forward pass over a big model on the
CPU, the meta-device build of a large model) is never silent: the live line shows its time so
far, and a log gets a line every HEARTBEAT_S seconds saying how long it has run."""

from __future__ import annotations

import contextlib
import sys
import threading
import time
from collections.abc import Iterator
from typing import Any, TextIO

from kvplan.units import format_duration

PREFIX = "kvplan: "
STEPS = 10      # counted work: a line at each tenth when stderr is not a terminal
HEARTBEAT_S = 10.0   # a phase still running says so this often in a log
LIVE_TICK_S = 1.0    # and the live line's clock moves this often


class Reporter:
    """`stage(text)` names the phase that starts; `count(done, total)` advances counted work in it."""

    def __init__(self, stream: TextIO, live: Any = None, heartbeat_s: float = HEARTBEAT_S) -> None:
        self._stream = stream
        self._live = live           # a rich status on a terminal, else None
        self._stage = ""
        self._shown = ""            # the stage's latest text (with its count)
        self._tenth = -1
        self._since = time.monotonic()
        self._lock = threading.Lock()
        self._heartbeat_s = heartbeat_s
        self._stop = threading.Event()
        self._clock: threading.Thread | None = None

    def start(self) -> None:
        """Start the clock that keeps a long phase from being silent."""
        self._clock = threading.Thread(target=self._tick, name="kvplan-progress", daemon=True)
        self._clock.start()

    def stop(self) -> None:
        self._stop.set()
        if self._clock is not None:
            self._clock.join()

    def _tick(self) -> None:
        period = LIVE_TICK_S if self._live is not None else self._heartbeat_s
        while not self._stop.wait(period):
            with self._lock:
                if not self._stage:
                    continue
                elapsed = format_duration(time.monotonic() - self._since)
                if self._live is not None:
                    self._live.update(_as_written(f"{self._shown} ({elapsed})"))
                else:
                    print(f"{PREFIX}{self._shown}: still running, {elapsed} so far", file=self._stream, flush=True)

    def stage(self, text: str) -> None:
        with self._lock:
            self._stage, self._shown, self._tenth, self._since = text, text, -1, time.monotonic()
            if self._live is not None:
                self._live.update(_as_written(text))
            else:
                print(PREFIX + text, file=self._stream, flush=True)

    def count(self, done: int, total: int, what: str = "requests") -> None:
        with self._lock:
            self._count(done, total, what)

    def _count(self, done: int, total: int, what: str) -> None:
        text = f"{self._stage}: {done:,} of {total:,} {what} done"
        self._shown = text
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
def _running(reporter: Reporter) -> Iterator[Reporter]:
    reporter.start()
    try:
        yield reporter
    finally:
        reporter.stop()


@contextlib.contextmanager
def reporting(stream: TextIO | None = None, heartbeat_s: float = HEARTBEAT_S) -> Iterator[Reporter]:
    stream = stream or sys.stderr
    if not stream.isatty():
        with _running(Reporter(stream, heartbeat_s=heartbeat_s)) as reporter:
            yield reporter
        return
    from rich.console import Console

    with Console(file=stream, highlight=False).status("", spinner="dots") as status, \
            _running(Reporter(stream, status)) as reporter:
        yield reporter
