"""Workload assertions: figures read from the simulation, on the target's pool, and hints found by
simulating again."""

from __future__ import annotations

import pytest

from kvplan.errors import KvplanError
from kvplan.sources.installed import default_release
from kvplan.usecases.check.evaluate import evaluate
from tests.usecases.check.factories import QWEN, tiny_workload


def results_by_name(report):
    return {result.name: result for result in report.results}


def test_figures_come_from_the_simulation(write_spec):
    spec = write_spec("""
        [[assert]]
        workload = "w.json"
        max_preemptions = 1000
        max_p95_kv_usage = 1.0
        min_first_admission_hit_rate = 0.0
        max_p95_ttft_steps = 100000
    """, files={"w.json": tiny_workload()})
    report = evaluate(spec)
    results = results_by_name(report)
    assert report.target is None and report.passed
    assert list(results) == ["completes", "max_preemptions", "max_p95_kv_usage", "min_first_admission_hit_rate",
                             "max_p95_ttft_steps"]
    from kvplan.report.simulate_json import result_document
    from kvplan.usecases.simulate.driver import SimOptions, prepare
    from kvplan.usecases.simulate.simulation import simulate
    from kvplan.usecases.simulate.workload import load_workload

    document = result_document(simulate(prepare(load_workload(spec.blocks[0].workload), SimOptions())))
    assert results["max_preemptions"].measured == document["preemptions"]["total"]
    assert results["max_p95_kv_usage"].measured == document["kv_usage"]["p95_used_blocks"] / 63
    assert results["max_p95_ttft_steps"].measured == document["latency"]["ttft_steps"]["p95"]
    assert all(result.group == "w.json" for result in report.results)


def test_a_failure_names_the_pool_that_passes_and_it_does(write_spec):
    spec = write_spec('[[assert]]\nworkload = "w.json"\nmax_preemptions = 0',
                      files={"w.json": tiny_workload()})
    failed = results_by_name(evaluate(spec))["max_preemptions"]
    assert failed.measured > 0 and not failed.passed
    blocks = int(failed.hint.split("give the engine ")[1].split()[0].replace(",", ""))
    assert failed.hint.endswith("simulated, it passes")
    bigger = tiny_workload()
    bigger["engine"] = {**bigger["engine"], "num_gpu_blocks": blocks}
    again = write_spec('[[assert]]\nworkload = "w2.json"\nmax_preemptions = 0', files={"w2.json": bigger})
    assert evaluate(again).passed


def test_a_figure_more_kv_cache_cannot_fix_says_so(write_spec):
    spec = write_spec('[[assert]]\nworkload = "w.json"\nmax_p95_e2e_steps = 1',
                      files={"w.json": tiny_workload()})
    failed = results_by_name(evaluate(spec))["max_p95_e2e_steps"]
    assert failed.hint.startswith("more KV cache does not fix it")


def test_a_stall_fails_the_implicit_completes_assertion(write_spec):
    stalling = tiny_workload()
    stalling["engine"] = {**stalling["engine"], "num_gpu_blocks": 4}  # 3 usable blocks: 48 tokens
    spec = write_spec('[[assert]]\nworkload = "w.json"\nmax_preemptions = 1000', files={"w.json": stalling})
    report = evaluate(spec)
    completes = results_by_name(report)["completes"]
    assert not completes.passed and report.exit_code == 1
    assert "give the engine" in completes.hint


def test_the_workload_runs_on_the_targets_pool(write_spec):
    spec = write_spec(f"""
        [target]
        model = "{QWEN}"
        kv_cache_memory = "128MiB"
        max_model_len = 1024
        [[assert]]
        workload = "w.json"
        max_preemptions = 0
    """, files={"w.json": tiny_workload()})
    report = evaluate(spec)
    # 128 MiB / (24 layers x 512 B per token x the block size) blocks: 170 of 64 tokens under the
    # default release (682 of 16 under 0.17.1 and 0.33.0), not the workload's own 64
    blocks = (128 << 20) // (24 * 512 * default_release().default_block_size)
    assert report.target.num_blocks == blocks
    assert any(f"target's pool of {blocks} blocks" in note for note in report.notes)
    assert report.passed


def test_seconds_need_a_step_time_model(write_spec):
    untimed = tiny_workload()
    del untimed["timing"]
    spec = write_spec('[[assert]]\nworkload = "w.json"\nmax_p95_ttft_s = 1', files={"w.json": untimed})
    with pytest.raises(KvplanError):
        evaluate(spec)
    timed = write_spec('[[assert]]\nworkload = "w.json"\nstep_time_ms = 5\nmax_p95_ttft_s = 100',
                       files={"w.json": untimed}, name="timed.toml")
    assert evaluate(timed).passed


def test_a_bad_workload_is_bad_input(write_spec):
    spec = write_spec('[[assert]]\nworkload = "w.json"\nmax_preemptions = 0',
                      files={"w.json": {"schema_version": 1, "classes": "many"}})
    with pytest.raises(KvplanError, match=r"w\.json"):
        evaluate(spec)
