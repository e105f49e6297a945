"""The specs that quickstart.md and ci.md tell newcomers to write do pass, laid out as they say."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from kvplan.usecases.check.evaluate import evaluate
from kvplan.usecases.check.spec import load_spec

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples" / "checks"


def toml_blocks(page: str) -> list[str]:
    return re.findall(r"```toml\n(.*?)```", (REPO / "docs" / page).read_text(encoding="utf-8"), re.S)


@pytest.fixture(autouse=True)
def _offline(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


def test_the_ci_guide_spec_passes_in_the_layout_it_shows(tmp_path):
    (spec_text,) = toml_blocks("ci.md")
    for folder, source in (("profiles", EXAMPLES / "profiles" / "qwen2-0.5b-l4.json"),
                           ("workloads", EXAMPLES / "workloads" / "chat.json")):
        (tmp_path / folder).mkdir()
        shutil.copy(source, tmp_path / folder / source.name)
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "serving.toml").write_text(spec_text)
    report = evaluate(load_spec(tmp_path / "checks" / "serving.toml"))
    assert report.passed, [(r.name, r.measured, r.hint) for r in report.failures]


def test_the_quickstart_spec_passes_from_the_repository(tmp_path):
    (spec_text,) = toml_blocks("quickstart.md")
    (tmp_path / "profiles").mkdir()
    shutil.copy(EXAMPLES / "profiles" / "qwen2-0.5b-l4.json", tmp_path / "profiles")
    (tmp_path / "examples").symlink_to(REPO / "examples")
    (tmp_path / "checks").mkdir()
    (tmp_path / "checks" / "serving.toml").write_text(spec_text)
    assert evaluate(load_spec(tmp_path / "checks" / "serving.toml")).passed


def test_the_check_md_spec_passes_beside_the_examples(tmp_path):
    shutil.copytree(EXAMPLES, tmp_path / "checks")
    (tmp_path / "checks" / "doc.toml").write_text(toml_blocks("check.md")[0])
    assert evaluate(load_spec(tmp_path / "checks" / "doc.toml")).passed
