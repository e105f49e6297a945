"""The grid file: axes into cells in a fixed order, ids that change with what decides a row, and
one line per mistake."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.errors import KvplanError
from kvplan.usecases.sweep.grid import load_grid
from tests.usecases.simulate.factories import mix

GRID = """
commands = ["plan", "simulate"]
[axes]
models = ["Qwen/Qwen2-0.5B-Instruct"]
vllm_releases = ["0.17.1", "0.33.0"]
gpus = ["l4-24"]
kv_cache_memory = ["1GiB", 2147483648]
max_num_seqs = [8, 32]
workloads = ["w.json"]
[simulate]
seed = 3
"""


def write(tmp_path: Path, text: str = GRID, workload: dict | None = None) -> Path:
    (tmp_path / "w.json").write_text(json.dumps(workload or mix()))
    path = tmp_path / "grid.toml"
    path.write_text(text)
    return path


def test_cells_are_the_product_in_axis_order(tmp_path):
    grid = load_grid(write(tmp_path))
    cells = grid.cells()
    assert grid.size == len(cells) == 8
    assert [(c.configuration.release.version, c.configuration.args.kv_cache_memory_bytes,
             c.configuration.args.max_num_seqs)
            for c in cells[:3]] == [("0.17.1", 1 << 30, 8), ("0.17.1", 1 << 30, 32), ("0.17.1", 2 << 30, 8)]
    assert {c.configuration.gpu for c in cells} == {"l4-24gb"}
    assert len({c.cell_id for c in cells}) == 8
    assert cells[0].workload.given == "w.json" and cells[0].simulate.seed == 3
    assert grid.inputs == (tmp_path / "grid.toml", tmp_path / "w.json")


def test_ids_follow_what_decides_the_row(tmp_path):
    first = [c.cell_id for c in load_grid(write(tmp_path)).cells()]
    assert first == [c.cell_id for c in load_grid(write(tmp_path)).cells()]
    # another workload file content, another seed or other commands: other rows
    changed = [c.cell_id for c in load_grid(write(tmp_path, workload=mix(seed=12))).cells()]
    reseeded = [c.cell_id for c in load_grid(write(tmp_path, GRID.replace("seed = 3", "seed = 4"))).cells()]
    assert not set(first) & set(changed) and not set(first) & set(reseeded)


AXES = "[axes]\nmodels = ['m']\ngpus = ['l4-24gb']\n"


@pytest.mark.parametrize(("text", "message"), [
    ("[axes]\ngpus = ['l4-24gb']", "axes.models: required"),
    ("[axes]\nmodels = ['m']", "give gpus or kv_cache_memory"),
    ("[axes]\nmodels = ['m']\ngpus = ['l4-24gb']\nbatch = [1]", "axes.batch: unknown key"),
    ("[axes]\nmodels = ['m']\ngpus = ['tpu']", "axes.gpus[0]: unknown GPU"),
    ("[axes]\nmodels = ['m']\ngpus = ['l4-24gb', 'l4-24gb']", "axes.gpus[1]: 'l4-24gb' is given twice"),
    (AXES + "vllm_releases = ['0.10.0']", "vllm_releases[0]: expected one of: 0.17.1, 0.33.0, 0.34.0"),
    (AXES + "gpu_memory_utilization = [1.5]", "gpu_memory_utilization[0]"),
    (AXES + "tensor_parallel_size = [0]", "tensor_parallel_size[0]: 0 is out of range"),
    ("[axes]\nmodels = ['m']\nkv_cache_memory = ['1GiB']\ngpu_memory_utilization = [0.9]", "give one of them"),
    ("commands = ['simulate']\n" + AXES, "required by the simulate command"),
    (AXES + "workloads = ['w.json']", "simulate is not among the commands"),
    ("commands = ['plan', 'replay']\n" + AXES, "commands[1]: expected one of: plan, profile, simulate"),
    ("[axes]\nmodels = []\ngpus = ['l4-24gb']", "axes.models: expected a list of 1 to 10,000 items"),
    ("[axes\n", "not valid TOML"),
    # issue 12: values outside any deployment's range, deep nesting, huge integers, a device as a file
    ("[axes]\nmodels = ['m']\nkv_cache_memory = [" + str(2**70) + "]",
     "kv_cache_memory[0]: 1180591620717411303424 bytes is out of range"),
    (AXES + "max_num_seqs = [1000000000000]", "max_num_seqs[0]: 1000000000000 is out of range"),
    (AXES + "block_size = [12]", "block_size[0]: 12 is not a block size vLLM accepts"),
    (AXES + "[simulate]\nseed = " + str(2**70), "simulate.seed: 1180591620717411303424 is out of range"),
    ("a = " + "[" * 3000 + "]" * 3000, "nests too deeply"),
    ("[axes]\nmodels = ['m']\nkv_cache_memory = [" + "9" * 5000 + "]", "a number of more than 4,300 digits"),
    ("commands = ['simulate']\n" + AXES + "workloads = ['/dev/zero']", "axes.workloads: /dev/zero: not a regular file"),
])
def test_mistakes_name_the_field(tmp_path, text, message):
    with pytest.raises(KvplanError, match=message.replace("[", r"\[").replace("]", r"\]")) as error:
        load_grid(write(tmp_path, text))
    assert str(error.value).startswith("grid.toml: ")
