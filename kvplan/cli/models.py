from __future__ import annotations

from kvplan.cli.root import JSON, app
from kvplan.report.jsonout import emit_json

MODELS_SCHEMA_VERSION = 1


@app.command()
def models(json_output: bool = JSON) -> None:
    """List the bundled model catalog (resolves offline): layers, attention kinds, KV bytes per token."""
    from kvplan.usecases.plan import catalog_entries

    entries = catalog_entries()
    if json_output:
        emit_json({"schema_version": MODELS_SCHEMA_VERSION, "models": entries})
        return
    from kvplan.report.console import render_models

    render_models(entries)
