from __future__ import annotations

from kvplan.cli.options import EngineOptions, engine_options
from kvplan.cli.root import JSON, app
from kvplan.gpus.catalog import list_gpus
from kvplan.report.jsonout import emit_json, to_jsonable

GPUS_SCHEMA_VERSION = 1


@app.command()
@engine_options("vllm_version", may_fetch=False)
def gpus(engine: EngineOptions,
         json_output: bool = JSON) -> None:
    """List the bundled GPU table (the memory total vLLM multiplies by the utilisation, speeds) with the
    batch defaults `vllm serve` of the release picks for each GPU."""
    from kvplan.usecases.plan import gpu_batch_defaults

    release = engine.release_or_default()
    table = list_gpus()
    defaults = gpu_batch_defaults(table, release)
    if json_output:
        emit_json({"schema_version": GPUS_SCHEMA_VERSION, "vllm_semantics": release.version,
                   "gpus": [{**to_jsonable(gpu), "serve_batch_defaults": batch}
                            for gpu, batch in zip(table, defaults, strict=True)]})
        return
    from kvplan.report.console import render_gpus

    render_gpus(table, defaults, release)
