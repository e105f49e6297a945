from __future__ import annotations

import typer

from kvplan import __version__
from kvplan.cli.root import app
from kvplan.report.jsonout import emit_json
from kvplan.semantics.releases import DEFAULT_RELEASE


@app.command()
def version(json_output: bool = typer.Option(False, "--json", help="Print JSON.")) -> None:
    """Print kvplan's version and the vLLM version whose semantics it reproduces."""
    if json_output:
        emit_json({"schema_version": 1, "kvplan": __version__, "vllm_semantics": DEFAULT_RELEASE.version})
    else:
        print(version_line())


def version_line() -> str:
    return f"kvplan {__version__} (vLLM {DEFAULT_RELEASE.version} semantics)"
