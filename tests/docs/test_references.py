"""The repository is its own source of truth: what code and pages cite is in it.

- every document a module, test, script or page cites (`docs/vllm/kv-semantics.md`, a page's
  `[text](changes-0.33.md)`, a bare `replay-hybrid.md`) is a file of the repository, and every section
  it cites (`§2.2`, `§1.2–§1.4`) is a numbered heading of that document;
- nothing names the notes kept beside a checkout (`vllm-kv-semantics.md`, `trace-replay.md`,
  `/work/shared/...`), which users and CI do not have;
- the pages name only modules and files of `kvplan/` that exist (`cli/app.py` did not), and a
  package's docstring only modules it holds;
- no module docstring names one release as the only one kvplan follows ("0.17.1 only", "exact to vLLM
  0.17.1"), and the pages that list the releases list every release of the table."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from functools import cache
from pathlib import Path

import pytest

from kvplan.semantics.releases import RELEASES

REPO = Path(__file__).resolve().parents[2]
PACKAGE = REPO / "kvplan"
CODE_DIRS = ("kvplan", "tests", "scripts", "benchmarks", "tools")
SKIPPED_PARTS = {".venv", "__pycache__", ".git", "node_modules"}
# files whose provenance notes describe where upstream data came from, not documents of this repository
FOREIGN_REFERENCES = {"kvplan/data/gpus/SOURCES.md", "kvplan/data/gpus/gpus.csv", "kvplan/data/models/SOURCES.md"}
# the golden records and their provenance (tests/data/README.md) are the golden tools' to describe
GOLDEN_DATA = "tests/data/"
THIS = "tests/docs/test_references.py"

SECTION = r"§\s?\d+(?:\.\d+)*"
SECTIONS = rf"{SECTION}(?:\s*(?:,|and|or|to|–|-)\s*(?:{SECTION}|\d+(?:\.\d+)+))*"
DOC_PATH = r"(?<![\w/.-])(?:\.\.?/)*(?:docs/[\w./-]+\.md|[\w.-]+\.md)(?![\w/])"
MD_LINK = r"\]\((?P<link>[^)#\s]+\.md)(?:#[^)]*)?\)"
CITATION = re.compile(rf"(?:(?P<path>{DOC_PATH})|{MD_LINK})`?(?P<sections>\s*{SECTIONS})?")
LONE_SECTIONS = re.compile(SECTIONS)
HEADING = re.compile(r"^#{1,6}\s+(?P<number>\d+(?:\.\d+)*)[.\s]", re.MULTILINE)

# the notes kept beside the checkout, and the folders they live in
OUTSIDE = re.compile(r"vllm-kv-semantics\.md|vllm-0\.3\d-changes\.md|trace-replay[\w.-]*\.md|profiling-notes"
                     r"|users-and-peers|/work/shared|\.\./shared|\.\./peers|shared/docs")

VERSION = r"\d+\.\d+\.\d+"
ONLY_RELEASE = re.compile(rf"\b{VERSION}\s+only\b|\bonly\s+(?:vLLM\s+)?{VERSION}\b(?!['’]s)"
                          rf"|\bexact(?:ly)?\s+(?:to|as|like)\s+vLLM\s+{VERSION}\b(?!\s*(?:,|and|or)\s*\d)",
                          re.IGNORECASE)
CHOICES = re.compile(rf"{VERSION}(?:\|{VERSION})+")
# the page that lists the releases (README.md and docs/architecture.md point at it instead of listing them)
PAGES_LISTING_RELEASES = ("docs/versions.md",)
# `kvplan.semantics.releases`, `usecases.plan`, `semantics/engine/groups.py`, `cli/` as the pages write them
TOP_PACKAGES = sorted(p.name for p in PACKAGE.iterdir() if p.is_dir() and (p / "__init__.py").is_file())
MODULE_NAME = re.compile(rf"`(?:kvplan\.)?(?P<name>(?:{'|'.join(TOP_PACKAGES)})(?:\.\w+)+)`")
MODULE_PATH = re.compile(rf"`(?:kvplan/)?(?P<path>(?:{'|'.join(TOP_PACKAGES)})(?:/\w+)*(?:/|\.py))`")
REPO_PATH = re.compile(r"(?<![\w/.-])(?P<path>(?:kvplan|tests|scripts|benchmarks|docs|examples)/[\w./*{}<>-]*[\w*}>])")


def _files(*patterns: str, under: tuple[str, ...] = ("",)) -> list[Path]:
    found = set()
    for folder in under:
        root = REPO / folder
        if root.is_dir():
            for pattern in patterns:
                found.update(p for p in root.rglob(pattern) if not SKIPPED_PARTS & set(p.parts))
    return sorted(found)


CODE = _files("*.py", under=CODE_DIRS)
PAGES = [REPO / "README.md", *_files("*.md", under=("docs",))]
TEXTS = [*CODE, *PAGES, *_files("*.md", "*.toml", "*.cfg", "*.csv", "*.json", "*.txt", "*.sh",
                                under=("kvplan", "tests", "docs", "examples", "scripts", "tools")),
         REPO / "pyproject.toml", REPO / "Makefile"]


def rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


@cache
def markdown_files() -> dict[str, list[Path]]:
    names: dict[str, list[Path]] = {}
    for path in _files("*.md"):
        names.setdefault(path.name, []).append(path)
    return names


@cache
def headings(path: Path) -> frozenset[str]:
    text = re.sub(r"^```.*?^```", "", path.read_text(encoding="utf-8"), flags=re.MULTILINE | re.DOTALL)
    return frozenset(match.group("number") for match in HEADING.finditer(text))


def resolve(cited: str, source: Path) -> list[Path]:
    """The files a citation may name: relative to the repository or to the citing file, or, for a bare
    name, every document of that name."""
    for base in (REPO, source.parent):
        if (base / cited).is_file():
            return [(base / cited).resolve()]
    return markdown_files().get(cited, []) if "/" not in cited else []


def section_numbers(text: str) -> list[str]:
    return re.findall(r"\d+(?:\.\d+)*", text)


def prose(path: Path) -> list[tuple[int, str]]:
    """(first line, text) of what may cite in a file: a page whole; of code its comments and its string
    literals (docstrings, help texts)."""
    text = path.read_text(encoding="utf-8")
    if path.suffix != ".py":
        return [(1, text)]
    pieces = [(token.start[0], token.string) for token in tokenize.generate_tokens(io.StringIO(text).readline)
              if token.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            pieces.append((node.lineno, node.value))
    return pieces


def citations(path: Path) -> list[tuple[int, str, list[Path], list[str]]]:
    """(line, cited text, the documents it may name, the sections cited) for every citation in a file."""
    found = []
    for first, text in prose(path):
        found.extend(_citations_in(path, first, text))
    return found


def _citations_in(path: Path, first: int, text: str) -> list[tuple[int, str, list[Path], list[str]]]:
    found = []
    covered: set[int] = set()
    for match in CITATION.finditer(text):
        cited = match.group("path") or match.group("link")
        if "://" in cited or (path.suffix == ".py" and "/" not in cited and not match.group("sections")
                              and not re.search(r"\s", text)):
            continue        # a bare file name alone in a string literal: a file the code writes or reads
        line = first + text.count("\n", 0, match.start())
        sections = section_numbers(match.group("sections") or "")
        found.append((line, cited, resolve(cited, path), sections))
        if match.group("sections"):
            covered.update(range(match.start("sections"), match.end("sections")))
    if path.suffix == ".md":
        # a section cited without a document is one of the page's own
        for match in LONE_SECTIONS.finditer(text):
            if match.start() not in covered:
                line = first + text.count("\n", 0, match.start())
                found.append((line, path.name, [path], section_numbers(match.group())))
    return found


def test_the_citation_patterns_read_what_the_code_writes():
    sample = REPO / "kvplan" / "x.py"
    text = "(docs/vllm/kv-semantics.md §2.1, §2.2 and §2.5; docs/vllm/changes-0.33.md §1.2–§1.4)"
    found = [(cited, sections) for cited, sections in
             ((m.group("path"), section_numbers(m.group("sections") or "")) for m in CITATION.finditer(text))]
    assert found == [("docs/vllm/kv-semantics.md", ["2.1", "2.2", "2.5"]),
                     ("docs/vllm/changes-0.33.md", ["1.2", "1.4"])]
    assert resolve("docs/vllm/kv-semantics.md", sample) == [REPO / "docs" / "vllm" / "kv-semantics.md"]
    assert resolve("trace-replay.md", sample) == []
    assert [m.group("path") for m in CITATION.finditer("see ../../docs/trace-replay-hybrid.md")] == \
        ["../../docs/trace-replay-hybrid.md"]
    assert resolve("../../docs/trace-replay-hybrid.md", REPO / "tools" / "goldens" / "x" / "replay.py") == []
    assert "2.2" in headings(REPO / "docs" / "vllm" / "kv-semantics.md")
    assert ONLY_RELEASE.search("exact to vLLM 0.17.1") and ONLY_RELEASE.search("for 0.17.1 only")
    assert not ONLY_RELEASE.search("exact to vLLM 0.17.1 and 0.33.0")
    assert not ONLY_RELEASE.search("a mode of vLLM 0.17.1's")


@pytest.mark.parametrize("path", [*CODE, *PAGES], ids=rel)
def test_every_cited_document_and_section_is_in_the_repository(path: Path):
    if rel(path) in FOREIGN_REFERENCES or rel(path) == THIS:
        return
    problems = []
    for line, cited, targets, sections in citations(path):
        if not targets:
            problems.append(f"line {line}: {cited} is not a file of the repository")
            continue
        missing = [s for s in sections if not any(s in headings(target) for target in targets)]
        if missing:
            problems.append(f"line {line}: {cited} has no section {', '.join('§' + s for s in missing)}")
    assert not problems, (f"{rel(path)} cites what the repository does not hold (cite docs/vllm/*.md or "
                          "docs/*.md and one of their numbered headings): " + "; ".join(problems))


@pytest.mark.parametrize("path", TEXTS, ids=rel)
def test_nothing_cites_the_notes_beside_the_checkout(path: Path):
    if rel(path) in FOREIGN_REFERENCES or rel(path) == THIS or rel(path).startswith(GOLDEN_DATA):
        return
    lines = [f"line {number}: {match.group()}" for number, text in
             enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
             if (match := OUTSIDE.search(text))]
    assert not lines, (f"{rel(path)} refers to notes users and CI do not have; cite the repository's document "
                       "instead (docs/vllm/kv-semantics.md, changes-0.33.md, changes-0.34.md, replay-*.md, "
                       "docs/prediction.md): " + "; ".join(lines))


def _module_exists(name: str) -> bool:
    """`semantics.engine.groups`, `usecases.plan.distinct_weights_warnings`: a module or package of
    kvplan, or a name defined at the top of one."""
    parts = name.split(".")
    for end in range(len(parts), 0, -1):
        base = PACKAGE.joinpath(*parts[:end])
        module = base.with_suffix(".py") if base.with_suffix(".py").is_file() else base / "__init__.py"
        if module.is_file():
            rest = parts[end:]
            return not rest or rest[0] in _top_level_names(module)
    return False


@cache
def _top_level_names(module: Path) -> frozenset[str]:
    names = set()
    for node in ast.parse(module.read_text(encoding="utf-8")).body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign | ast.AnnAssign):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            names.update(t.id for t in targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.ImportFrom | ast.Import):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return frozenset(names)


@pytest.mark.parametrize("path", PAGES, ids=rel)
def test_the_pages_name_only_modules_and_files_that_exist(path: Path):
    text = path.read_text(encoding="utf-8")
    problems = [f"`{m.group('name')}`" for m in MODULE_NAME.finditer(text) if not _module_exists(m.group("name"))]
    for match in MODULE_PATH.finditer(text):
        module = PACKAGE / match.group("path")
        if not (module.is_dir() if match.group("path").endswith("/") else module.is_file()):
            problems.append(f"`{match.group('path')}` (no kvplan/{match.group('path')})")
    for match in REPO_PATH.finditer(text):
        cited = match.group("path")
        if not (REPO / cited).exists() and not re.search(r"[*{}<>]|NAME", cited):
            problems.append(f"{cited} (not in the repository)")
    assert not problems, f"{rel(path)} names what does not exist: " + ", ".join(problems)


def _module_docstrings() -> list[tuple[Path, str]]:
    found = []
    for path in _files("*.py", under=("kvplan",)):
        docstring = ast.get_docstring(ast.parse(path.read_text(encoding="utf-8")))
        if docstring:
            found.append((path, docstring))
    return found


def test_no_module_docstring_names_one_release_as_the_only_one():
    problems = [f"{rel(path)}: {match.group()!r}" for path, docstring in _module_docstrings()
                if (match := ONLY_RELEASE.search(" ".join(docstring.split())))]
    description = re.search(r'^description\s*=\s*"(.*)"', (REPO / "pyproject.toml").read_text(), re.MULTILINE)
    assert description
    if match := ONLY_RELEASE.search(description.group(1)):
        problems.append(f"pyproject.toml description: {match.group()!r}")
    assert not problems, ("kvplan reproduces every release of its table (kvplan/semantics/releases.py); say what "
                          "differs per release instead: " + "; ".join(problems))


@pytest.mark.parametrize("page", PAGES_LISTING_RELEASES)
def test_the_pages_that_list_the_releases_list_every_release(page: str):
    text = (REPO / page).read_text(encoding="utf-8")
    missing = [version for version in RELEASES if version not in text]
    assert not missing, f"{page} does not name release {', '.join(missing)} of the release table"


@pytest.mark.parametrize("path", [*PAGES, *CODE], ids=rel)
def test_a_list_of_release_choices_is_the_release_table(path: Path):
    if rel(path) == THIS:
        return
    text = path.read_text(encoding="utf-8")
    wrong = [m.group() for m in CHOICES.finditer(text) if set(m.group().split("|")) != set(RELEASES)]
    assert not wrong, (f"{rel(path)} offers {', '.join(wrong)} where the release table has "
                       f"{'|'.join(RELEASES)}")


@pytest.mark.parametrize("package", sorted(PACKAGE.rglob("__init__.py")), ids=rel)
def test_a_package_docstring_lists_only_its_own_modules(package: Path):
    docstring = ast.get_docstring(ast.parse(package.read_text(encoding="utf-8"))) or ""
    missing = [name for name in re.findall(r"(?<![\w/.])(\w+)\.py\b", docstring)
               if not (package.parent / f"{name}.py").is_file()]
    assert not missing, f"{rel(package)} describes modules it does not hold: {', '.join(missing)}"


# a module path as the code writes it without the `kvplan/` prefix: `cli/fit.py`, semantics/engine/groups.py
BARE_MODULE_PATH = re.compile(rf"(?<![\w/.-])(?P<path>(?:{'|'.join(TOP_PACKAGES)})(?:/\w+)*\.py)\b")


def _comments_and_docstrings(source: str) -> list[tuple[int, str]]:
    """The comments and the docstrings (module, class, function) of a module, with their first line."""
    found = [(token.start[0], token.string) for token in tokenize.generate_tokens(io.StringIO(source).readline)
             if token.type == tokenize.COMMENT]
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            docstring = ast.get_docstring(node, clean=False)
            if docstring and node.body:
                found.append((node.body[0].lineno, docstring))
    return found


def missing_paths(text: str) -> list[str]:
    """The repository paths and kvplan module paths a comment or docstring names that do not exist."""
    problems = [match.group("path") for match in REPO_PATH.finditer(text)
                if not (REPO / match.group("path")).exists() and not re.search(r"[*{}<>]|NAME", match.group("path"))]
    for pattern in (MODULE_PATH, BARE_MODULE_PATH):
        for match in pattern.finditer(text):
            module = PACKAGE / match.group("path")
            if not (module.is_dir() if match.group("path").endswith("/") else module.is_file()):
                problems.append(match.group("path"))
    return sorted(set(problems))


def test_the_path_patterns_read_what_the_code_writes():
    assert missing_paths("the typer application (cli/app.py)") == ["cli/app.py"]
    assert missing_paths("see `kvplan/cli/app.py` and docs/nowhere.md") == \
        ["cli/app.py", "docs/nowhere.md", "kvplan/cli/app.py"]
    assert missing_paths("kvplan/cli/fit.py, `semantics/engine/groups.py`, usecases/plan.py, docs/cli.md") == []


@pytest.mark.parametrize("path", _files("*.py", under=("kvplan",)), ids=rel)
def test_module_comments_and_docstrings_name_only_paths_that_exist(path: Path):
    problems = [f"line {line}: {cited}" for line, text in _comments_and_docstrings(path.read_text(encoding="utf-8"))
                for cited in missing_paths(text)]
    assert not problems, f"{rel(path)} names files that are not in the repository: " + "; ".join(problems)
