"""Nothing in the repository refers to a file outside it (issue 19: a clone is self-sufficient).

The rule, for every tracked text file under kvplan/, tests/, docs/, scripts/, tools/, benchmarks/,
examples/, .ci/ and the top-level Makefile, README.md and pyproject.toml:

1. No absolute path into a machine's workspace or home directory: `/work/`, `/home/`, `/root/`,
   `/Users/`, `/mnt/`.
2. No name of the project's folders beside the checkout: `golden-work`, `peers/` (the peer
   harnesses), and `shared/` followed by one of that folder's entries (docs, peers, traces, sizing,
   bench, model-configs, gpu-catalog, hooks).
3. No relative path that starts with `../` and, resolved from the file's own folder, leaves the
   repository (the notes folder beside the checkout, seen from docs/ or tests/data/). A relative path
   that stays inside may name a file the reader makes (`../profiles/l4.json` in a command example).

Exempt: the two checkers (this file and tests/docs/test_references.py, whose patterns spell them);
URLs (`scheme://...`, removed from the text before the checks), which is how provenance
names an upstream public source (a repository at a commit is written `owner/repo@commit`, which
none of the checks matches); and the golden records themselves (`tests/data/**/*.json` and
`*.jsonl`), which are kept byte for byte as vLLM's harnesses wrote them, prose fields included:
their provenance is tests/data/README.md, which the rule covers.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
FOLDERS = ("kvplan", "tests", "docs", "scripts", "tools", "benchmarks", "examples", ".ci")
TOP_FILES = ("Makefile", "README.md", "pyproject.toml")
URL = re.compile(r"[a-z][a-z0-9+.-]*://\S+")
OUTSIDE = re.compile(
    r"/work/|/home/|/root/|/Users/|/mnt/|golden-work|(?<![\w.-])peers/"
    r"|(?<![\w.-])shared/(?:docs|peers|traces|sizing|bench|model-configs|gpu-catalog|hooks)\b")
# Checkers whose patterns spell the forbidden paths: this file and the documents-reference test.
CHECKERS = {Path(__file__).resolve(), ROOT / "tests" / "docs" / "test_references.py"}
RELATIVE = re.compile(r"(?<![\w.])((?:\.\./)+)([\w.-]+(?:/[\w.-]+)*)")


def tracked_files() -> list[Path]:
    try:
        out = subprocess.run(["git", "ls-files", "-z", "--", *FOLDERS, *TOP_FILES], cwd=ROOT,
                             capture_output=True, check=True).stdout.decode()
        return [ROOT / name for name in out.split("\0") if name]
    except (OSError, subprocess.CalledProcessError):  # not a git checkout: every file in scope
        found = [p for folder in FOLDERS for p in (ROOT / folder).rglob("*") if p.is_file()]
        return found + [ROOT / name for name in TOP_FILES if (ROOT / name).is_file()]


def golden_record(path: Path) -> bool:
    rel = path.relative_to(ROOT)
    return rel.parts[:2] == ("tests", "data") and path.suffix in (".json", ".jsonl")


def text_of(path: Path) -> str | None:
    data = path.read_bytes()
    if b"\0" in data:
        return None
    try:
        return data.decode()
    except UnicodeDecodeError:
        return None


def violations(path: Path, text: str) -> list[str]:
    found = []
    for lineno, line in enumerate(text.splitlines(), 1):
        line = URL.sub("", line)
        found += [f"{lineno}: {m.group(0)!r}" for m in OUTSIDE.finditer(line)]
        for m in RELATIVE.finditer(line):
            target = (path.parent / (m.group(1) + m.group(2))).resolve()
            if not target.is_relative_to(ROOT):
                found.append(f"{lineno}: {m.group(0)!r} (resolves to {target}, outside the repository)")
    return found


def test_no_tracked_file_refers_outside_the_repository():
    bad = {}
    for path in tracked_files():
        if path in CHECKERS or golden_record(path) or not path.is_file():
            continue
        text = text_of(path)
        if text is not None and (found := violations(path, text)):
            bad[str(path.relative_to(ROOT))] = found
    assert not bad, "references outside the repository:\n" + "\n".join(
        f"{name}:{hit}" for name, hits in sorted(bad.items()) for hit in hits)


@pytest.mark.parametrize(("text", "flagged"), [
    ("made by /work/golden-work/hybrid33/replay_hybrid33.py", True),
    ("see ../" + "shared/" + "docs/", True),  # split: tests/docs/test_references.py reads this file
    ("the harness peers/vllm-0.33.0/replay33.py", True),
    ("copied from shared/traces/public-501.json", True),
    ("cited as ai-dynamo/aiconfigurator@64c5ddb697dd8ad88a938f65b23d25cf5f45de12", False),
    ("https://github.com/vllm-project/vllm/blob/v0.17.1/vllm/v1/core/kv_cache_utils.py", False),
    ("the project's peer harnesses, copied into tools/goldens/", False),
    ("a shared/ prefix and kv_cache_tensor_shared_by", False),
])
def test_the_rule_flags_outside_paths_and_spares_upstream_provenance(text: str, flagged: bool):
    assert bool(violations(ROOT / "tests" / "x.md", text)) is flagged


def test_relative_paths_must_stay_inside_the_repository():
    here = ROOT / "tests" / "data" / "README.md"
    assert violations(here, "see ../../tools/goldens/regen.py") == []
    assert violations(here, "see ../../../elsewhere/traces") != []
    assert violations(ROOT / "README.md", "see ../kvplan-data/x.json") != []


def test_kvplan_never_imports_the_golden_tools():
    pattern = re.compile(r"^\s*(?:from|import)\s+tools\b", re.M)
    assert [p for p in (ROOT / "kvplan").rglob("*.py") if pattern.search(p.read_text())] == []
