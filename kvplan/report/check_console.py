"""The check report for people: one table of every assertion, then one line per failure saying
what to change."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from kvplan.report.check_markdown import requirement
from kvplan.report.console import semantics_line
from kvplan.report.text import plain as escape
from kvplan.usecases.check.assertions import format_margin, format_value
from kvplan.usecases.check.evaluate import CheckReport


def render_check(report: CheckReport, console: Console) -> None:
    console.print(semantics_line(report.release))
    if report.target is not None:
        console.print(f"[bold]target:[/] {escape(report.target.label)}")
    table = Table(title=f"kvplan check {escape(report.name)}", title_justify="left")
    for column in ("assertion", "group", "required", "measured", "result", "margin"):
        table.add_column(column, justify="right" if column in ("measured", "margin") else "left")
    for result in report.results:
        table.add_row(
            escape(result.name), escape(result.group), escape(requirement(result)),
            escape(format_value(result.kind, result.measured)),
            "[green]pass[/]" if result.passed else "[bold red]FAIL[/]",
            escape(format_margin(result)),
        )
    console.print(table)
    for note in report.notes:
        console.print(f"[dim]note: {escape(note)}[/]")
    for result in report.failures:
        console.print(f"[bold red]✗[/] {escape(result.name)} ({escape(result.group)}): {escape(result.hint or '')}")
    total, failed = len(report.results), len(report.failures)
    if failed:
        console.print(f"[bold red]{failed} of {total} assertions failed[/]")
    else:
        console.print(f"[bold green]all {total} assertions hold[/]")
