"""kvplan bench serve against every public `vllm bench serve` result of tests/data/bench (issue 21's
bounds), and docs/accuracy.md's latency table is what these runs give."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]


def _generator():
    spec = importlib.util.spec_from_file_location("gen_latency_table", REPO / "scripts" / "gen_latency_table.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["gen_latency_table"] = module
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def table():
    generator = _generator()
    return generator, generator.rows()


def test_median_errors_hold_the_bounds(table):
    generator, rows = table
    medians = generator.medians(rows)
    assert len(rows) >= 8
    assert medians["ttft"] <= 0.15, medians
    assert medians["tpot_itl"] <= 0.10, medians
    assert medians["throughput"] <= 0.10, medians


def test_no_result_is_far_off_on_tpot_or_throughput(table):
    _, rows = table
    worst = {r.id: (round(r.error("tpot_itl"), 3), round(r.error("throughput"), 3)) for r in rows
             if abs(r.error("tpot_itl")) > 0.35 or abs(r.error("throughput")) > 0.35}
    assert not worst


def test_the_engine_is_only_part_of_ttft_at_concurrency_one(table):
    # the API server's share: more than the GPU work for a 0.5B model (docs/accuracy.md)
    _, rows = table
    first = next(r for r in rows if r.id == "wmx-L4-c1")
    assert first.engine_ttft_ms < first.predicted["ttft"] / 2


def test_the_accuracy_page_shows_these_figures(table):
    generator, rows = table
    assert generator.ACCURACY_MD.read_text(encoding="utf-8") == generator.expected_text(rows), \
        "run `.venv/bin/python scripts/gen_latency_table.py`"


@pytest.fixture(scope="module")
def kernels(table):
    pytest.importorskip("aiconfigurator_core")
    generator, _ = table
    return generator.kernel_comparison()


def test_the_page_shows_measured_kernels_against_the_roofline(table, kernels):
    generator, rows = table
    assert generator.ACCURACY_MD.read_text(encoding="utf-8") == generator.expected_text(rows, kernels), \
        "run `.venv/bin/python scripts/gen_latency_table.py`"


def test_auto_uses_measured_kernels_exactly_where_they_are_no_less_accurate(table, kernels):
    # docs/accuracy.md: a covered GPU is in AUTO_KERNEL_GPUS when the kernels' median error is no
    # larger than the roofline's on every metric over its public results
    from kvplan.usecases.simulate.timing import AUTO_KERNEL_GPUS

    generator, _ = table
    by_gpu = generator.kernel_medians(kernels)
    assert by_gpu, "no public result on a GPU the kernel database covers"
    better = {gpu for gpu, m in by_gpu.items()
              if all(m["kernels"][metric] <= m["roofline"][metric] for metric in generator.METRICS)}
    assert better == set(AUTO_KERNEL_GPUS) & set(by_gpu)


def test_the_kernels_hold_the_bounds_too(kernels):
    rows = kernels["kernels"]
    assert all("measured kernels" in r.method and "h100_sxm" in r.method for r in rows)
    assert all(abs(r.error("tpot_itl")) <= 0.35 and abs(r.error("throughput")) <= 0.35 for r in rows)
