"""`kvplan plan`: the KV cache sized from a model config, exactly as vLLM would."""

from __future__ import annotations

import typer

from kvplan.cli.app import app
from kvplan.cli.options import JSON, PLANNING, EngineOptions, engine_options
from kvplan.cli.quick_asserts import verdict_exit_code
from kvplan.report.jsonout import emit_json
from kvplan.report.plan_json import plan_record
from kvplan.usecases.check.quick import QUICK_ASSERTS, parse_quick_asserts, plan_report, quick_help
from kvplan.usecases.profile import plan_for_device


@app.command("plan", context_settings=QUICK_ASSERTS, epilog=quick_help("plan"))
@engine_options(*PLANNING)
def plan_command(ctx: typer.Context, engine: EngineOptions, json_output: bool = JSON) -> None:
    """Size the KV cache from a model config, exactly as vLLM 0.17.1 would.

    With --kv-cache-memory it needs no torch and answers in well under a second; with only --gpu
    (or --gpu-memory) the non-KV memory is predicted by the profile run on the fake backend."""
    assertions = parse_quick_asserts(ctx.args, "plan")
    result = plan_for_device(engine.plan_request())
    if json_output:
        emit_json(plan_record(result))
    else:
        from kvplan.report.plan_console import render_plan

        render_plan(result)
    code = verdict_exit_code(plan_report(assertions, result) if assertions else None, finding=not result.fits)
    if code:
        raise typer.Exit(code)
