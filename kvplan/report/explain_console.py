"""`kvplan explain` for people: where the settings came from, one table of the start-up's terms as
logged and as predicted, what ran out and the changes that start."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kvplan.report.console import semantics_line
from kvplan.report.stdout import ReportConsole
from kvplan.report.text import plain
from kvplan.units import format_gib
from kvplan.usecases.explain.explain import ExplainResult, changed_command
from kvplan.usecases.explain.settings import Setting
from kvplan.usecases.explain.terms import TermRow

_SOURCE_WORDS = {"log": "log", "flag": "flag", "catalog": "catalog", "assumed": "assumed"}


def _value(setting: Setting) -> str:
    value = setting.value
    if value is None:
        return "-"
    if setting.name == "gpu_memory" and isinstance(value, int):
        return f"{value:,} B ({format_gib(value)} GiB)"
    if isinstance(value, tuple):
        return f"{len(value)} sizes, {min(value, default=0)}..{max(value, default=0)}"
    return str(value)


def _settings_table(result: ExplainResult) -> Table:
    table = Table(title="Settings (from: log:line, a flag, the GPU catalog, or assumed: vLLM's default)",
                  title_justify="left", show_edge=False, pad_edge=False)
    table.add_column("setting", no_wrap=True)
    table.add_column("value", overflow="fold")
    table.add_column("from", no_wrap=True)
    table.add_column("note", overflow="fold")
    for setting in result.settings:
        where = _SOURCE_WORDS[setting.source] + ("" if setting.line is None else f":{setting.line}")
        note = "" if setting.source == "assumed" and setting.note and setting.note.startswith("not in the log") \
            else setting.note or ""
        table.add_row(setting.name, plain(_value(setting)), where, plain(note))
    return table


def _figure(row: TermRow, value: int | float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    if row.unit == "bytes":
        return f"{value / 2**30:+.2f}" if signed else format_gib(value)
    if row.unit == "tokens":
        return f"{int(value):+,}" if signed else f"{int(value):,}"
    return f"{value:+.2f}x" if signed else f"{value:.2f}x"


def terms_table(result: ExplainResult) -> Table:
    table = Table(title="Start-up terms (the log line in brackets; GiB as vLLM rounds them; difference = kvplan - log)",
                  title_justify="left",
                  show_edge=False, pad_edge=False)
    table.add_column("term", overflow="fold")
    for column in ("logged", "kvplan", "difference"):
        table.add_column(column, justify="right", no_wrap=True)
    table.add_column("", no_wrap=True)
    for row in result.rows:
        mark = {True: "ok", False: "!!", None: ""}[row.within]
        label = row.label + ("" if row.line is None else f" [{row.line}]")
        table.add_row(plain(label), _figure(row, row.logged), _figure(row, row.predicted),
                      _figure(row, row.difference, signed=True), mark)
    return table


def render_explain(result: ExplainResult, console: Console | None = None) -> None:
    console = console or ReportConsole(highlight=False)
    log = result.log
    console.print(semantics_line(result.release))
    version = "not named" if log.vllm_version is None else f"{log.vllm_version.value} (line {log.vllm_version.line})"
    console.print(Text(f"{result.where}: {log.lines:,} lines; vLLM release {version}; wording: {result.wording}"))
    console.print(Text(f"predicted with vLLM {result.release.version}'s rules: {result.release_reason}"))
    if log.workers and len(log.workers) > 1:
        console.print(Text(f"workers: {', '.join(log.workers)} (a term several logged: the worker with the least "
                           "KV memory)"))
    console.print(_settings_table(result))
    console.print(terms_table(result))
    tolerance = "tolerance: max(150 MiB, 1%) for memory, 1% for the pool; !! beyond it"
    console.print(Text(tolerance, style="dim"))
    for row in result.rows:
        if row.reading:
            console.print(Text(f"- {row.label}: {row.reading}"))
        elif row.note and row.predicted is None:
            console.print(Text(f"- {row.label}: {row.note}", style="dim"))
    for reason in result.not_predicted:
        console.print(Text(f"not predicted: {reason}", style="yellow"))
    if log.error is not None:
        message = log.error.message if len(log.error.message) <= 300 else log.error.message[:297] + "..."
        console.print(Text(f"The start-up ended in an error (line {log.error.line}): {message}", style="bold red"))
    elif log.engine_ready:
        console.print(Text("The engine started (init engine ... took).", style="green"))
    if result.shortfall is not None:
        console.print(Text(f"What ran out: {result.shortfall.term}: {result.shortfall.text}", style="bold"))
    if result.fixes:
        console.print(Text("Smallest changes that start (each checked with kvplan's sizing unless it says not):",
                           style="bold"))
        for fix in result.fixes:
            console.print(Text(f"  {fix.change}: {fix.what}; {fix.outcome}"))
            if result.command:
                console.print(Text(f"    {changed_command(result.command, fix)}", style="cyan"))
    elif result.command:
        console.print(Text(f"command (from the log's non-default args): {result.command}", style="dim"))
    for warning in result.warnings:
        console.print(Text(f"warning: {warning}", style="yellow"))
