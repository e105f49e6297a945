"""`kvplan replay TRACE.json`: the trace through vLLM's scheduler and block manager (either release,
either scheduling mode), one JSON record per step (contracts: docs/vllm/replay-contract.md,
docs/vllm/replay-async-0.17.1.md, docs/vllm/replay-0.33.md, docs/vllm/replay-hybrid.md)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import IO

import typer

from kvplan.cli.options import SCHEDULING, EngineOptions, engine_options
from kvplan.cli.outputs import prepare_outputs
from kvplan.cli.root import app, json_option
from kvplan.errors import EXIT_STALLED, KvplanError
from kvplan.files import atomic_output
from kvplan.limits import MAX_RECORDED_STEPS
from kvplan.report.replay_records import RecordEncoder, summary_record
from kvplan.semantics.engine.replay import ReplaySummary, StepObserver
from kvplan.semantics.engine.scheduler import Scheduler, StepResult
from kvplan.semantics.engine.trace import Trace
from kvplan.usecases.replay import EngineSettings, ReplayRequest, load_replay, replay_trace

WRITE_BUFFER_BYTES = 1 << 20


@app.command("replay")
@engine_options(*SCHEDULING, may_fetch=False)
def replay_command(
    trace_path: Path = typer.Argument(..., metavar="TRACE", help="Trace file (JSON, trace-replay format)."),
    *,
    engine: EngineOptions,
    summary_only: bool = typer.Option(False, "--summary-only", help="Print only the summary line."),
    dump_free_queue: bool = typer.Option(False, "--dump-free-queue", help="Add the free queue to records."),
    json_output: bool = json_option("JSON Lines, even on a terminal,"),
    output: Path | None = typer.Option(None, "--output", "-o", help="Write the JSON Lines to FILE instead."),
) -> None:
    """Replay a request trace step by step; JSON Lines when piped or with -o, a summary on a terminal.

    Exit codes: 0 done, 2 bad trace or options, 3 the run stalled."""
    settings = engine.pick(EngineSettings)
    prepare_outputs([("-o", output)], (trace_path,))
    trace = load_replay(ReplayRequest(trace_path, settings, engine.release()))

    records = json_output or summary_only or dump_free_queue or output is not None or not sys.stdout.isatty()
    if records and not summary_only and trace.last_arrival_step > MAX_RECORDED_STEPS:
        raise KvplanError(f"{trace_path.name}: the last request arrives at step {trace.last_arrival_step:,}, so the "
                          f"replay would print at least that many records (one per step; at most "
                          f"{MAX_RECORDED_STEPS:,}): use --summary-only, or bring the arrival steps closer")
    if not records:
        from kvplan.report.replay_console import render_replay_summary

        summary = replay_trace(trace)
        render_replay_summary(summary, trace_path.name)
    elif output is None:
        try:
            summary = _replay_to(sys.stdout, trace, summary_only, dump_free_queue)
        except BrokenPipeError:
            # The reader (`head`, a pager) stopped reading: not an error of ours.
            os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
            return
    else:
        try:
            with atomic_output(output, buffering=WRITE_BUFFER_BYTES) as stream:
                summary = _replay_to(stream, trace, summary_only, dump_free_queue)
        except OSError as error:
            raise KvplanError(f"cannot write {output}: {error.strerror}") from None
        print(f"kvplan: wrote {'the summary' if summary_only else f'{summary.num_steps + 1} records'} "
              f"to {output}", file=sys.stderr)
    if summary.stalled:
        print(f"kvplan: the replay stalled at step {summary.num_steps - 1}: a request cannot be scheduled "
              "even alone (too few blocks or tokens per step for it)", file=sys.stderr)
        raise typer.Exit(EXIT_STALLED)


def _replay_to(stream: IO[str], trace: Trace, summary_only: bool, dump_free_queue: bool) -> ReplaySummary:
    write = stream.write
    observe: StepObserver | None = None
    if not summary_only:
        encode = RecordEncoder(dump_free_queue).encode

        def observe(result: StepResult, scheduler: Scheduler, arrived: list[str]) -> None:
            write(encode(result, scheduler, arrived))
            write("\n")
    summary = replay_trace(trace, observe)
    write(json.dumps(summary_record(summary)))
    write("\n")
    stream.flush()
    return summary
