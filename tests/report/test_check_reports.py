"""The report's renderings: JSON record, JUnit XML, Markdown summary, the console table."""

from __future__ import annotations

import io
import xml.etree.ElementTree as ET

from rich.console import Console

from kvplan.report.check_console import render_check
from kvplan.report.check_json import check_record
from kvplan.report.check_junit import junit_xml, write_junit
from kvplan.report.check_markdown import append_step_summary, markdown_summary
from kvplan.usecases.check.evaluate import evaluate
from tests.usecases.check.factories import QWEN

SPEC = f"""
name = "demo"
[target]
model = "{QWEN}"
kv_cache_memory = "1GiB"
[[assert]]
fits = true
min_kv_tokens = 1_000_000
min_concurrency = {{ tokens_per_request = 8192, at_least = 4 }}
"""


# Qwen2-0.5B on 1 GiB under the default release (0.34.0, block 64): 1 GiB // (64 x 12,288 B) = 1,365
# blocks, 87,360 tokens, 87,360 / 8,192 = 1,365 / 128 concurrency
BLOCKS = 1365


def test_junit_has_the_structure_reporters_read(write_spec, tmp_path):
    report = evaluate(write_spec(SPEC))
    root = ET.fromstring(junit_xml(report))
    assert root.tag == "testsuites"
    assert (root.get("tests"), root.get("failures"), root.get("errors")) == ("3", "1", "0")
    (suite,) = root.findall("testsuite")
    assert (suite.get("name"), suite.get("tests"), suite.get("failures")) == ("demo: capacity", "3", "1")
    cases = suite.findall("testcase")
    assert [case.get("name") for case in cases] == ["fits", "min_kv_tokens", "min_concurrency@8192"]
    assert all(case.get("classname") == "kvplan.check.demo.capacity" for case in cases)
    failures = [case.find("failure") for case in cases]
    assert failures[0] is None and failures[2] is None
    assert failures[1].get("message") == "min_kv_tokens: measured 87,360, required >= 1,000,000 tokens"
    assert "what to change: raise kv_cache_memory to 12,288,000,000 bytes" in failures[1].text
    path = tmp_path / "out.xml"
    write_junit(report, path)
    assert ET.parse(path).getroot().get("failures") == "1"


def test_the_json_record_counts_and_carries_hints(write_spec):
    record = check_record(evaluate(write_spec(SPEC)))
    assert (record["kind"], record["passed"], record["exit_code"]) == ("kvplan.check", False, 1)
    assert record["counts"] == {"total": 3, "passed": 2, "failed": 1}
    concurrency = record["results"][2]
    assert concurrency["required"] == {"at_least": 4.0, "tokens_per_request": 8192}
    assert concurrency["measured"] == BLOCKS / 128
    assert record["target"]["num_blocks"] == BLOCKS


def test_markdown_summary_is_appended_to_github_step_summary(write_spec, tmp_path, monkeypatch):
    report = evaluate(write_spec(SPEC))
    summary = tmp_path / "summary.md"
    summary.write_text("earlier step\n")
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    append_step_summary(report)
    text = summary.read_text()
    assert text.startswith("earlier step\n### ❌ kvplan check `demo`: 1 of 3 assertions failed")
    assert "| ❌ | `min_kv_tokens` | capacity | >= 1,000,000 tokens | 87,360 |" in text
    assert "- `min_kv_tokens` (capacity): raise kv_cache_memory" in text
    assert markdown_summary(report) in text


def test_console_table_and_one_line_per_failure(write_spec):
    report = evaluate(write_spec(SPEC))
    out = io.StringIO()
    render_check(report, Console(file=out, width=200, color_system=None))
    text = out.getvalue()
    assert "FAIL" in text and text.count("pass") >= 2
    failure_lines = [line for line in text.splitlines() if line.startswith("✗ ")]
    assert failure_lines == [f"✗ min_kv_tokens (capacity): {report.failures[0].hint}"]
    assert text.rstrip().endswith("1 of 3 assertions failed")
