"""A model whose weights kvplan cannot count is planned by every command all the same, and each says so
with the one line `kvplan plan` prints on stderr, once per model and run (fit and sweep plan many
configurations of it), leaving stdout as it is: the report, or one JSON document with --json."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.uncountable import BLOCK_TORCH, break_weight_count, model_dir, warning_lines
from tests.usecases.simulate.factories import mix, write_workload


@pytest.fixture
def uncountable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    """A local Mixtral whose meta-device build fails: its weights are unknown to every command."""
    break_weight_count(monkeypatch)
    return model_dir(tmp_path / "mixtral")


def plan_warning(kvplan, model: str) -> str:
    """The line `kvplan plan` prints for the model: the one every other command must print."""
    code, out, err = kvplan("plan", "--model", model, "--kv-cache-memory", "1GiB", "--json")
    assert code == 0, err
    (line,) = warning_lines(err)
    assert line.startswith(f"kvplan: warning: weights unknown for {model} ")
    assert json.loads(out)["weights_bytes"] is None
    return line


def planned_workload(directory: Path, model: str, name: str = "w.json") -> Path:
    """A small mix on a pool planned from the model (engine.model with kv_cache_memory)."""
    engine = {"model": model, "kv_cache_memory": "1GiB", "max_num_seqs": 8, "max_num_batched_tokens": 256,
              "max_model_len": 1024}
    return write_workload(directory, mix(engine=engine), name)


def both_outputs(kvplan, *args: str, expect: int = 0) -> tuple[str, str, str]:
    """(the JSON document, the console report, and the stderr of each joined) of one command."""
    code, document, json_err = kvplan(*args, "--json")
    assert code == expect, json_err
    json.loads(document)                         # one document, nothing else
    code, report, console_err = kvplan(*args)
    assert code == expect, console_err
    return document, report, json_err + console_err


def test_check_says_it_once_for_its_target_and_its_workloads(kvplan, uncountable, tmp_path):
    line = plan_warning(kvplan, uncountable)
    spec = tmp_path / "target.toml"
    spec.write_text(f'name = "t"\n[target]\nmodel = {json.dumps(uncountable)}\nkv_cache_memory = "1GiB"\n'
                    "[[assert]]\nfits = true\nmin_num_blocks = 100\n")
    document, report, err = both_outputs(kvplan, "check", str(spec))
    assert warning_lines(err) == [line, line]      # once in each of the two runs
    assert "weights unknown" not in document + report
    # no target: each workload plans its own pool from the same model
    planned_workload(tmp_path, uncountable, "a.json")
    planned_workload(tmp_path, uncountable, "b.json")
    spec.write_text('name = "w"\n[[assert]]\nworkload = "a.json"\nmax_preemptions = 100\n'
                    '[[assert]]\nworkload = "b.json"\nmax_preemptions = 100\n')
    code, out, err = kvplan("check", str(spec), "--json")
    assert code == 0 and json.loads(out)["passed"], err
    assert warning_lines(err) == [line]


def test_simulate_says_it_once(kvplan, uncountable, tmp_path):
    line = plan_warning(kvplan, uncountable)
    workload = planned_workload(tmp_path, uncountable)
    document, report, err = both_outputs(kvplan, "simulate", str(workload))
    assert warning_lines(err) == [line, line]
    assert "weights unknown" not in document + report
    assert json.loads(document)["engine"]["source"] == "plan"


def test_fit_says_it_once_over_every_configuration(kvplan, uncountable):
    line = plan_warning(kvplan, uncountable)
    args = ("fit", "--model", uncountable, "--gpus", "l4-24gb,a100-sxm-80gb", "--kv-cache-memory", "1GiB,2GiB,4GiB",
            "--kv-cache-dtype", "auto,fp8", "--concurrency", "4@1024", "--workers", "1")
    document, report, err = both_outputs(kvplan, *args)
    assert json.loads(document)["counts"]["planned"] > 2
    assert warning_lines(err) == [line, line]
    assert "weights unknown" not in document + report


def test_sweep_says_it_once_per_model(kvplan, uncountable, tmp_path):
    other = model_dir(tmp_path / "another-mixtral")
    lines = [plan_warning(kvplan, uncountable), plan_warning(kvplan, other)]
    (tmp_path / "w.json").write_text(json.dumps(mix()))
    grid = tmp_path / "grid.toml"
    grid.write_text(f'commands = ["plan", "simulate"]\n[axes]\nmodels = {json.dumps([uncountable, other])}\n'
                    'kv_cache_memory = ["1GiB", "2GiB"]\nmax_model_len = [1024]\nworkloads = ["w.json"]\n')
    table = tmp_path / "rows.csv"
    code, out, err = kvplan("sweep", str(grid), "-o", str(table), "--workers", "1", "--json")
    assert code == 0, err
    document = json.loads(out)
    assert (document["ran"], document["failed"]) == (4, 0)
    assert warning_lines(err) == lines
    assert "weights unknown" not in out + table.read_text()


def test_check_without_torch_says_why_and_how_to_count_them(tmp_path):
    """docs/check.md: a model outside the catalog is planned with its weights unknown (a warning on
    stderr) where the profile extra is missing."""
    model = model_dir(tmp_path / "mixtral")
    spec = tmp_path / "spec.toml"
    spec.write_text(f'name = "t"\n[target]\nmodel = {json.dumps(model)}\nkv_cache_memory = "1GiB"\n'
                    "[[assert]]\nfits = true\n")
    code = BLOCK_TORCH + (
        "from kvplan.cli import run_app\n"
        f"run_app(['check', {str(spec)!r}, '--json'])\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["passed"]
    (line,) = warning_lines(done.stderr)
    assert f"weights unknown for {model}" in line and "needs torch" in line and "pip install" in line
