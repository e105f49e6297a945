from dataclasses import replace

from rich.console import Console

from kvplan.report.sim_console import render, sparkline, usage_chart
from kvplan.usecases.simulate.driver import SimOptions, prepare
from kvplan.usecases.simulate.series import SeriesPoint
from kvplan.usecases.simulate.simulation import simulate
from kvplan.usecases.simulate.workload import load_workload
from tests.usecases.simulate.factories import mix, write_workload


def test_the_summary_names_every_section(tmp_path):
    result = simulate(prepare(load_workload(write_workload(tmp_path, mix())), SimOptions()))
    console = Console(width=120, record=True, color_system=None)
    render(result, console)
    text = console.export_text()
    for expected in ("pool", "64 blocks (63 usable)", "step time", "constant 10 ms", "KV usage", "preemptions",
                     "prefix cache", "Latency per request (seconds are estimates)", "Per class", "chat",
                     "zero preemptions", "(est.)"):
        assert expected in text


def test_the_chart_fills_columns_by_usage(tmp_path):
    result = simulate(prepare(load_workload(write_workload(tmp_path, mix())), SimOptions()))
    series = (SeriesPoint(0.0, 1.0, 1.0, (63.0, 0.0, 1.0, 0.0, 0.0), (63.0, 0.0, 1.0, 0.0, 0.0)),
              SeriesPoint(1.0, 2.0, 1.0, (0.0, 63.0, 0.0, 2.0, 0.0), (0.0, 63.0, 0.0, 2.0, 0.0)))
    full = replace(result, metrics=replace(result.metrics, series=series, series_bucket=1.0))
    rows = usage_chart(full, width=2, height=4).plain.splitlines()[:4]
    assert [row[-2:] for row in rows] == ["█░", "█░", "█░", "█░"]


def test_sparkline_scales_to_the_maximum():
    assert sparkline([0, 5, 10]) == "▁▅█"
    assert sparkline([0, 0]) == "▁▁"
