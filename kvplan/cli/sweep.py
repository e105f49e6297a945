"""`kvplan sweep GRID -o results.parquet`: every cell of a grid, one row each, resumable."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from kvplan.cli.fit import EXECUTOR, RAY_ADDRESS, WORKERS
from kvplan.cli.options import EngineOptions, engine_options
from kvplan.cli.outputs import prepare_outputs
from kvplan.cli.root import JSON, app
from kvplan.errors import EXIT_FINDING
from kvplan.report import sweep_table
from kvplan.report.stderr import warn_once
from kvplan.usecases.sweep.cells import SweepRow
from kvplan.usecases.sweep.grid import load_grid


@app.command("sweep")
@engine_options("offline")
def sweep_command(
    engine: EngineOptions,
    grid_path: Path = typer.Argument(..., metavar="GRID", help="The grid file (TOML, docs/sweep.md)."),
    output: Path = typer.Option(..., "--output", "-o", help="The results table: .parquet, .csv or .jsonl. An "
                                "existing one is resumed: the cells it holds are skipped."),
    executor_name: str = EXECUTOR,
    ray_address: str | None = RAY_ADDRESS,
    workers: int | None = WORKERS,
    retry_failed: bool = typer.Option(False, "--retry-failed", help="Run again the cells whose row holds an error."),
    json_output: bool = JSON,
) -> None:
    """Run plan, profile (fake backend) and simulate over every cell of a grid, into one table.

    Every row carries its inputs, kvplan's version and the vLLM release. A failing cell records
    its error in its row and the sweep goes on. Exit codes: 0 every cell ran, 1 some cells hold an
    error, 2 bad grid or options.

    A model that is neither local, in kvplan's catalog nor in the Hugging Face cache has its
    config.json fetched from the hub, as `kvplan plan` does; never with --offline or HF_HUB_OFFLINE=1."""
    grid = load_grid(grid_path)
    kind = sweep_table.table_format(output)
    journal_file = sweep_table.journal_path(output)
    prepare_outputs([("-o", output), ("the journal of -o", journal_file)], grid.inputs)
    cells = grid.cells()
    limit = sweep_table.resume_limit(len(cells))
    previous = sweep_table.read_table(output, limit) if output.exists() else []
    ids = {cell.cell_id for cell in cells}
    journaled = sweep_table.read_journal(output, limit)
    foreign = sum(1 for row in journaled if row["cell_id"] not in ids)
    if foreign:
        print(f"kvplan: {journal_file}: {foreign:,} of its {len(journaled):,} rows are of cells this grid does not "
              "have (another grid's journal): ignored", file=sys.stderr)
    previous = sweep_table.merged(previous, [row for row in journaled if row["cell_id"] in ids], {})
    if retry_failed:
        previous = [row for row in previous if row["status"] == "ok"]
    done = frozenset(row["cell_id"] for row in previous) & ids
    if done:
        print(f"kvplan: {output}: {len(done):,} of {len(cells):,} cells already done, skipped", file=sys.stderr)

    from kvplan.cli.work_progress import work_progress
    from kvplan.usecases.executors import make_executor
    from kvplan.usecases.sweep.run import run_sweep

    todo = len(cells) - len(done)
    counts = {"done": 0, "failed": 0}
    with make_executor(executor_name, workers, ray_address) as executor, work_progress() as progress, \
            sweep_table.journal(output) as journal:
        if todo:
            progress.update("cells", 0, todo)

        def arrived(row: SweepRow) -> None:
            sweep_table.append(journal, row)
            counts["done"] += 1
            counts["failed"] += row.status != "ok"
            progress.update("cells", counts["done"], todo, counts["failed"])

        result = run_sweep(grid, executor, done, on_row=arrived)
    warn_once(result.weights_warnings)

    order = {cell.cell_id: cell.index for cell in cells}
    rows = sweep_table.merged(previous, [sweep_table.record(row) for row in result.rows], order)
    sweep_table.write_table(output, rows)
    sweep_table.journal_path(output).unlink(missing_ok=True)
    failed = sum(1 for row in rows if row["status"] != "ok")
    print(f"kvplan: wrote {len(rows):,} rows to {output} ({result.num_skipped:,} cells resumed, "
          f"{len(result.rows):,} run, {result.num_failed:,} of them failed)", file=sys.stderr)
    if json_output:
        from kvplan.report.jsonout import emit_json
        from kvplan.report.sweep_json import sweep_document

        emit_json(sweep_document(grid, output, kind, result, rows))
    if failed:
        raise typer.Exit(EXIT_FINDING)
