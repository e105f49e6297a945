"""kvplan is installed from its repository (issue 24, item 11): the `kvplan` on PyPI is another
project, so no page, message or script tells anyone to `pip install kvplan` from an index, and
`kvplan version` says where the running kvplan was installed from."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from kvplan.cli.version import installed_from

REPO = Path(__file__).resolve().parents[2]
# `pip install kvplan`, `pip install 'kvplan[ray]'`, `pip install -U kvplan==0.1`: a name for an index to
# resolve; `"kvplan @ git+https://..."` and `-e '.[ray]'` name this repository and are fine
FROM_AN_INDEX = re.compile(r"pip3? install(?:\s+-{1,2}[\w-]+)*\s+['\"]?kvplan(?:\[[^\]]*\])?"
                           r"(?:[=<>~!]=?[\w.]+)?(?![\w\[/.@-])['\"]?(?!\s*@)")


def _texts() -> list[Path]:
    pages = [REPO / "README.md", REPO / "Makefile", *sorted((REPO / "docs").rglob("*.md")),
             *sorted((REPO / "scripts").glob("*")), *sorted((REPO / "kvplan").rglob("*.py"))]
    return [page for page in pages if page.is_file()]


@pytest.mark.parametrize("text", [
    "pip install kvplan", "pip install 'kvplan[ray]'", "pip install -U kvplan==0.1.2", "pip install\n  kvplan",
    'pip3 install "kvplan[profile]"',
])
def test_the_pattern_finds_an_install_from_an_index(text):
    assert FROM_AN_INDEX.search(" ".join(text.split()))


@pytest.mark.parametrize("text", [
    'pip install "kvplan @ git+https://github.com/YOUR-ORG/kvplan@REF"', "pip install -e '.[ray]'",
    "pip install ./tools/kvplan", "pip install kvplan-tools-other",
])
def test_the_pattern_leaves_installs_from_the_repository(text):
    assert not FROM_AN_INDEX.search(text)


def test_no_page_installs_kvplan_from_a_package_index():
    found = [f"{page.relative_to(REPO)}: {match.group(0)}" for page in _texts()
             for match in FROM_AN_INDEX.finditer(" ".join(page.read_text(errors="replace").split()))]
    assert found == []


def test_the_readme_says_how_to_install_from_the_repository():
    readme = (REPO / "README.md").read_text()
    assert "make setup" in readme and "pip install -e" in readme and "git+https://" in readme
    assert "PyPI is a different project" in " ".join(readme.split())


def test_version_says_where_kvplan_was_installed_from(tmp_path):
    checkout = tmp_path / "clone"
    package = checkout / "kvplan"
    package.mkdir(parents=True)
    editable = {"url": checkout.as_uri(), "dir_info": {"editable": True}}
    assert installed_from(package, (editable, package)) == {"how": "an editable checkout",
                                                            "location": str(checkout)}
    site = tmp_path / "site-packages" / "kvplan"
    site.mkdir(parents=True)
    git = {"url": "https://github.com/acme/kvplan", "vcs_info": {"vcs": "git", "commit_id": "abc123"}}
    assert installed_from(site, (git, site)) == {"how": "a git URL",
                                                 "location": "https://github.com/acme/kvplan@abc123"}
    assert installed_from(site, ({}, site))["how"].startswith("a package index, not this project's repository")
    assert installed_from(package, False)["how"] == "a source tree on the path (not installed)"
    # another tree ahead of the editable install on PYTHONPATH is what runs, and is said
    assert installed_from(site, (editable, package)) == {"how": "a source tree on the path",
                                                         "location": str(site.parent)}


def test_version_prints_it(kvplan):
    code, out, _ = kvplan("version")
    assert code == 0 and out.splitlines()[-1].startswith("installed from: ")
    code, out, _ = kvplan("version", "--json")
    origin = json.loads(out)["installed_from"]
    assert set(origin) == {"how", "location"} and origin["location"]
