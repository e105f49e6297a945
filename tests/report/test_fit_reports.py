"""fit's renderers read the result and nothing else: the JSON validates against its schema, the
HTML page is self-contained with the front highlighted, the console names what is an estimate."""

from __future__ import annotations

import dataclasses
import io
import json
import re
from pathlib import Path

import jsonschema
import pytest
from rich.console import Console

from kvplan.report.fit_console import render_fit
from kvplan.report.fit_html import render_fit_html
from kvplan.report.fit_json import fit_document
from kvplan.semantics.engine.args import EngineArgs
from kvplan.sources.installed import default_release
from kvplan.usecases.configuration import Configuration
from kvplan.usecases.fit.request import FitRequest, SearchSpace, SloBound
from kvplan.usecases.fit.result import FitConfiguration, FitCounts, FitResult, PlannedPoint, RateCheck, RejectedFamily
from kvplan.usecases.simulate.workload import parse_workload
from tests.usecases.simulate.factories import mix

SCHEMA = json.loads((Path(__file__).resolve().parents[2] / "docs" / "schemas" / "fit.json").read_text())
MODEL = "meta-llama/Llama-3.1-8B-Instruct"


def check(rate: float, meets: bool = True) -> RateCheck:
    return RateCheck(rate=5.0, meets=meets, figures=(("ttft_p95", 0.05 if meets else 9.0),),
                     missed=() if meets else ("ttft_p95 9 s > 500 ms",), ttft_p95_s=0.05 if meets else 9.0,
                     tpot_p95_s=0.01, preemptions=0, sustained=meets, stalled=False, num_requests=40,
                     num_finished=40, max_sustained_rate=rate, max_rate_bounded=True, lowest_rate_tried=2.5, runs=6)


def configuration(gpu: str, tp: int, rate: float, pareto: bool, price: float) -> FitConfiguration:
    point = PlannedPoint(Configuration(model=MODEL, gpu=gpu, args=EngineArgs(
        tensor_parallel_size=tp, max_model_len=8192, max_num_seqs=256, max_num_batched_tokens=2048)), "fits",
                         kv_cache_memory_bytes=4 << 30, num_gpu_blocks=2049, kv_cache_tokens=32784,
                         max_concurrency=4.0)
    hours = tp * 1e6 / (rate * 3600)
    return FitConfiguration(point, check(rate), price * tp, hours, hours * price, pareto)


def result() -> FitResult:
    request = FitRequest(model=MODEL, space=SearchSpace(gpus=("l4-24gb", "h100-sxm-80gb")),
                         workload=parse_workload(mix(), None, "chat.json"), slo=(SloBound("ttft_p95", 0.5),),
                         prices=(("l4-24gb", 0.8), ("h100-sxm-80gb", 2.5)))
    passing = (configuration("h100-sxm-80gb", 1, 40.0, True, 2.5), configuration("l4-24gb", 2, 12.0, False, 0.8),
               configuration("h100-sxm-80gb", 2, 70.0, True, 2.5))
    rejected = RejectedFamily("l4-24gb", 1, 1, "auto", "slo_missed", "misses the objectives at 5 req/s (est.)",
                              PlannedPoint(Configuration(model=MODEL, gpu="l4-24gb"), "fits"), check(2.0, False), 0.8)
    return FitResult(request, passing, (rejected,), FitCounts(8, 6, 1, 1, 2, 4, 24), "cost_per_hour_at_rate",
                     "local", 2, ("a note",))


def test_json_validates_and_keeps_the_order():
    document = fit_document(result())
    jsonschema.validate(document, SCHEMA)
    assert [c["rank"] for c in document["configurations"]] == [1, 2, 3]
    first = document["configurations"][0]
    assert first["vllm_serve_args"].startswith("vllm serve meta-llama/Llama-3.1-8B-Instruct")
    # unset: the release's default for the sizing path (0.34.0: 1.0 measured, docs/vllm/changes-0.34.md §1.2)
    release = default_release()
    assert first["gpu_memory_utilization"] == (release.measured_utilization or release.gpu_memory_utilization)
    assert first["slo_figures"] == {"ttft_p95": 0.05}
    assert document["rejected"][0]["closest"]["ttft_p95_s"] == 9.0
    assert "max_sustained_rate" in document["estimates"] and "kv_cache_tokens" in document["exact"]


def test_html_is_self_contained_with_the_front():
    page = render_fit_html(result())
    assert page.count("<circle") == 3 and page.count('fill="#d62728"') >= 2 and "<polyline" in page
    assert "<script" not in page and "cost per hour (your prices)" in page
    assert "misses the objectives at 5 req/s" in page


def test_user_text_is_escaped_and_carries_no_control_characters():
    # the notes and a rejection's detail carry text from the user's files (model ids, class names)
    base = result()
    rejected = dataclasses.replace(base.rejected[0], detail="closest <b>x</b>\x07 \ud800")
    page = render_fit_html(dataclasses.replace(base, rejected=(rejected,), notes=("a\x1bnote & <i>",)))
    assert "closest &lt;b&gt;x&lt;/b&gt;\\x07 \ufffd" in page and "a\\x1bnote &amp; &lt;i&gt;" in page
    assert not re.search("[\x00-\x08\x0b\x0c\x0e-\x1f\x7f-\x9f\ud800-\udfff]", page)


def test_each_configuration_is_drawn_at_its_rate_and_cost():
    # rates 40, 12, 70 and costs 2.5, 1.6, 5 per hour: with headroom the axes reach 80 and 6
    page = render_fit_html(result())
    centres = re.findall(r'<circle cx="([0-9.]+)" cy="([0-9.]+)"', page)
    assert [float(v) for centre in centres for v in centre] == pytest.approx([
        72 + 824 * 40 / 80, 20 + 312 * (1 - 2.5 / 6), 72 + 824 * 12 / 80, 20 + 312 * (1 - 1.6 / 6),
        72 + 824 * 70 / 80, 20 + 312 * (1 - 5 / 6)], abs=0.05)
    assert '<polyline points="484.0,202.0 793.0,72.0"' in page   # the front, by rate
    assert ">80</text>" in page and ">6</text>" in page and ">100</text>" not in page


def test_configurations_at_one_place_share_one_label():
    base = result()
    twin = dataclasses.replace(base.configurations[0], pareto=False)
    page = render_fit_html(dataclasses.replace(base, configurations=(base.configurations[0], twin,
                                                                     *base.configurations[1:])))
    assert page.count("<circle") == 4
    labels = re.findall(r'font-size="11" fill="[^"]+">([^<]+)</text>', page)
    assert labels == ["#1 #2", "#3", "#4"]
    assert 'aria-label="cost per hour (your prices) against highest sustained rate' in page


def test_console_lists_lines_rejections_and_what_is_estimated():
    stream = io.StringIO()
    render_fit(result(), Console(file=stream, width=160))
    text = stream.getvalue()
    assert text.count("vllm serve meta-llama/Llama-3.1-8B-Instruct") == 3
    assert "l4-24gb x1 (TP1) auto: objectives missed" in text
    assert "Estimates, from the step-time model" in text and "Costs use your --price figures" in text
    assert "Searched 8 configurations: planned 6 (2 profile runs)" in text
