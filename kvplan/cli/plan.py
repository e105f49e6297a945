"""`kvplan plan`: the KV cache sized from a model config, exactly as vLLM would."""

from __future__ import annotations

import typer

from kvplan.cli.options import PLANNING, EngineOptions, engine_options
from kvplan.cli.plan_plain import run_plan
from kvplan.cli.root import JSON, app
from kvplan.usecases.check.quick import QUICK_ASSERTS, parse_quick_asserts, quick_help


@app.command("plan", context_settings=QUICK_ASSERTS, epilog=quick_help("plan"))
@engine_options(*PLANNING)
def plan_command(ctx: typer.Context, engine: EngineOptions, json_output: bool = JSON) -> None:
    """Size the KV cache from a model config, exactly as the chosen vLLM release would.

    With --kv-cache-memory it needs no torch and answers in well under a second; with only --gpu
    (or --gpu-memory) the non-KV memory is predicted by the profile run on the fake backend."""
    code = run_plan(engine, json_output, parse_quick_asserts(ctx.args, "plan"))
    if code:
        raise typer.Exit(code)
