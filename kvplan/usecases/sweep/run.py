"""Run the cells of a grid through an executor; cells already done (by id) are skipped."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvplan.usecases.executors import Executor, Outcome
from kvplan.usecases.plan import distinct_weights_warnings
from kvplan.usecases.sweep.cells import CellRun, SweepRow, failed_row, run_cell
from kvplan.usecases.sweep.grid import Cell, Grid


@dataclass(frozen=True)
class SweepResult:
    rows: tuple[SweepRow, ...]         # the cells run now, in grid order
    num_cells: int                     # in the grid
    num_skipped: int                   # already done
    executor: str
    workers: int
    weights_warnings: tuple[str, ...] = ()   # the plans' that could not count a model's weights, once each

    @property
    def num_failed(self) -> int:
        return sum(1 for row in self.rows if row.status != "ok")


def run_sweep(grid: Grid, executor: Executor, done: frozenset[str] = frozenset(),
              on_row: Callable[[SweepRow], None] | None = None) -> SweepResult:
    """Every cell of `grid` whose id is not in `done`; `on_row` hears each row as it arrives."""
    cells = grid.cells()
    todo = [cell for cell in cells if cell.cell_id not in done]

    def arrived(outcome: Outcome[CellRun]) -> None:
        if on_row is not None:
            on_row(_row(outcome, todo))

    outcomes = executor.map(run_cell, todo, on_outcome=arrived)
    rows = tuple(_row(outcome, todo) for outcome in outcomes)
    warnings = distinct_weights_warnings(outcome.value.weights_warning for outcome in outcomes
                                         if outcome.value is not None)
    return SweepResult(rows, len(cells), len(cells) - len(todo), executor.name, executor.workers, warnings)


def _row(outcome: Outcome[CellRun], cells: list[Cell]) -> SweepRow:
    if outcome.value is not None:
        return outcome.value.row
    return failed_row(cells[outcome.index], outcome.error or "the task failed")
