"""The engine-argument axes of a grid are `EngineArgs`' SWEEPS fields: the schema's axes, the readers
and the row's columns are made from them, in the order a grid has always had, and every value is read
by `Setting.read` (so a file's 2.0 is the size 2, with the same cell id)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from kvplan.schema import ListOf
from kvplan.semantics.engine.args import SWEEPS, named, setting
from kvplan.usecases.sweep import grid, grid_format
from kvplan.usecases.sweep.cells import COLUMNS
from kvplan.usecases.sweep.grid import load_grid

REPO = Path(__file__).resolve().parents[3]
OWN = ("models", "vllm_releases", "gpus", "scheduling", "workloads")    # the sweep's own axes
# the axes' order before they were made from EngineArgs: observable in the schema, the cells and the rows
HISTORICAL = ("models", "vllm_releases", "gpus", "tensor_parallel_size", "pipeline_parallel_size",
              "kv_cache_dtype", "dtype", "gpu_memory_utilization", "kv_cache_memory", "block_size", "max_model_len",
              "max_num_seqs", "max_num_batched_tokens", "enable_prefix_caching", "enable_chunked_prefill",
              "scheduling", "workloads")


def test_the_axes_are_the_sweeps_fields_and_the_sweeps_own():
    engine = {setting(name).key or name: name for name in named(SWEEPS)}
    assert set(grid.AXES) == set(grid_format.AXES.fields) == {*OWN, *engine}
    assert list(grid.AXES) == list(grid_format.AXES.fields)
    assert [name for name in grid.AXES if name in HISTORICAL] == list(HISTORICAL)
    for axis, name in engine.items():
        declared = setting(name)
        field = grid_format.AXES.fields[axis]
        assert grid.AXES[axis][0] == name
        assert declared.axis and field.description == declared.axis
        assert isinstance(field.kind, ListOf) and field.kind.item == declared.fixed_range


def test_every_engine_axis_is_a_column_between_gpu_and_scheduling():
    assert COLUMNS[COLUMNS.index("gpu") + 1:COLUMNS.index("scheduling")] == grid_format.ENGINE_AXES


def _grid(tmp_path: Path, axes: str) -> Path:
    path = tmp_path / "grid.toml"
    path.write_text('[axes]\nmodels = ["Qwen/Qwen2-0.5B-Instruct"]\ngpus = ["l4-24gb"]\n' + axes)
    return path


def test_a_whole_float_is_the_integer_with_the_same_cell_id(tmp_path):
    whole = load_grid(_grid(tmp_path, "tensor_parallel_size = [2.0]\nmax_model_len = [4096.0]\n")).cells()
    plain = load_grid(_grid(tmp_path, "tensor_parallel_size = [2]\nmax_model_len = [4096]\n")).cells()
    assert [c.cell_id for c in whole] == [c.cell_id for c in plain]
    args = whole[0].configuration.args
    assert (args.tensor_parallel_size, args.max_model_len) == (2, 4096)
    assert isinstance(args.tensor_parallel_size, int) and isinstance(args.max_model_len, int)


# in a fresh process: mamba_ssm_cache_dtype given the SWEEPS role and an axis description, before the
# sweep's modules are imported, is an axis of the schema and of the reader, with no other edit
NEW_AXIS = """
import dataclasses, json, sys
from pathlib import Path
from kvplan.semantics.engine import args
spec = next(f for f in dataclasses.fields(args.EngineArgs) if f.name == "mamba_ssm_cache_dtype")
declared = spec.metadata["setting"]
spec.metadata = {"setting": dataclasses.replace(declared, roles=declared.roles | {args.SWEEPS},
                                                axis="Mamba state dtypes")}
from kvplan.usecases.sweep import grid, grid_format
from kvplan.usecases.sweep.grid import load_grid
schema = grid_format.AXES.fields["mamba_ssm_cache_dtype"]
cells = load_grid(Path(sys.argv[1])).cells()
others = load_grid(Path(sys.argv[2])).cells()
print(json.dumps({"axes": list(grid.AXES), "schema": list(grid_format.AXES.fields),
                  "description": schema.description, "kind": schema.kind.item.schema(),
                  "values": [c.configuration.args.mamba_ssm_cache_dtype for c in cells],
                  "ids": len({c.cell_id for c in cells}), "other_ids": [c.cell_id for c in others]}))
"""


def test_a_field_given_the_sweeps_role_becomes_an_axis(tmp_path):
    (tmp_path / "new").mkdir()
    path = _grid(tmp_path / "new", 'mamba_ssm_cache_dtype = ["auto", "float32"]\n')
    other = _grid(tmp_path, "max_num_seqs = [8, 16]\n")
    done = subprocess.run([sys.executable, "-c", NEW_AXIS, str(path), str(other)], capture_output=True, text=True,
                          check=False, env={**os.environ, "PYTHONPATH": str(REPO)}, timeout=120)
    assert done.returncode == 0, done.stderr
    seen = json.loads(done.stdout)
    # after the axes it follows in EngineArgs' order, before the sweep's own last axes
    assert seen["axes"] == seen["schema"] == [*HISTORICAL[:-2], "mamba_ssm_cache_dtype", *HISTORICAL[-2:]]
    assert seen["description"] == "Mamba state dtypes"
    assert seen["kind"] == setting("mamba_ssm_cache_dtype").kind.schema()
    assert seen["values"] == ["auto", "float32"] and seen["ids"] == 2
    # a grid that does not sweep it keeps its cells' ids: a resumed sweep still skips its done cells
    assert seen["other_ids"] == [c.cell_id for c in load_grid(other).cells()]
