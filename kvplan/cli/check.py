"""`kvplan check SPEC`: capacity and workload assertions for CI, with exit codes."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from kvplan.cli.root import app
from kvplan.report.jsonout import emit_json

REPORT_WIDTH = 120


@app.command("check")
def check_command(
    spec_path: Path = typer.Argument(..., metavar="SPEC", help="Check spec (TOML, or JSON): docs/check.md."),
    junit: Path | None = typer.Option(None, "--junit", help="Also write the verdicts as JUnit XML to FILE."),
    json_output: bool = typer.Option(False, "--json", help="Print the report as one JSON document and nothing else."),
) -> None:
    """Evaluate a spec's assertions on a saved profile or a plan; no GPU needed.

    Exit codes: 0 every assertion holds, 1 one failed, 2 the spec or its inputs are invalid.
    With $GITHUB_STEP_SUMMARY set, a Markdown summary is appended to it."""
    from kvplan.report.check_json import check_record
    from kvplan.report.check_markdown import append_step_summary
    from kvplan.usecases.check.evaluate import evaluate
    from kvplan.usecases.check.spec import load_spec

    spec = load_spec(spec_path)
    report = evaluate(spec)
    if junit is not None:
        from kvplan.report.check_junit import write_junit

        inputs = [spec_path, *(block.workload for block in spec.blocks if block.workload is not None)]
        if spec.target is not None and spec.target.profile is not None:
            inputs.append(spec.target.profile)
        write_junit(report, junit, tuple(inputs))
    append_step_summary(report)
    if json_output:
        emit_json(check_record(report))
    else:
        from rich.console import Console

        from kvplan.report.check_console import render_check

        # CI logs are not terminals: give the table room instead of rich's 80-column default
        render_check(report, Console(highlight=False, width=None if sys.stdout.isatty() else REPORT_WIDTH))
    if junit is not None:
        print(f"kvplan: wrote {len(report.results)} test cases to {junit}", file=sys.stderr)
    if report.exit_code:
        raise typer.Exit(report.exit_code)
