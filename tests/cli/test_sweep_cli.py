"""`kvplan sweep` end to end in its own process: one row per cell in every format, failing cells
recorded without stopping the sweep, resume from the table or from the journal of an interrupted
run, and the same rows from a Ray cluster as from the local pool."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kvplan.report.sweep_table import journal_path, read_table
from tests.no_torch import kvplan_process
from tests.usecases.simulate.factories import mix

GRID = """
commands = ["plan", "simulate"]
[axes]
models = ["Qwen/Qwen2-0.5B-Instruct"]
vllm_releases = ["0.17.1", "0.33.0"]
gpus = ["l4-24gb"]
kv_cache_memory = ["1GiB", "2GiB"]
tensor_parallel_size = [1, 3]     # 3 does not divide Qwen2-0.5B's 14 heads: vLLM refuses those cells
max_model_len = [4096]
workloads = ["w.json"]
"""


# a one-node Ray cluster on the loopback address (Ray otherwise puts its nodes, and its drivers'
# idea of 127.0.0.1, on the machine's network address), without the token Ray would write in ~/.ray
LOOPBACK_RAY = {"RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0", "RAY_AUTH_MODE": "disabled"}


def kvplan(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return kvplan_process(*args, cwd=cwd, env={**os.environ, "HF_HUB_OFFLINE": "1", **LOOPBACK_RAY}, timeout=600)


@pytest.fixture
def grid(tmp_path: Path) -> Path:
    (tmp_path / "w.json").write_text(json.dumps(mix()))
    path = tmp_path / "grid.toml"
    path.write_text(GRID)
    return path


def test_every_cell_one_row_in_every_format_and_resumed(grid):
    folder = grid.parent
    first = kvplan("sweep", "grid.toml", "-o", "results.parquet", "--workers", "2", "--json", cwd=folder)
    assert first.returncode == 1, first.stderr           # some cells failed, and say so
    assert "HEAVY=\n" in first.stderr                    # plan on given KV memory and simulate need no torch
    summary = json.loads(first.stdout)
    assert (summary["cells"], summary["ran"], summary["failed"], summary["format"]) == (8, 8, 4, "parquet")
    rows = read_table(folder / "results.parquet")
    assert [row["cell"] for row in rows] == list(range(8))
    for row in rows:
        assert row["kvplan_version"] and row["vllm_version"] in ("0.17.1", "0.33.0")
        assert row["model"] == "Qwen/Qwen2-0.5B-Instruct" and row["workload"] == "w.json"
        if row["tensor_parallel_size"] == 3:
            assert row["status"] == "error" and row["error"].startswith("plan: ") and "divisible" in row["error"]
            assert row["simulate_num_finished"] is None
        else:
            assert row["status"] == "ok" and row["plan_fits"] is True
            assert row["plan_num_blocks"] > 1 and row["simulate_num_finished"] == 40
            assert row["plan_max_num_seqs"] == row["max_num_seqs"] == 8        # the workload's setting
            assert row["simulate_ttft_p95_s_estimate"] > 0
    assert not journal_path(folder / "results.parquet").exists()

    # the same grid to CSV and JSON Lines: the same rows, typed as they were
    for name in ("results.csv", "results.jsonl"):
        other = kvplan("sweep", "grid.toml", "-o", name, "--workers", "2", cwd=folder)
        assert other.returncode == 1, other.stderr
        assert read_table(folder / name) == rows

    # run again: every cell is done already
    again = kvplan("sweep", "grid.toml", "-o", "results.parquet", "--json", cwd=folder)
    assert json.loads(again.stdout)["ran"] == 0 and "8 of 8 cells already done" in again.stderr
    assert read_table(folder / "results.parquet") == rows
    retried = kvplan("sweep", "grid.toml", "-o", "results.parquet", "--retry-failed", "--json", "--workers", "1",
                     cwd=folder)
    assert json.loads(retried.stdout)["ran"] == 4
    assert read_table(folder / "results.parquet") == rows

    # a sweep stopped after three rows (and in the middle of a fourth) resumes from its journal
    lines = (folder / "results.jsonl").read_text().splitlines()
    journal_path(folder / "resumed.jsonl").write_text("\n".join(lines[:3]) + "\n" + lines[3][:40])
    resumed = kvplan("sweep", "grid.toml", "-o", "resumed.jsonl", "--json", "--workers", "2", cwd=folder)
    assert (json.loads(resumed.stdout)["resumed"], json.loads(resumed.stdout)["ran"]) == (3, 5)
    assert read_table(folder / "resumed.jsonl") == rows
    assert not journal_path(folder / "resumed.jsonl").exists()


def test_outputs_that_would_lose_something_are_refused(grid):
    folder = grid.parent
    foreign = folder / "mine.csv"
    foreign.write_text("a,b\n1,2\n")
    refused = kvplan("sweep", "grid.toml", "-o", "mine.csv", cwd=folder)
    assert refused.returncode == 2 and "not a results table" in refused.stderr
    assert foreign.read_text() == "a,b\n1,2\n"
    (folder / "dir.csv").mkdir()
    for output, message in (("dir.csv", "is a directory"), ("grid.toml", "name the format by the suffix")):
        result = kvplan("sweep", "grid.toml", "-o", output, cwd=folder)
        assert result.returncode == 2 and message in result.stderr and result.stdout == ""
    bad = kvplan("sweep", "grid.toml", "-o", "r.csv", "--executor", "ray", "--workers", "0", cwd=folder)
    assert bad.returncode == 2 and "--workers: 0 is out of range" in bad.stderr
    if importlib.util.find_spec("ray") is not None:
        nobody = kvplan("sweep", "grid.toml", "-o", "r.csv", "--executor", "ray", "--ray-address", "127.0.0.1:9",
                        cwd=folder)
        assert nobody.returncode == 2 and "nothing answers there" in nobody.stderr
        assert not (folder / "r.csv").exists()


RAY_HEAD = """
import sys
import ray
context = ray.init(num_cpus=2, include_dashboard=False, object_store_memory=80 * 1024 * 1024,
                   log_to_driver=False, logging_level="ERROR")
print(context.address_info["gcs_address"], flush=True)
sys.stdin.read()          # until the test closes it
ray.shutdown()
"""


@pytest.mark.slow
def test_a_ray_cluster_gives_the_rows_of_the_local_pool(grid):
    pytest.importorskip("ray")
    folder = grid.parent
    local = kvplan("sweep", "grid.toml", "-o", "local.parquet", "--workers", "2", cwd=folder)
    assert local.returncode == 1, local.stderr
    fit_args = ("fit", "--model", "Qwen/Qwen2-0.5B-Instruct", "--concurrency", "16@4096", "--gpus",
                "l4-24gb,h100-sxm-80gb", "--kv-cache-memory", "256MiB,512MiB,1GiB,2GiB", "--json")
    fit_local = kvplan(*fit_args, "--workers", "2", cwd=folder)
    assert fit_local.returncode == 0, fit_local.stderr

    # the cluster belongs to this test: its processes end with the head's process
    head = subprocess.Popen([sys.executable, "-c", RAY_HEAD], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                            text=True, env={**os.environ, **LOOPBACK_RAY}, cwd=folder)
    try:
        address = head.stdout.readline().strip()
        assert address.startswith("127.0.0.1:"), address
        on_ray = kvplan("sweep", "grid.toml", "-o", "ray.parquet", "--executor", "ray", "--ray-address", address,
                        "--json", cwd=folder)
        fit_ray = kvplan(*fit_args, "--executor", "ray", "--ray-address", address, cwd=folder)
    finally:
        head.stdin.close()
        head.wait(timeout=120)
    assert on_ray.returncode == 1, on_ray.stderr
    summary = json.loads(on_ray.stdout)
    assert summary["executor"] == {"name": "ray", "workers": 2} and summary["ran"] == 8
    assert read_table(folder / "ray.parquet") == read_table(folder / "local.parquet")
    assert fit_ray.returncode == 0, fit_ray.stderr
    on_cluster, here = json.loads(fit_ray.stdout), json.loads(fit_local.stdout)
    assert on_cluster.pop("executor") == {"name": "ray", "workers": 2}
    here.pop("executor")
    assert on_cluster == here
