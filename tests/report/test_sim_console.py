from dataclasses import replace

from rich.console import Console

from kvplan.report.sim_console import render, sparkline, usage_chart
from kvplan.semantics.releases import VLLM_0_17_1
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


def test_a_hybrid_models_groups_and_their_usage_are_shown(tmp_path):
    from kvplan.report.sim_html import render_html

    engine = {"model": "google/gemma-2-9b-it", "kv_cache_memory": "4GiB", "max_model_len": 8192}
    # the figures are vLLM 0.17.1's (its token count: 1,560 blocks // 2 groups x 16)
    result = simulate(prepare(load_workload(write_workload(tmp_path, mix(engine=engine))),
                              SimOptions(release=VLLM_0_17_1)))
    console = Console(width=160, record=True, color_system=None)
    render(result, console)
    text = console.export_text()
    assert "1,560 blocks (1,559 usable) shared by 2 KV cache groups" in text
    assert "sliding window 4,096, 21 layers, block 16; full attention, 21 layers, block 16" in text
    assert "(GPU KV cache size 12,480 tokens)" in text
    window, full = result.metrics.kv.groups
    assert f"group 0       sliding window 4,096, 21 layers, block 16: peak {window.peak_used_blocks:,} blocks" in text
    assert f"group 1       full attention, 21 layers, block 16: peak {full.peak_used_blocks:,} blocks" in text
    page = render_html(result)
    assert "KV-cache usage per group" in page and f"<td>{full.peak_used_blocks:,}</td>" in page
    one_group = simulate(prepare(load_workload(write_workload(tmp_path, mix(), "one.json")), SimOptions()))
    assert "KV-cache usage per group" not in render_html(one_group)
