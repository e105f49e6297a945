"""`kvplan plan`: the KV cache sized from a model config, exactly as vLLM would.

typer only renders `kvplan plan --help` from these declarations: every command line is read by
`kvplan.cli.plan_args`, also when the app is run directly (`PlanCommand`)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import typer
from typer.core import TyperCommand

from kvplan.cli.options import PLANNING, EngineOptions, engine_options
from kvplan.cli.plan_args import PROFILE, run_plan_command
from kvplan.cli.root import JSON, app
from kvplan.usecases.check.quick import quick_help


class PlanCommand(TyperCommand):
    """The command whose help typer renders and whose words `plan_args` reads."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:   # ctx: the click Context typer vendors
        code = run_plan_command(args)
        if code is None:
            return super().parse_args(ctx, ["--help"])
        raise typer.Exit(code)


@app.command("plan", cls=PlanCommand, epilog=quick_help("plan"))
@engine_options(*PLANNING, positional_model=True)
def plan_command(engine: EngineOptions, profile: Path | None = PROFILE.typer_option(),
                 json_output: bool = JSON) -> None:
    """Size the KV cache from a model config, exactly as the chosen vLLM release would.

    With --kv-cache-memory it needs no torch and answers in well under a second; with only --gpu
    (or --gpu-memory) the non-KV memory is predicted by the profile run on the fake backend; with
    --profile it is the saved profile's."""
