"""`kvplan plan` once its command line is read (`kvplan.cli.plan_args`): the plan, printed, and
the verdict of its `--assert-*` flags."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kvplan.cli.options import EngineOptions
from kvplan.report.stderr import warn_once

if TYPE_CHECKING:
    from kvplan.usecases.check.assertions import Assertion
    from kvplan.usecases.plan import PlanRequest, PlanResult


def run_plan(engine: EngineOptions, json_output: bool, assertions: tuple[Assertion, ...],
             profile: Path | None = None, model_given: bool = True) -> int:
    """Plan, print the plan (JSON or the console report), then the verdict of the assertions; the
    exit code. With `profile`, on that saved profile's measured terms (`usecases.profile_plan`)."""
    from kvplan.cli.quick_asserts import verdict_exit_code

    result = _plan(engine.plan_request()) if profile is None else _plan_from_profile(engine, profile, model_given)
    if json_output:
        from kvplan.report.jsonout import emit_json
        from kvplan.report.plan_json import plan_record

        emit_json(plan_record(result))
    else:
        from kvplan.report.plan_console import render_plan

        render_plan(result)
    warn_once((result.weights_warning,))
    report = None
    if assertions:
        from kvplan.usecases.check.quick import plan_report

        report = plan_report(assertions, result)
    return verdict_exit_code(report, finding=not result.fits)


def _plan_from_profile(engine: EngineOptions, path: Path, model_given: bool) -> PlanResult:
    """The plan on a saved profile's terms, at the settings the command line gives."""
    from kvplan.usecases.profile_plan import plan_from_profile
    from kvplan.usecases.profile_summary import load_profile

    given = {name: value for name, value in engine.args.given().items() if name not in _NOT_REDONE}
    given.update({_REQUEST_FIELDS[name]: getattr(engine, name) for name in _REQUEST_FIELDS
                  if getattr(engine, name) is not None})
    if not model_given:
        given.pop("model", None)
    if not engine.trust_remote_code:
        given.pop("trust_remote_code", None)
    return plan_from_profile(load_profile(path, f"--profile {path}"), f"--profile {path}", given, engine.release())


# a profile's plan is redone at every engine argument given (one not given keeps the profile's setting)
# but these, which the replan does not take: the revision (the config is the profile's), the engine loop,
# and the settings that change what the profile measured (the weights' method, 0.34.0's sizing path, the
# CUDA graphs); kvplan's own settings -> the request's setting they set
_NOT_REDONE = ("revision", "async_scheduling", "quantization", "enable_extensible_kv_cache", "enforce_eager")
_REQUEST_FIELDS = {"gpu": "gpu", "gpu_memory": "gpu_memory_bytes"}


def _plan(request: PlanRequest) -> PlanResult:
    """The plan for the KV memory given, else for the memory the profile run predicts for the GPU."""
    from kvplan.usecases.plan import plan, predicts_kv_memory

    if not predicts_kv_memory(request):
        return plan(request)
    from kvplan.cli.progress import reporting
    from kvplan.usecases.profile import plan_for_device

    with reporting() as progress:
        progress.stage("predicting the GPU's KV memory with the profile run on the fake backend")
        return plan_for_device(request, progress=progress.stage)
