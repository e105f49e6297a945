"""`kvplan explain LOG`: a vLLM start-up log reconciled term by term with kvplan's prediction of the
same start-up, what ran out when it did not start, and the smallest changes that would have.

    explain(ExplainRequest) -> ExplainResult

The prediction is kvplan's: `plan` sizes the logged KV memory (the sizing alone, exact when the
settings are), and the profile run on the fake backend predicts every memory term (torch needed;
without it the memory terms are left unpredicted and the output says so). A model kvplan cannot
build leaves the logged terms unreconciled, with the reason."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kvplan.errors import KvplanError
from kvplan.semantics.engine.args import setting
from kvplan.semantics.memory.budget import MemoryBudget
from kvplan.semantics.memory.startup_log import GIB_RESOLUTION
from kvplan.semantics.releases import Release
from kvplan.usecases.explain.fixes import Fix, FixContext, Shortfall, fixes, shortfall
from kvplan.usecases.explain.log_reader import StartupLog, read_startup_log
from kvplan.usecases.explain.logged_budget import logged_available, logged_budget
from kvplan.usecases.explain.settings import ResolvedSettings, Setting, resolve_settings, wording_words
from kvplan.usecases.explain.terms import Predicted, TermRow, term_rows
from kvplan.usecases.plan import PlanRequest, PlanResult, plan


@dataclass(frozen=True)
class ExplainRequest:
    """The log's text and name, and what the user gave beside it: settings the log does not state
    (PlanRequest field names, `gpu`, `gpu_memory_bytes`), the release whose rules to predict with,
    and whether to run the fake profile for the memory terms."""

    text: str
    where: str
    given: Mapping[str, Any] = field(default_factory=dict)
    vllm_version: str | None = None
    predict_memory: bool = True


@dataclass(frozen=True)
class ExplainResult:
    where: str
    log: StartupLog
    release: Release
    release_reason: str
    wording: str                        # the wording recognised, in words
    settings: tuple[Setting, ...]
    request: PlanRequest | None
    rows: tuple[TermRow, ...]
    logged_budget: MemoryBudget | None  # the log's terms, adding up to its KV memory
    sized: PlanResult | None            # kvplan's plan of the logged KV memory
    predicted_budget: MemoryBudget | None
    predicted_plan: PlanResult | None
    not_predicted: tuple[str, ...]      # what kvplan could not predict, and why
    shortfall: Shortfall | None
    fixes: tuple[Fix, ...]
    command: str | None                 # the logged `vllm serve` command, as far as the log tells it
    warnings: tuple[str, ...] = ()

    @property
    def started(self) -> bool:
        """The start-up reached a KV cache that holds one max_model_len request, without an error."""
        return self.log.error is None and self.shortfall is None

    @property
    def outside_tolerance(self) -> tuple[TermRow, ...]:
        return tuple(row for row in self.rows if row.within is False)


def explain(request: ExplainRequest) -> ExplainResult:
    log = read_startup_log(request.text, request.where)
    resolved = resolve_settings(log, request.given, request.vllm_version)
    not_predicted: list[str] = []
    warnings: list[str] = []
    sized = predicted_plan = None
    predicted_budget = None
    plan_request = resolved.request
    if plan_request is None:
        not_predicted.append("the log names no model: give --model to predict the start-up")
    else:
        sized, why = _size_logged_memory(log, plan_request)
        if why:
            not_predicted.append(why)
        if request.predict_memory:
            predicted_budget, predicted_plan, why, profile_warnings = _predict(plan_request)
            warnings.extend(profile_warnings)
            if why:
                not_predicted.append(why)
        else:
            not_predicted.append("memory terms: not predicted (--no-predict)")
    # the logged terms add up under the utilization vLLM ran with (the log's, over a flag's)
    logged_utilization = log.setting("gpu_memory_utilization")
    budget = None if plan_request is None else logged_budget(
        log, resolved.total_bytes, float(logged_utilization) if isinstance(logged_utilization, int | float)
        else plan_request.utilization, resolved.release)
    predicted = Predicted(predicted_budget, predicted_plan, sized,
                          1 if plan_request is None else plan_request.value("tensor_parallel_size"),
                          not_predicted[-1] if not_predicted else None, _rounding_range(sized))
    rows = term_rows(log, predicted)
    context = FixContext(plan_request, budget or predicted_budget, "log" if budget is not None else "predicted",
                         sized or _sized_at(plan_request, budget or predicted_budget))
    found = shortfall(log, context)
    changes = fixes(log, context) if found is not None else ()
    return ExplainResult(
        where=request.where, log=log, release=resolved.release, release_reason=resolved.release_reason,
        wording=wording_words(log.wording), settings=resolved.settings, request=plan_request, rows=rows,
        logged_budget=budget, sized=sized, predicted_budget=predicted_budget, predicted_plan=predicted_plan,
        not_predicted=tuple(not_predicted), shortfall=found, fixes=changes, command=_command(log, resolved),
        warnings=tuple(dict.fromkeys(warnings)),
    )


def _size_logged_memory(log: StartupLog, request: PlanRequest) -> tuple[PlanResult | None, str | None]:
    """kvplan's sizing of the KV memory vLLM logged (None when the log gives none)."""
    available = logged_available(log)
    if available is None:
        return None, None
    try:
        # with the weights: a profile saved from the log gives simulate's step-time estimate its bytes
        return plan(request.with_settings(kv_cache_memory_bytes=available, with_weights=True)), None
    except KvplanError as error:
        return None, f"the pool: kvplan cannot plan this model with these settings: {error}"


def _rounding_range(sized: PlanResult | None) -> tuple[PlanResult, PlanResult] | None:
    """The sizing at the ends of what the logged KV memory stands for (+-0.005 GiB)."""
    if sized is None:
        return None
    request = sized.request
    memory = request.args.kv_cache_memory_bytes or 0
    return (plan(request.with_settings(kv_cache_memory_bytes=max(memory - GIB_RESOLUTION, 1), with_weights=False)),
            plan(request.with_settings(kv_cache_memory_bytes=memory + GIB_RESOLUTION, with_weights=False)))


def _sized_at(request: PlanRequest | None, budget: MemoryBudget | None) -> PlanResult | None:
    if request is None or budget is None:
        return None
    try:
        return plan(request.with_settings(kv_cache_memory_bytes=budget.available_kv_bytes, with_weights=False))
    except KvplanError:
        return None


def _predict(request: PlanRequest) -> tuple[MemoryBudget | None, PlanResult | None, str | None, tuple[str, ...]]:
    """The profile run on the fake backend for the logged settings (torch needed)."""
    from kvplan.errors import MissingExtraError, require_profile_extra

    try:
        require_profile_extra("predicting the memory terms of a logged start-up")
    except MissingExtraError as error:
        return None, None, f"memory terms: not predicted: {error}", ()
    from kvplan.usecases.profile import ProfileRequest, run_profile

    try:
        profile = run_profile(ProfileRequest(plan=request, backend="fake", allocate=False))
    except KvplanError as error:
        return None, None, f"memory terms: kvplan cannot build this model: {error}", ()
    if profile.budget is None:
        return None, None, f"memory terms: the profile run refused the settings: {profile.finding}", profile.warnings
    return profile.budget, profile.plan, None, profile.warnings


# the log's settings a `vllm serve` line repeats: engine arguments by the flag `EngineArgs` declares (a
# switch by its on or off half), and one kvplan does not plan with by vLLM's flag
SERVE_VALUES = ("dtype", "max_model_len", "tensor_parallel_size", "pipeline_parallel_size", "gpu_memory_utilization",
                "block_size", "kv_cache_dtype", "max_num_batched_tokens", "max_num_seqs", "kv_cache_memory_bytes",
                "num_gpu_blocks_override", "quantization")
SERVE_SWITCHES = ("enable_prefix_caching", "enable_chunked_prefill", "enforce_eager", "async_scheduling")
OTHER_SERVE_FLAGS = {"data_parallel_size": "--data-parallel-size"}


def _command(log: StartupLog, resolved: ResolvedSettings) -> str | None:
    """The `vllm serve` line the log's non-default args spell (the model and the settings given)."""
    model = next((setting.value for setting in resolved.settings if setting.name == "model"), None)
    if not isinstance(model, str):
        return None
    words = ["vllm", "serve", model]
    for name in log.non_default_args:
        value = log.setting(name)
        if name in SERVE_VALUES or name in OTHER_SERVE_FLAGS:
            words += [OTHER_SERVE_FLAGS.get(name) or setting(name).flag, str(value)]
        elif name in SERVE_SWITCHES and isinstance(value, bool):
            on_flag, off_flag = setting(name).flags[0].split("/")
            words.append(on_flag if value else off_flag)
    return " ".join(words)


def changed_command(command: str, fix: Fix) -> str:
    """The command with the fix's flags set (a flag already there takes the fix's value)."""
    words = command.split()
    for flag, value in fix.flags:
        if flag in words:
            index = words.index(flag)
            words[index + 1] = value
        else:
            words += [flag, value]
    return " ".join(words)
