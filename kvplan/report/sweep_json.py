"""`kvplan sweep --json`: what the sweep did (schema in docs/schemas/sweep.json); the rows are in
the output table."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvplan import __version__
from kvplan.report.sweep_table import Record
from kvplan.usecases.sweep.cells import COLUMNS
from kvplan.usecases.sweep.grid import Grid
from kvplan.usecases.sweep.run import SweepResult

SWEEP_SCHEMA_VERSION = 1
SWEEP_KIND = "kvplan.sweep"


def sweep_document(grid: Grid, output: Path, kind: str, result: SweepResult, rows: list[Record]) -> dict[str, Any]:
    return {
        "schema_version": SWEEP_SCHEMA_VERSION,
        "kind": SWEEP_KIND,
        "kvplan_version": __version__,
        "grid": grid.name,
        "commands": list(grid.commands),
        "axes": {name: list(values) for name, values in grid.axes},
        "output": str(output),
        "format": kind,
        "cells": result.num_cells,
        "resumed": result.num_skipped,
        "ran": len(result.rows),
        "failed": result.num_failed,
        "rows": len(rows),
        "rows_failed": sum(1 for row in rows if row["status"] != "ok"),
        "executor": {"name": result.executor, "workers": result.workers},
        "columns": list(COLUMNS),
    }
