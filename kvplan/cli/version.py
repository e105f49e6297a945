from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote, urlparse

import kvplan
from kvplan import __version__
from kvplan.cli.root import JSON, app
from kvplan.report.jsonout import emit_json
from kvplan.semantics.releases import RELEASES
from kvplan.sources.installed import default_release, default_release_reason, installed_vllm_version

VERSION_SCHEMA_VERSION = 1


@app.command()
def version(json_output: bool = JSON) -> None:
    """Print kvplan's version, the vLLM releases it reproduces and the one it follows by default."""
    if json_output:
        emit_json({
            "schema_version": VERSION_SCHEMA_VERSION, "kvplan": __version__,
            "vllm_semantics": default_release().version, "supported_vllm_versions": list(RELEASES),
            "installed_vllm": installed_vllm_version(), "default_reason": default_release_reason(),
            "installed_from": installed_from(),
        })
        return
    print(version_line())
    print(f"reproduces vLLM {', '.join(RELEASES)}; --vllm-version chooses one")
    print(f"default {default_release().version}: {default_release_reason()}")
    origin = installed_from()
    print(f"installed from: {origin['how']} {origin['location']}")


def _file_path(url: str) -> str:
    parsed = urlparse(url)
    return unquote(parsed.path) if parsed.scheme == "file" else url


def _installed() -> tuple[dict[str, Any], Path] | None:
    """pip's record of how kvplan was installed (PEP 610's direct_url.json, {} when none: a package
    index) and where its package lies; None when kvplan is not installed."""
    import importlib.metadata

    try:
        distribution = importlib.metadata.distribution("kvplan")
    except importlib.metadata.PackageNotFoundError:
        return None
    text = distribution.read_text("direct_url.json")
    return (json.loads(text) if text else {}), Path(str(distribution.locate_file("kvplan"))).resolve()


def installed_from(running: Path | None = None,
                   installed: tuple[dict[str, Any], Path] | bool | None = True) -> dict[str, str]:
    """Where the running kvplan comes from: an editable checkout, a git URL, a local directory or
    archive, as pip recorded it; a package index is not where kvplan is published (the `kvplan` on
    PyPI is another project). `running` and `installed` stand in for the running package and
    pip's record (tests)."""
    running = (running or Path(kvplan.__file__).parent).resolve()
    found = _installed() if installed is True else installed
    if not found:
        return {"how": "a source tree on the path (not installed)", "location": str(running.parent)}
    record, installed_at = found
    url = str(record.get("url", ""))
    if record.get("dir_info", {}).get("editable"):
        checkout = Path(_file_path(url)).resolve()
        if running.is_relative_to(checkout):
            return {"how": "an editable checkout", "location": str(checkout)}
        # PYTHONPATH puts another tree ahead of the editable install
        return {"how": "a source tree on the path", "location": str(running.parent)}
    if running != installed_at:
        return {"how": "a source tree on the path", "location": str(running.parent)}
    if "vcs_info" in record:
        vcs = record["vcs_info"]
        return {"how": f"a {vcs.get('vcs', 'git')} URL", "location": f"{url}@{vcs.get('commit_id', '?')}"}
    if "dir_info" in record:
        return {"how": "a local directory", "location": f"{_file_path(url)} (copied into {running.parent})"}
    if "archive_info" in record:
        return {"how": "an archive", "location": url}
    return {"how": "a package index, not this project's repository (the kvplan on PyPI is another project)",
            "location": str(running.parent)}


def version_line() -> str:
    return f"kvplan {__version__} (vLLM {default_release().version} semantics)"
