"""fit answers the question asked (issue 24, item 2): the cost of meeting the asked rate, with
copies of a setup that cannot carry it alone, ranks the configurations; the console and the
page show replicas, GPUs and cost per hour at the rate and the KV dtype, cost per million requests
second; the page marks the asked rate, and counts whole GPUs on its y axis without prices."""

from __future__ import annotations

import dataclasses
import io
import re

from rich.console import Console

from kvplan.report.fit_console import render_fit
from kvplan.report.fit_html import render_fit_html
from kvplan.report.plot_frame import whole_ticks
from kvplan.usecases.fit.search import _assemble, replicas_for
from tests.report.test_fit_reports import check, result


def test_copies_share_the_asked_rate():
    assert replicas_for(check(40.0)) == 1                            # keeps the objectives at the asked 5/s
    assert replicas_for(dataclasses.replace(check(2.0, False), max_sustained_rate=2.0)) == 3   # 5 / 2 -> 3
    assert replicas_for(dataclasses.replace(check(2.5, False), max_sustained_rate=2.5)) == 2   # exactly 2
    assert replicas_for(dataclasses.replace(check(2.0, False), max_sustained_rate=None)) is None
    assert replicas_for(None) is None


def test_the_ranking_is_the_cost_per_hour_of_the_asked_rate():
    base = result()
    points = [c.point for c in base.configurations]
    # two L4s (TP 2, $1.6/h) that sustain 2 req/s of the asked 5: three copies, $4.8/h, between one
    # H100 ($2.5/h) and two ($5/h)
    slow = dataclasses.replace(check(2.0, False), max_sustained_rate=2.0)
    checks = {0: base.configurations[0].check, 1: slow, 2: base.configurations[2].check}
    ranked, rejected, ranked_by = _assemble(base.request, points, checks)
    assert ranked_by == "cost_per_hour_at_rate" and not rejected
    assert [(c.configuration.gpu, c.replicas, c.gpus_at_rate) for c in ranked] == [
        ("h100-sxm-80gb", 1, 1), ("l4-24gb", 3, 6), ("h100-sxm-80gb", 1, 2)]
    assert [round(c.cost_per_hour_at_rate or 0, 6) for c in ranked] == [2.5, 4.8, 5.0]
    without_prices = dataclasses.replace(base.request, prices=())
    ranked, _, ranked_by = _assemble(without_prices, points, checks)
    assert ranked_by == "gpus_at_rate" and [c.gpus_at_rate for c in ranked] == [1, 2, 6]


def test_the_console_shows_the_rate_columns_and_the_kv_dtype():
    stream = io.StringIO()
    render_fit(result(), Console(file=stream, width=200))
    header = next(line for line in stream.getvalue().splitlines() if "GPUs@rate" in line)
    assert header.index("KV dtype") < header.index("replicas") < header.index("GPUs@rate") < \
        header.index("cost/h@rate") < header.index("cost/M req")


def test_the_page_marks_the_asked_rate():
    page = render_fit_html(result())
    [line] = re.findall(r'<line class="asked-rate" x1="([0-9.]+)"', page)
    assert "asked: 5/s" in page and float(line) > 0
    assert "<th>replicas</th><th>GPUs at the rate</th><th>cost/h at the rate</th>" in page


def test_without_prices_the_gpu_axis_has_whole_ticks():
    assert whole_ticks(2.2) == [0.0, 1.0, 2.0, 3.0]
    assert whole_ticks(17) == [0.0, 5.0, 10.0, 15.0, 20.0]
    base = result()
    page = render_fit_html(dataclasses.replace(base, request=dataclasses.replace(base.request, prices=())))
    ticks = [float(t) for t in re.findall(r'text-anchor="end"[^>]*>([0-9.]+)</text>', page)]
    assert ticks and all(tick.is_integer() for tick in ticks)
