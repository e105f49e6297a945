"""`kvplan simulate WORKLOAD`: a request mix (or a request list) through vLLM's scheduler and block
manager (either release, either scheduling mode), reported as KV-cache occupancy, prefix-cache
hits, preemptions, queues and latency."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import TextIO

import typer

from kvplan.cli.options import SIMULATING, EngineOptions, checked, engine_options
from kvplan.cli.outputs import prepare_outputs
from kvplan.cli.progress import reporting
from kvplan.cli.quick_asserts import verdict_exit_code
from kvplan.cli.root import JSON, app
from kvplan.errors import EXIT_STALLED, KvplanError
from kvplan.files import atomic_output
from kvplan.limits import MAX_SEED
from kvplan.report.jsonout import dumps
from kvplan.report.sim_timeline import TimelineCsv
from kvplan.report.simulate_json import result_document
from kvplan.report.stderr import warn_once
from kvplan.schema import Integer
from kvplan.usecases.check.quick import (
    QUICK_ASSERTS,
    parse_quick_asserts,
    quick_asserts_around,
    quick_help,
    simulation_report,
)
from kvplan.usecases.plan_settings import STEP_MS
from kvplan.usecases.simulate.driver import SimOptions, check_recorded_steps, prepare
from kvplan.usecases.simulate.engine_source import EngineOverrides
from kvplan.usecases.simulate.simulation import SimResult, simulate
from kvplan.usecases.simulate.workload import load_workload

REPORT_WIDTH = 110
SEED = Integer(0, MAX_SEED)


@app.command("simulate", context_settings=QUICK_ASSERTS, epilog=quick_help("simulate"))
@engine_options(*SIMULATING)
def simulate_command(
    ctx: typer.Context,
    workload_path: Path = typer.Argument(
        ..., metavar="WORKLOAD",
        help="Workload file (docs/workload.md), a trace-replay file, or a JSON Lines request list."),
    *,
    engine: EngineOptions,
    step_time_ms: float | None = typer.Option(None, "--step-time-ms", help="Every step takes this long (estimate)."),
    seed: int | None = typer.Option(None, "--seed", help="Random seed (default: the workload's seed, else 0)."),
    find_max_rate: bool = typer.Option(
        False, "--find-max-rate", help="Also search the highest arrival rate the engine sustains (many runs)."),
    json_output: bool = JSON,
    output: Path | None = typer.Option(None, "--output", "-o", help="Write what would be printed to FILE instead."),
    timeline: Path | None = typer.Option(None, "--timeline", help="Write one CSV row per step to FILE."),
    report: Path | None = typer.Option(None, "--report", help="Write a self-contained HTML report to FILE."),
) -> None:
    """Simulate a workload; time-derived figures are estimates from the step-time model.

    Sizing flags (--gpu-memory, --kv-cache-memory, --kv-cache-dtype, --dtype, -tp, -pp) apply when the
    workload plans its pool from engine.model.

    Exit codes: 0 done, 1 an --assert-* failed or the model does not fit, 2 bad workload or options, 3 the run
    stalled (a request cannot fit even alone)."""
    if str(workload_path).startswith("--"):
        # an option before WORKLOAD was taken as it (the command reads unknown options, as --assert-*)
        assertions, workload_word = quick_asserts_around(str(workload_path), ctx.args, "simulate", "WORKLOAD")
        workload_path = Path(workload_word)
    else:
        assertions = parse_quick_asserts(ctx.args, "simulate")
    checked(STEP_MS, "--step-time-ms")(step_time_ms)
    checked(SEED, "--seed")(seed)
    overrides = engine.pick(EngineOverrides)
    workload = load_workload(workload_path)
    prepare_outputs([("-o", output), ("--timeline", timeline), ("--report", report)], workload.inputs)
    setup = prepare(workload, SimOptions(overrides=overrides, seed=seed, step_time_ms=step_time_ms,
                                         release=engine.release()))
    if timeline is not None:
        check_recorded_steps(setup, "--timeline")
    warn_once((*setup.notes, setup.engine.weights_warning))

    with _written(timeline) as timeline_stream, reporting() as progress:
        progress.stage(f"simulating {workload.name}")
        result = simulate(setup, find_max_rate=find_max_rate, progress=progress.count,
                          on_step=None if timeline_stream is None else TimelineCsv(timeline_stream),
                          stage=progress.stage)

    if report is not None:
        from kvplan.report.sim_html import render_html

        with _written(report) as stream:
            stream.write(render_html(result))  # type: ignore[union-attr]
        print(f"kvplan: wrote the report to {report}", file=sys.stderr)
    if timeline is not None:
        print(f"kvplan: wrote {result.metrics.num_steps:,} steps to {timeline}", file=sys.stderr)
    if output is not None:
        with _written(output) as stream:
            _emit(result, json_output, stream)  # type: ignore[arg-type]
        print(f"kvplan: wrote the result to {output}", file=sys.stderr)
    else:
        _emit(result, json_output, sys.stdout)
    code = verdict_exit_code(simulation_report(assertions, result) if assertions else None)
    if result.stalled:
        print(f"kvplan: the simulation stalled after {result.metrics.num_steps:,} steps: a request cannot be "
              "scheduled even alone (too few blocks or tokens per step for it)", file=sys.stderr)
        raise typer.Exit(EXIT_STALLED)
    if code:
        raise typer.Exit(code)


def _emit(result: SimResult, as_json: bool, stream: TextIO) -> None:
    if as_json:
        stream.write(dumps(result_document(result)) + "\n")
        return
    from kvplan.report.sim_console import render
    from kvplan.report.stdout import ReportConsole

    to_terminal = stream is sys.stdout and stream.isatty()
    console = ReportConsole(file=stream, width=None if to_terminal else REPORT_WIDTH,
                      color_system="auto" if to_terminal else None)
    render(result, console)


@contextlib.contextmanager
def _written(path: Path | None) -> Iterator[TextIO | None]:
    """A stream whose file appears, whole, only when the block succeeds (see `atomic_output`)."""
    if path is None:
        yield None
        return
    try:
        with atomic_output(path) as stream:
            yield stream
    except OSError as error:
        raise KvplanError(f"cannot write {path}: {error.strerror}") from None
