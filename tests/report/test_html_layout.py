"""The HTML reports in a real browser (issue 24, item 10): nothing sticks out of a desktop or a
half-screen window, with a long model id, a long GPU name and long `vllm serve` lines; full pools
and preemptions are marked; the KV chart keeps cached free blocks apart from blocks in use."""

from __future__ import annotations

import dataclasses

import pytest

from kvplan.report.fit_html import render_fit_html
from kvplan.report.sim_html import render_html
from kvplan.usecases.simulate.driver import SimOptions, prepare
from kvplan.usecases.simulate.simulation import simulate
from kvplan.usecases.simulate.workload import load_workload
from tests.report.browser import BROWSER, layout_problems
from tests.report.test_fit_reports import result as fit_result
from tests.usecases.simulate.factories import mix, write_workload

needs_browser = pytest.mark.skipif(BROWSER is None, reason="no headless Chromium here (make test installs Debian's)")
WIDTHS = (1280, 800)
LONG_MODEL = "an-organisation/Meta_Llama_3_1_70B_Instruct_AWQ_INT4_quantised_with_a_suffix_longer_than_any_column"
LONG_GPU = "nvidia-rtx-pro-6000-blackwell-server-edition-96gb"


@pytest.fixture(scope="module")
def tight(tmp_path_factory):
    """A run whose pool fills and preempts, with a long model id and GPU name in its facts."""
    folder = tmp_path_factory.mktemp("tight")
    # 30 blocks of 16 tokens (the block size pinned: 0.34.0's default of 64 would hold the whole mix)
    engine = {"num_gpu_blocks": 30, "block_size": 16}
    document = simulate(prepare(load_workload(write_workload(folder, mix(engine=engine))),
                                SimOptions()))
    facts = dataclasses.replace(document.setup.engine.facts, model=LONG_MODEL, gpu=LONG_GPU)
    engine = dataclasses.replace(document.setup.engine, facts=facts)
    return dataclasses.replace(document, setup=dataclasses.replace(document.setup, engine=engine))


def long_fit():
    shown = fit_result()
    configurations = tuple(
        dataclasses.replace(c, point=dataclasses.replace(
            c.point, configuration=dataclasses.replace(c.point.configuration, model=LONG_MODEL, gpu=LONG_GPU)))
        for c in shown.configurations)
    return dataclasses.replace(shown, request=dataclasses.replace(shown.request, model=LONG_MODEL),
                               configurations=configurations)


@needs_browser
@pytest.mark.parametrize("width", WIDTHS)
def test_the_simulate_report_fits_the_window(tight, width):
    assert layout_problems(render_html(tight), width) == []


@needs_browser
@pytest.mark.parametrize("width", WIDTHS)
def test_the_fit_report_fits_the_window(width):
    page = render_fit_html(long_fit())
    assert LONG_MODEL in page
    assert layout_problems(page, width) == []


@needs_browser
def test_the_probe_sees_an_overflow():
    """The check would fail on a page that overflows (a 3,000 px unbreakable line)."""
    page = render_html_with_wide_line()
    assert any("wide in a" in problem for problem in layout_problems(page, 800))


def render_html_with_wide_line() -> str:
    return "<!DOCTYPE html><html><body><p style=\"white-space: nowrap\">" + "x" * 3000 + "</p></body></html>"


def test_a_full_pool_and_preemptions_are_marked(tight):
    metrics = tight.metrics
    assert metrics.kv.peak_used_blocks >= metrics.kv.usable_blocks and metrics.preemptions.total > 0
    page = render_html(tight)
    assert page.count('class="card bad"') == 2
    assert "the pool ran full" in page and "requests were preempted" in page


def test_a_roomy_run_marks_nothing(tmp_path):
    document = simulate(prepare(load_workload(write_workload(tmp_path, mix())), SimOptions()))
    assert document.metrics.preemptions.total == 0
    assert 'class="card bad"' not in render_html(document)


def test_cached_free_blocks_are_a_line_of_their_own_not_stacked_on_the_used_area(tight):
    page = render_html(tight)
    assert "free, holding a cached prefix (reusable)" in page
    assert page.count("<polygon") == 1          # only the blocks in use are an area
