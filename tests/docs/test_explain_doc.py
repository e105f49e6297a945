"""docs/explain.md walks a real log from its error to the changed command that starts: the page's
tables are what `kvplan explain` gives for that log (fails when the page or kvplan moves)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kvplan.units import format_gib
from kvplan.usecases.explain.explain import ExplainRequest, ExplainResult, changed_command, explain
from kvplan.usecases.explain.log_reader import decode_log

REPO = Path(__file__).resolve().parents[2]
PAGE = REPO / "docs" / "explain.md"
LOG = REPO / "tests" / "data" / "logs" / "vllm-0.19.0-gpt-oss-20b-h100-oom.log"


def _figure(unit: str, value: float | None, signed: bool = False) -> str:
    if value is None:
        return "-"
    if unit == "bytes":
        return f"{value / 2**30:+.2f}" if signed else format_gib(value)
    if unit == "tokens":
        return f"{int(value):+,}" if signed else f"{int(value):,}"
    return f"{value:+.2f}x" if signed else f"{value:.2f}x"


def terms_markdown(result: ExplainResult) -> str:
    lines = ["| term (log line) | logged | kvplan | difference | |", "|---|---|---|---|---|"]
    for row in result.rows:
        mark = {True: "ok", False: "**!!**", None: ""}[row.within]
        line = "" if row.line is None else f" ({row.line})"
        lines.append(f"| {row.label}{line} | {_figure(row.unit, row.logged)} | {_figure(row.unit, row.predicted)} | "
                     f"{_figure(row.unit, row.difference, True)} | {mark} |")
    return "\n".join(lines)


def fixes_markdown(result: ExplainResult) -> str:
    assert result.command is not None
    return "\n".join(f"- `{fix.change}` ({'checked' if fix.checked else 'not checked'}): {fix.outcome}\n"
                     f"  `{changed_command(result.command, fix)}`" for fix in result.fixes)


def _between(text: str, name: str) -> str:
    match = re.search(rf"<!-- {name}:start -->\n(.*?)\n<!-- {name}:end -->", text, re.S)
    assert match, f"docs/explain.md has no {name} block"
    return match.group(1)


@pytest.mark.slow
def test_the_walkthrough_is_what_explain_gives():
    result = explain(ExplainRequest(decode_log(LOG.read_bytes()), LOG.name, {}, "0.17.1"))
    page = PAGE.read_text(encoding="utf-8")
    assert _between(page, "terms") == terms_markdown(result)
    assert _between(page, "fixes") == fixes_markdown(result)
    assert result.shortfall is not None and result.shortfall.text in page
