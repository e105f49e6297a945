"""`kvplan check` end to end: the example specs pass and fail as named, with the exit codes."""

from __future__ import annotations

import json
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = sorted((REPO / "examples" / "checks").glob("*.toml"))


def kvplan(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvplan", *args], capture_output=True, text=True, cwd=REPO,
                          env={"HF_HUB_OFFLINE": "1", "PATH": "", **(env or {})})


def test_there_is_a_passing_and_a_failing_example():
    names = [path.name for path in EXAMPLES]
    assert any(name.startswith("fail-") for name in names)
    assert any(not name.startswith("fail-") for name in names)


@pytest.mark.parametrize("spec", EXAMPLES, ids=lambda path: path.name)
def test_example_specs_exit_as_named(spec, tmp_path):
    expected = 1 if spec.name.startswith("fail-") else 0
    junit = tmp_path / "check.xml"
    summary = tmp_path / "summary.md"
    out = kvplan("check", str(spec.relative_to(REPO)), "--json", "--junit", str(junit),
                 env={"GITHUB_STEP_SUMMARY": str(summary)})
    assert out.returncode == expected, out.stderr
    record = json.loads(out.stdout)
    assert record["exit_code"] == expected and record["passed"] == (expected == 0)
    root = ET.parse(junit).getroot()
    assert int(root.get("failures")) == record["counts"]["failed"]
    assert int(root.get("tests")) == record["counts"]["total"]
    assert ("✅" if expected == 0 else "❌") in summary.read_text()


def test_the_output_is_deterministic():
    spec = str(EXAMPLES[0].relative_to(REPO))
    assert kvplan("check", spec, "--json").stdout == kvplan("check", spec, "--json").stdout


def test_a_bad_spec_is_one_line_and_exit_2(tmp_path):
    spec = tmp_path / "bad.toml"
    spec.write_text('[target]\nprofile = "missing.json"\n[[assert]]\nmin_kv_tokens = 10\n')
    out = kvplan("check", str(spec))
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.startswith("kvplan: error: bad.toml: target.profile (missing.json): no such file") \
        and out.stderr.count("\n") == 1
    spec.write_text("[[assert]]\nmin_kv_tokenz = 10\n")
    out = kvplan("check", str(spec))
    assert (out.returncode, out.stderr.strip()) == (
        2, "kvplan: error: bad.toml: assert[0].min_kv_tokenz: unknown key; did you mean min_kv_tokens?")


def test_junit_never_overwrites_an_input(tmp_path):
    spec = EXAMPLES[0]
    out = kvplan("check", str(spec), "--junit", str(spec))
    assert out.returncode == 2 and "this command reads that file" in out.stderr


def test_the_table_and_hints_without_json():
    fail = next(path for path in EXAMPLES if path.name.startswith("fail-"))
    out = kvplan("check", str(fail.relative_to(REPO)))
    assert out.returncode == 1
    assert "FAIL" in out.stdout
    assert any(line.startswith("✗ ") and "raise kv_cache_memory to" in line for line in out.stdout.splitlines())
