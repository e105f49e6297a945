"""Every shell command of docs/*.md and README.md runs here, so that the docs cannot drift from
kvplan: the commands of fenced bash/sh/console blocks and the `run:` / `script:` steps of the CI
jobs in yaml blocks, page by page and in order, in a folder laid out as the page describes; then
the page's Python blocks. (`text` blocks are usage synopses, not commands.) What must not run
here is in SKIP, with the reason.

The numbers a page quotes are compared with what the command prints (issue 24, item 7: a page must
not show another release's figures): an output block (a fenced block without a language right after
a shell block, not a `kvplan ...` synopsis) is the output of that block's last command, and prose
between `<!-- numbers: COMMAND -->` and `<!-- /numbers -->` quotes COMMAND's output. Every number of
three digits or more, with a thousands separator or with a decimal point that the quote holds must
be among the output's numbers (thousands separators ignored); an output block's release versions too."""

from __future__ import annotations

import json
import re
import shlex
import shutil
from collections.abc import Iterator
from dataclasses import dataclass
from itertools import pairwise
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "examples"
PAGES = [*sorted((REPO / "docs").glob("*.md")), REPO / "README.md"]
SHELL = {"bash", "sh", "shell", "console"}

# command (as the page writes it, comment and repeated spaces dropped) -> why this test does not run it
SKIP = {
    "git clone <this repository> kvplan && cd kvplan":
        "clones kvplan: this suite runs in such a clone (`make test`, `.ci/run`)",
    "make run": "creates .venv and installs kvplan (minutes, network), then profiles as quickstart.md's "
                "profile commands (run here) do",
    "make test": "runs this very suite",
    "python3 -m venv .venv": "creates the environment this suite runs in",
    ".venv/bin/pip install -e '.[profile]'": "installs kvplan from the clone into .venv: what `make setup` does",
    ".venv/bin/pip install -e .": "installs kvplan from the clone into .venv: what `make setup` does",
    "pip install -e '.[profile]'": "installs kvplan from the clone into the reader's environment: what `make setup` "
                                   "does into .venv",
    'pip install "kvplan @ git+https://github.com/YOUR-ORG/kvplan@REF"':
        "a CI job's install from kvplan's repository: needs the network and the reader's URL",
    'pip install "kvplan[profile] @ git+https://github.com/YOUR-ORG/kvplan@REF"':
        "an install from kvplan's repository on the GPU machine: needs the network and the reader's URL",
    'git add profiles/qwen2-0.5b-l4.json && git commit -m "kvplan: refresh the L4 profile"':
        "commits to the reader's repository",
}

@dataclass(frozen=True)
class DocCommand:
    page: str
    line: int
    text: str

    @property
    def words(self) -> list[str]:
        return shlex.split(self.text)

    def __str__(self) -> str:
        return f"{self.page}:{self.line}: {self.text}"


def fenced(page: Path) -> Iterator[tuple[str, int, str]]:
    """(language, line of the block's first line, body) of every fenced block."""
    text = page.read_text(encoding="utf-8")
    for match in re.finditer(r"^```(\S*)\n(.*?)^```", text, re.S | re.M):
        yield match.group(1), text.count("\n", 0, match.start()) + 2, match.group(2)


def _shell_lines(body: str) -> Iterator[tuple[int, str]]:
    """(offset, command) per command: `$ ` prompts dropped, `\\` continuations joined."""
    pending, start = "", 0
    for offset, line in enumerate(body.splitlines()):
        if not pending:
            start = offset
        line = line.removeprefix("$ ")
        if line.endswith("\\"):
            pending += line[:-1]
            continue
        yield start, pending + line
        pending = ""


def _ci_steps(body: str) -> Iterator[tuple[int, str]]:
    """The `- run: CMD` steps (GitHub Actions) and the items of `script:` (GitLab CI)."""
    script_indent: int | None = None
    for offset, line in enumerate(body.splitlines()):
        indent = len(line) - len(line.lstrip())
        if script_indent is not None and line.strip() and indent <= script_indent:
            script_indent = None
        if run := re.match(r"\s*- run:\s*(.+)", line):
            yield offset, run.group(1)
        elif re.match(r"\s*script:\s*$", line):
            script_indent = indent
        elif script_indent is not None and (item := re.match(r"\s*- (.+)", line)):
            yield offset, item.group(1)


def doc_commands(page: Path) -> list[DocCommand]:
    found = []
    for language, first, body in fenced(page):
        lines = _shell_lines(body) if language in SHELL else _ci_steps(body) if language == "yaml" else ()
        for offset, line in lines:
            command = " ".join(re.sub(r"(^|\s)#\s.*$", "", line).split())
            if command:
                found.append(DocCommand(str(page.relative_to(REPO)), first + offset, command))
    return found


ALL = [command for page in PAGES for command in doc_commands(page)]
RUN_PAGES = sorted({command.page for command in ALL if command.text not in SKIP}
                   | {str(page.relative_to(REPO)) for page in PAGES
                      if any(language == "python" for language, _, _ in fenced(page))})


def _lay_out(page: str, root: Path) -> None:
    """The folder a page's commands run in: a clone's root (its `examples/`), plus what the page
    tells the reader to have or to write."""
    (root / "examples").symlink_to(EXAMPLES)
    blocks = list(fenced(REPO / page))
    if page == "docs/ci.md":        # the layout its first block draws
        for folder, source in (("profiles", EXAMPLES / "checks" / "profiles" / "qwen2-0.5b-l4.json"),
                               ("workloads", EXAMPLES / "checks" / "workloads" / "chat.json")):
            (root / folder).mkdir()
            shutil.copy(source, root / folder / source.name)
        (spec,) = [body for language, _, body in blocks if language == "toml"]
        (root / "checks").mkdir()
        (root / "checks" / "serving.toml").write_text(spec)
    elif page == "docs/quickstart.md":    # the spec it shows, named on its first line
        (spec,) = [body for language, _, body in blocks if language == "toml"]
        assert spec.startswith("# checks/serving.toml\n")
        (root / "checks").mkdir()
        (root / "checks" / "serving.toml").write_text(spec)
    elif page == "docs/replay.md":        # "trace.json is the trace under Trace format"
        trace = next(body for language, _, body in blocks if language == "json")
        (root / "trace.json").write_text(trace)
    elif page == "docs/workload.md":      # W.json stands for any workload: a short one of the examples
        workload = json.loads((EXAMPLES / "workloads" / "chat-shared-prompt.json").read_text())
        workload["arrival"]["count"] = 40
        (root / "W.json").write_text(json.dumps(workload))


NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?(?!\d)|\d+(?:\.\d+)*")     # 1,703,936 | 0.92 | 0.34.0
VERSION = re.compile(r"\d+\.\d+\.\d+")
NUMBERS_FROM = re.compile(r"<!-- numbers: (.+?) -->\n(.*?)<!-- /numbers -->", re.S)


def numbers(text: str) -> set[str]:
    """The numbers of a text as written, thousands separators dropped ("26,624" and "26624" are one)."""
    return {match.group(0).replace(",", "") for match in NUMBER.finditer(text)}


def quoted(text: str, *, versions: bool) -> set[str]:
    """The numbers a quote must share with the output: three digits or more, or written with a
    separator or a decimal point (a count of layers or a list item's number is no figure); release
    versions only when `versions` (prose may name other releases, an output block may not)."""
    found = set()
    # link targets, page names and section numbers are no figures
    text = re.sub(r"\]\([^)]*\)|[\w./-]+\.md\b|§\d+(\.\d+)*", "", text)
    for match in NUMBER.finditer(text):
        number = match.group(0)
        if VERSION.fullmatch(number) and not versions:
            continue
        if len(number.replace(",", "").replace(".", "")) >= 3 or "," in number or "." in number:
            found.add(number.replace(",", ""))
    return found


def number_quotes(page: str) -> list[tuple[str, int, str, bool]]:
    """(command, line, quoted text, whether it is an output block) of every quote of a page."""
    text = (REPO / page).read_text(encoding="utf-8")
    quotes = []
    blocks = list(re.finditer(r"^```(\S*)\n(.*?)^```", text, re.S | re.M))
    for before, block in pairwise(blocks):
        between = text[before.end():block.start()]
        if before.group(1) in SHELL and block.group(1) == "" and not between.strip() \
                and not block.group(2).startswith("kvplan "):
            commands = [command for _, command in _shell_lines(before.group(2)) if command.strip()]
            command = " ".join(re.sub(r"(^|\s)#\s.*$", "", commands[-1]).split())
            quotes.append((command, text.count("\n", 0, block.start()) + 2, block.group(2), True))
    for match in NUMBERS_FROM.finditer(text):
        quotes.append((match.group(1).strip(), text.count("\n", 0, match.start()) + 1, match.group(2), False))
    return quotes


def check_quotes(page: str, outputs: dict[str, str], run) -> None:
    """Each quote of `page` against the output of its command (`outputs`: what the page's commands
    printed; a marker's command the page does not run is run here)."""
    for command, line, text, is_block in number_quotes(page):
        if command not in outputs:
            code, out, err = run(*shlex.split(command)[1:])
            assert code == 0, f"{page}:{line}: {command}: exit {code}\n{err}"
            outputs[command] = out + err
        missing = sorted(quoted(text, versions=is_block) - numbers(outputs[command]))
        assert not missing, (f"{page}:{line}: quotes {', '.join(missing)}, which `{command}` does not print "
                             f"(under kvplan's default release); its output:\n{outputs[command]}")


def _jq(program: str, output: str) -> None:
    """`| jq .key` on JSON Lines: every line is JSON, and the records carry the key."""
    assert re.fullmatch(r"\.\w+", program), f"teach this test jq {program}"
    values = [json.loads(line).get(program[1:]) for line in output.splitlines()]
    assert values and any(value is not None for value in values)


@pytest.fixture(autouse=True)
def _environment(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.delenv("GITHUB_STEP_SUMMARY", raising=False)


@pytest.mark.parametrize("page", RUN_PAGES)
def test_the_commands_of_a_page_run_as_written(page, tmp_path, monkeypatch, kvplan, capsys):
    _lay_out(page, tmp_path)
    monkeypatch.chdir(tmp_path)
    outputs: dict[str, str] = {}
    for command in (command for command in ALL if command.page == page and command.text not in SKIP):
        words = command.words
        assert not {"&&", ";", ">", "<", "||"} & set(words), f"teach this test to run {command}"
        cuts = [index for index, word in enumerate(words) if word == "|"]
        first, *piped = (words[start + 1:end] for start, end in zip([-1, *cuts], [*cuts, len(words)], strict=True))
        assert first[0] == "kvplan", f"{command}: not a kvplan command; run it here or add it to SKIP with why"
        code, out, err = kvplan(*first[1:])
        assert code == 0, f"{command}: exit {code}\n{err}"
        outputs[command.text] = out + err
        for tool, *args in piped:
            assert tool == "jq", f"teach this test to pipe into {tool}"
            _jq(*args, out)
    for language, line, body in fenced(REPO / page):
        if language == "python":
            exec(compile(body, f"{page}:{line}", "exec"), {})
            assert capsys.readouterr().out, f"{page}:{line}: the snippet printed nothing"
    check_quotes(page, outputs, kvplan)
    if page == "docs/ci.md":
        # the refresh command saved profiles/qwen2-0.5b-l4.json again: the page's check takes it
        code, _, err = kvplan("check", "checks/serving.toml")
        assert code == 0, f"docs/ci.md: the check refuses the refreshed profile: exit {code}\n{err}"


def test_a_quote_is_checked_number_by_number():
    output = "GPU KV cache size: 1,703,936 tokens, Maximum concurrency for 32,768 tokens per request: 52.00x (0.34.0)"
    assert quoted("1703936 tokens, 52.00x at 32,768 per request on 24 layers", versions=False) <= numbers(output)
    assert quoted("as 0.17.1 logs it ([changes](docs/vllm/changes-0.34.md) §1.4)", versions=False) == set()
    assert quoted("vLLM 0.17.1: 99,897 blocks", versions=True) - numbers(output) == {"0.17.1", "99897"}
    assert numbers("(26624, 64, 2, 2, 64) --tp 1,2") == {"26624", "64", "2", "1"}


def test_every_page_that_quotes_numbers_runs_here():
    for page in PAGES:
        name = str(page.relative_to(REPO))
        if number_quotes(name):
            assert name in RUN_PAGES, name


def test_every_skipped_command_is_still_in_the_docs():
    assert set(SKIP) <= {command.text for command in ALL}


def test_the_docs_install_kvplan_from_its_repository():
    """No package registry serves kvplan: every pip install names a path or a git URL."""
    installs = [command for command in ALL if re.search(r"(^|/)pip$", command.words[0])]
    assert installs
    for command in installs:
        targets = [word for word in command.words[2:] if not word.startswith("-")]
        assert targets and all(re.match(r"(\.|/|\S+ @ git\+https://)", target) for target in targets), command
