"""`kvplan plan` without typer: typer validates every value through pydantic, whose import alone
takes longer than the plan, and typer itself is too slow even without it: with typer's pydantic
coercion replaced by a plain int()/float()/str() (an experiment, issue 19), the plan parsed by typer
took a median of 377 ms beside this path's 235 ms (`python -c pass` 39 ms; 7 cold runs each, back to
back), over the 300 ms of `make bench` (benchmarks/targets.py).

A command line of plain engine flags (`--model X --kv-cache-memory 24GiB --json`) is read here from
the same declarations typer gets (`kvplan.cli.options`); anything else (help, `--assert-*`, a value
that is not a plain number, a flag given twice, an unknown word) goes to typer, which says what is
wrong. Both paths end in `run_plan`."""

from __future__ import annotations

import re
import types
from pathlib import Path
from typing import TYPE_CHECKING, Any, Union, get_args, get_origin

from kvplan.cli.options import (
    JSON_FLAG,
    PLANNING,
    EngineOptions,
    Flag,
    engine_access,
    engine_flags,
    fold_model_argument,
    read_engine_options,
)
from kvplan.hub import hub_access
from kvplan.limits import MAX_DIGITS
from kvplan.report.stderr import warn_once

if TYPE_CHECKING:
    from kvplan.usecases.check.assertions import Assertion
    from kvplan.usecases.plan import PlanRequest, PlanResult

MODEL_WORD = "model_argument"
_INT = re.compile(r"(0|[1-9][0-9]*)")
_FLOAT = re.compile(r"[0-9]+(\.[0-9]+)?|\.[0-9]+")


def run_plain(args: list[str]) -> int | None:
    """Run `kvplan plan ARGS` if ARGS are plain engine flags; None to leave them to typer."""
    parsed = parse_plain(args)
    if parsed is None:
        return None
    engine, json_output = parsed
    with hub_access(engine_access(engine)):        # as `engine_options` gives the typer path
        return run_plan(engine, json_output, ())


def parse_plain(args: list[str]) -> tuple[EngineOptions, bool] | None:
    """(the engine settings, --json) as typer would parse them, or None when typer must decide."""
    flags = engine_flags(PLANNING)
    values: dict[str, Any] = {}
    switches: dict[str, tuple[str, bool]] = {JSON_FLAG: ("json_output", True)}
    takes_value: dict[str, str] = {}
    for name, flag in flags.items():
        if _value_type(flag) is bool:
            for decl in flag.decls:
                positive, _, negative = decl.partition("/")
                switches[positive] = (name, True)
                if negative:
                    switches[negative] = (name, False)
        else:
            for decl in flag.decls:
                takes_value[decl] = name
    index = 0
    while index < len(args):
        word = args[index]
        index += 1
        decl, has_value, value = word.partition("=") if word.startswith("--") else (word, "", "")
        if decl in switches and not has_value:
            name, on = switches[decl]
            given: Any = on
        elif decl in takes_value:
            name = takes_value[decl]
            if not has_value:
                if index == len(args) or args[index].startswith("-"):
                    return None
                value = args[index]
                index += 1
            given = _convert(value, _value_type(flags[name]))
            if given is None:
                return None
        elif not word.startswith("-"):
            name, given = MODEL_WORD, word        # `kvplan plan MODEL`, as `vllm serve MODEL`
        else:
            return None
        if name in values:
            return None
        values[name] = given
    json_output = bool(values.pop("json_output", False))
    positional = values.pop(MODEL_WORD, None)
    engine = read_engine_options({name: values.get(name, flag.default) for name, flag in flags.items()})
    return fold_model_argument(engine, positional), json_output


def _value_type(flag: Flag) -> type:
    annotation = flag.annotation
    if get_origin(annotation) in (Union, types.UnionType):
        annotation = next(arg for arg in get_args(annotation) if arg is not type(None))
    return annotation


def _convert(text: str, kind: type) -> Any:
    """The value typer would give for `text`, where that is beyond doubt; else None."""
    if kind is str:
        return text
    if kind is int:
        # thousands of digits are beyond int() (and any range): typer says what is wrong with them
        return int(text) if _INT.fullmatch(text) and len(text) <= MAX_DIGITS else None
    if kind is float:
        return float(text) if _FLOAT.fullmatch(text) else None
    return None


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
