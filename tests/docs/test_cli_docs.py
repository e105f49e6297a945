"""docs/cli.md and the assertion table of docs/check.md are generated; they must be up to date."""

from __future__ import annotations

import importlib.util
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def generator():
    spec = importlib.util.spec_from_file_location("gen_cli_docs", REPO / "scripts" / "gen_cli_docs.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_generated_docs_are_up_to_date():
    stale = [str(path.relative_to(REPO)) for path, text in generator().expected_files().items()
             if path.read_text(encoding="utf-8") != text]
    assert not stale, f"out of date: {stale}; run `.venv/bin/python scripts/gen_cli_docs.py`"


def test_cli_reference_covers_every_command_and_option():
    from typer.main import get_command

    from kvplan.cli import app

    text = (REPO / "docs" / "cli.md").read_text(encoding="utf-8")
    root = get_command(app)
    for name, command in root.commands.items():
        assert f"## kvplan {name}\n" in text
        for param in command.params:
            if getattr(param, "hidden", False):
                continue  # the old spellings, kept working but not documented
            for opt in getattr(param, "opts", []):
                if opt.startswith("--"):
                    assert f"{opt}" in text, f"{name}: {opt}"


def test_check_md_lists_every_assertion_key_and_flag():
    from kvplan.usecases.check.assertions import KINDS

    text = (REPO / "docs" / "check.md").read_text(encoding="utf-8")
    for kind in KINDS.values():
        assert f"| `{kind.key}` | `{kind.flag}` |" in text
