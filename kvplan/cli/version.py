from __future__ import annotations

import typer

from kvplan import __version__
from kvplan.cli.root import app
from kvplan.report.jsonout import emit_json
from kvplan.semantics.releases import RELEASES, default_release, default_release_reason, installed_vllm_version

VERSION_SCHEMA_VERSION = 1


@app.command()
def version(json_output: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Print kvplan's version, the vLLM releases it reproduces and the one it follows by default."""
    if json_output:
        emit_json({
            "schema_version": VERSION_SCHEMA_VERSION, "kvplan": __version__,
            "vllm_semantics": default_release().version, "supported_vllm_versions": list(RELEASES),
            "installed_vllm": installed_vllm_version(), "default_reason": default_release_reason(),
        })
        return
    print(version_line())
    print(f"reproduces vLLM {', '.join(RELEASES)}; --vllm-version chooses one")
    print(f"default {default_release().version}: {default_release_reason()}")


def version_line() -> str:
    return f"kvplan {__version__} (vLLM {default_release().version} semantics)"
