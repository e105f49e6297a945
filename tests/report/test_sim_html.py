from dataclasses import replace
from html.parser import HTMLParser

import pytest

from kvplan.report.sim_html import render_html
from kvplan.usecases.simulate.driver import SimOptions, prepare
from kvplan.usecases.simulate.simulation import simulate
from kvplan.usecases.simulate.workload import load_workload
from tests.usecases.simulate.factories import mix, write_workload


class Page(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags: list[str] = []
        self.external: list[str] = []
        self.text: list[str] = []
        self.polylines = 0

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        for name, value in attrs:
            if name in ("src", "href") and value and "://" in value:
                self.external.append(value)
        if tag in ("polyline", "polygon"):
            self.polylines += 1

    def handle_data(self, data):
        self.text.append(data)


@pytest.fixture
def document(tmp_path):
    return simulate(prepare(load_workload(write_workload(tmp_path, mix())), SimOptions()))


def test_the_report_is_one_self_contained_page_with_three_charts(document):
    page = Page()
    page.feed(render_html(document))
    assert page.tags[0] == "html" and page.tags.count("svg") == 3
    assert "script" not in page.tags and "link" not in page.tags and not page.external
    assert page.polylines >= 6  # used, cached, peak, running, waiting, latency lines
    text = " ".join(page.text)
    for expected in ("KV-cache usage over time", "Queues over time", "Latency by arrival time", "Per class",
                     "blocks for zero preemptions", "estimate"):
        assert expected in text


def test_a_stalled_run_says_so_first(document):
    stalled = replace(document, metrics=replace(document.metrics, stalled=True))
    assert "The simulation stalled" in render_html(stalled)
    assert "The simulation stalled" not in render_html(document)


def test_text_is_escaped(document):
    hostile = replace(document, notes=("<script>alert(1)</script>",))
    assert "<script>" not in render_html(hostile)

