from __future__ import annotations

from kvplan.cli.options import EngineOptions, engine_options
from kvplan.cli.root import JSON, app
from kvplan.report.jsonout import emit_json

MODELS_SCHEMA_VERSION = 1


@app.command()
@engine_options("vllm_version", may_fetch=False)
def models(engine: EngineOptions, json_output: bool = JSON) -> None:
    """List the bundled model catalog (resolves offline): layers, attention kinds, KV bytes per token."""
    from kvplan.usecases.plan import catalog_entries

    release = engine.release_or_default()
    entries = catalog_entries(release)
    if json_output:
        emit_json({"schema_version": MODELS_SCHEMA_VERSION, "vllm_semantics": release.version, "models": entries})
        return
    from kvplan.report.console import render_models

    render_models(entries, release)
