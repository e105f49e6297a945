"""`kvplan simulate --timeline FILE`: one CSV row per scheduler step, written as the run goes (the
run's memory must not grow with its steps). Columns in ``docs/metrics.md``."""

from __future__ import annotations

from dataclasses import fields
from typing import TextIO

from kvplan.usecases.simulate.metrics import TimelineRow

TIMELINE_COLUMNS = tuple(field.name for field in fields(TimelineRow))


class TimelineCsv:
    """A step listener writing the header at once, then each step's row."""

    def __init__(self, stream: TextIO) -> None:
        self.stream = stream
        stream.write(",".join(TIMELINE_COLUMNS) + "\n")

    def __call__(self, row: TimelineRow) -> None:
        start, duration = row.start_s_estimate, row.duration_s_estimate
        seconds = ("", "") if start is None or duration is None else (f"{start:.6f}", f"{duration:.6f}")
        counts = (str(getattr(row, name)) for name in TIMELINE_COLUMNS[3:])
        self.stream.write(",".join((str(row.step), *seconds, *counts)) + "\n")
