from __future__ import annotations

import typer

from kvplan.cli.root import app
from kvplan.gpus.catalog import list_gpus
from kvplan.report.jsonout import emit_json

GPUS_SCHEMA_VERSION = 1


@app.command()
def gpus(json_output: bool = typer.Option(False, "--json", help="Print the table as JSON.")) -> None:
    """List the bundled GPU table (the memory total vLLM multiplies by the utilisation, speeds)."""
    table = list_gpus()
    if json_output:
        emit_json({"schema_version": GPUS_SCHEMA_VERSION, "gpus": table})
        return
    from kvplan.report.console import render_gpus

    render_gpus(table)
