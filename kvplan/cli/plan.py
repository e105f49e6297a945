"""`kvplan plan`: the KV cache sized from a model config, exactly as vLLM would."""

from __future__ import annotations

from pathlib import Path

import typer

from kvplan.cli.options import PLANNING, EngineOptions, engine_options
from kvplan.cli.plan_plain import run_plan
from kvplan.cli.root import JSON, app
from kvplan.usecases.check.quick import QUICK_ASSERTS, parse_quick_asserts, quick_help

PROFILE = typer.Option(
    None, "--profile", metavar="P.json",
    help="Size the cache from a saved profile's measured terms (`kvplan profile --save`, `kvplan explain LOG "
    "--save-profile`) at the settings given here: another --gpu-memory-utilization, --max-model-len or "
    "--kv-cache-dtype, as if the GPU had been measured. The rest of the settings are the profile's.")


@app.command("plan", context_settings=QUICK_ASSERTS, epilog=quick_help("plan"))
@engine_options(*PLANNING, positional_model=True)
def plan_command(ctx: typer.Context, engine: EngineOptions, profile: Path | None = PROFILE,
                 json_output: bool = JSON) -> None:
    """Size the KV cache from a model config, exactly as the chosen vLLM release would.

    With --kv-cache-memory it needs no torch and answers in well under a second; with only --gpu
    (or --gpu-memory) the non-KV memory is predicted by the profile run on the fake backend; with
    --profile it is the saved profile's."""
    code = run_plan(engine, json_output, parse_quick_asserts(ctx.args, "plan"), profile=profile,
                    model_given=engine.model is not None)
    if code:
        raise typer.Exit(code)
