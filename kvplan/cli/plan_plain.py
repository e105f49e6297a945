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

    given = {name: value for name, value in engine.args.given().items() if name in _PROFILE_ARGS}
    given.update({_REQUEST_FIELDS[name]: getattr(engine, name) for name in _REQUEST_FIELDS
                  if getattr(engine, name) is not None})
    if not model_given:
        given.pop("model", None)
    if not engine.trust_remote_code:
        given.pop("trust_remote_code", None)
    return plan_from_profile(load_profile(path, f"--profile {path}"), f"--profile {path}", given, engine.release())


# the engine arguments a profile's plan is redone at (the PlanRequest field of the same name; one left out
# keeps the profile's setting), and kvplan's own settings -> the PlanRequest field they set
_PROFILE_ARGS = (
    "model", "kv_cache_memory_bytes", "gpu_memory_utilization", "block_size", "max_model_len",
    "max_num_batched_tokens", "max_num_seqs", "kv_cache_dtype", "dtype", "tensor_parallel_size",
    "pipeline_parallel_size", "num_gpu_blocks_override", "enable_prefix_caching", "enable_chunked_prefill",
    "trust_remote_code",
)
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
