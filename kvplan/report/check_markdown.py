"""The check report as Markdown, for `$GITHUB_STEP_SUMMARY` (the job's summary page on GitHub)."""

from __future__ import annotations

import os
from pathlib import Path

from kvplan.files import output_refusal
from kvplan.report.stderr import warn
from kvplan.report.text import markup_text
from kvplan.usecases.check.assertions import AssertionResult, Concurrency, format_margin, format_value
from kvplan.usecases.check.evaluate import CheckReport

SUMMARY_VARIABLE = "GITHUB_STEP_SUMMARY"


def requirement(result: AssertionResult) -> str:
    """`>= 500,000 tokens`, `<= 0 preemptions`, `= true`."""
    kind = result.kind
    if kind.bound == "is":
        return f"= {format_value(kind, result.required)}"
    symbol = ">=" if kind.bound == "min" else "<="
    if isinstance(result.required, Concurrency):
        return f"{symbol} {format_value(kind, result.required)}"
    unit = f" {kind.unit}" if kind.unit and kind.value in ("count", "tokens", "number") else ""
    return f"{symbol} {format_value(kind, result.required)}{unit}"


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def markdown_summary(report: CheckReport) -> str:
    total, failed = len(report.results), len(report.failures)
    verdict = f"all {total} assertions hold" if not failed else f"{failed} of {total} assertions failed"
    lines = [f"### {'✅' if not failed else '❌'} kvplan check `{report.name}`: {verdict}", ""]
    if report.target is not None:
        lines += [f"Target: {report.target.label}", ""]
    lines += ["| | assertion | group | required | measured | margin |", "|---|---|---|---|---|---|"]
    for result in report.results:
        lines.append("| " + " | ".join(_cell(cell) for cell in (
            "✅" if result.passed else "❌", f"`{result.name}`", result.group, requirement(result),
            format_value(result.kind, result.measured), format_margin(result),
        )) + " |")
    if failed:
        lines += ["", "**What to change**", ""]
        lines += [f"- `{result.name}` ({result.group}): {result.hint}" for result in report.failures]
    for note in report.notes:
        lines.append(f"\n> {note}")
    return "\n".join(lines) + "\n"


def append_step_summary(report: CheckReport, protected: tuple[Path, ...] = ()) -> Path | None:
    """Append the summary to the file GitHub Actions names in $GITHUB_STEP_SUMMARY, if any. The
    check's verdict matters more than its summary page: any trouble with that file is a warning on
    stderr, never a failed check, and a file the check reads is never appended to."""
    target = os.environ.get(SUMMARY_VARIABLE)
    if not target:
        return None
    path = Path(target)
    refusal = output_refusal(path, protected, create=False)
    if refusal is not None:
        warn(f"cannot append to ${SUMMARY_VARIABLE} ({target!a}): {refusal.split('; ')[0]}; the summary is not written")
        return None
    try:
        with path.open("a", encoding="utf-8", errors="replace") as out:
            out.write(markup_text(markdown_summary(report)) + "\n")
    except (OSError, ValueError) as error:
        warn(f"cannot append to ${SUMMARY_VARIABLE} ({target!a}): {getattr(error, 'strerror', None) or error}")
        return None
    return path
