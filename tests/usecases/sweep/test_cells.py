"""One cell's commands: the profile run and the planner agree on the pool, a refused cell keeps its
inputs and the message, a pool that does not fit is a result and its simulation is skipped."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.usecases.sweep.cells import run_cell
from kvplan.usecases.sweep.grid import load_grid
from tests.usecases.simulate.factories import mix


def cells(tmp_path: Path, text: str) -> list:
    (tmp_path / "w.json").write_text(json.dumps(mix()))
    (tmp_path / "grid.toml").write_text(text)
    return load_grid(tmp_path / "grid.toml").cells()


@pytest.mark.slow
def test_profile_and_plan_agree_on_the_predicted_pool(tmp_path):
    estimated, measured = cells(tmp_path, 'commands = ["plan", "profile"]\n[axes]\n'
                                          'models = ["Qwen/Qwen2-0.5B-Instruct"]\n'
                                          'vllm_releases = ["0.33.0", "0.34.0"]\n'
                                          'gpus = ["l4-24gb"]\ngpu_memory_utilization = [0.5]\n')
    for cell in (estimated, measured):
        row = run_cell(cell).row
        assert row.status == "ok", row.error
        assert row.plan_num_blocks == row.profile_num_blocks > 1
        assert row.plan_kv_cache_memory_source.startswith("predicted")
        assert row.profile_weights_bytes > 0 and row.profile_activation_peak_bytes > 0
        if cell is estimated:   # 0.33.0: the KV memory is what the budget leaves
            assert row.plan_kv_cache_memory_bytes == row.profile_available_kv_bytes
        else:   # 0.34.0: the blocks measured after capture take less than the capacity (docs/vllm/changes-0.34.md §1.4)
            assert row.vllm_version == "0.34.0"
            assert row.plan_kv_cache_memory_bytes < row.profile_available_kv_bytes


def test_refusals_and_findings(tmp_path):
    refused, tight = cells(tmp_path, 'commands = ["plan", "simulate"]\n[axes]\nmodels = ["Qwen/Qwen2-0.5B-Instruct"]\n'
                                     'kv_cache_memory = ["64MiB"]\ntensor_parallel_size = [3, 1]\n'
                                     'max_model_len = [32768]\nworkloads = ["w.json"]\n')
    row = run_cell(refused).row
    assert row.status == "error" and row.error.startswith("plan: ") and row.tensor_parallel_size == 3
    assert row.kv_cache_memory_bytes == 64 << 20 and row.plan_fits is None
    row = run_cell(tight).row
    assert row.status == "ok" and row.plan_fits is False and row.plan_error
    assert row.note == "simulate skipped: the configuration does not fit" and row.simulate_num_requests is None
