import csv
import io
import re
from pathlib import Path

from kvplan.report.sim_timeline import TIMELINE_COLUMNS, TimelineCsv
from kvplan.usecases.simulate.metrics import TimelineRow

DOCS = Path(__file__).resolve().parents[2] / "docs" / "metrics.md"


def row(step, start, duration):
    counts = dict.fromkeys(TIMELINE_COLUMNS[3:], 0)
    counts.update(num_scheduled_tokens=48, running=3, prefix_hits=16)
    return TimelineRow(step=step, start_s_estimate=start, duration_s_estimate=duration, **counts)


def test_rows_with_and_without_a_time_model():
    stream = io.StringIO()
    write = TimelineCsv(stream)
    write(row(0, 0.0, 0.0125))
    write(row(1, None, None))
    lines = stream.getvalue().splitlines()
    assert lines[0] == ",".join(TIMELINE_COLUMNS)
    assert lines[1].startswith("0,0.000000,0.012500,48,3,0,")
    assert lines[2].startswith("1,,,48,3,0,")
    parsed = list(csv.DictReader(io.StringIO(stream.getvalue())))
    assert [r["prefix_hits"] for r in parsed] == ["16", "16"]


def test_the_columns_are_the_documented_ones_in_order():
    section = DOCS.read_text().split("## Per-step output (`--timeline FILE`)")[1].split("\n## ")[0]
    assert tuple(re.findall(r"`([a-z_]+)`", section)) == TIMELINE_COLUMNS
