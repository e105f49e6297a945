"""The grid docs/sweep.md shows and the example grid are valid grids, laid out as they say."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

from kvplan.usecases.sweep.grid import load_grid

REPO = Path(__file__).resolve().parents[2]


def test_the_documented_grid_and_the_example_grid_load(tmp_path):
    (text,) = re.findall(r"```toml\n(.*?)```", (REPO / "docs" / "sweep.md").read_text(encoding="utf-8"), re.S)
    (tmp_path / "workloads").mkdir()
    shutil.copy(REPO / "examples" / "workloads" / "chat-5rps.json", tmp_path / "workloads")
    (tmp_path / "sweeps").mkdir()
    (tmp_path / "sweeps" / "doc.toml").write_text(text)
    documented = load_grid(tmp_path / "sweeps" / "doc.toml")
    example = load_grid(REPO / "examples" / "sweeps" / "llama8b-gpus.toml")
    assert documented.size == example.size == 12
    assert [cell.cell_id for cell in documented.cells()] != [cell.cell_id for cell in example.cells()]
    assert documented.simulate.step_time_ms == 10 and example.commands == ("plan", "simulate")
