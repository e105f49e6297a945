"""Workload assertions: simulate a workload on the target's pool with `kvplan simulate`'s engine,
read the figures from its typed result, and for a failure find, by simulating again, the smallest
pool that makes it hold (or say that more KV cache does not help)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kvplan.errors import KvplanError
from kvplan.semantics.engine.args import EngineArgs
from kvplan.semantics.releases import Release
from kvplan.units import significant
from kvplan.usecases.check import whatif
from kvplan.usecases.check.assertions import COMPLETES, Assertion, AssertionKind, AssertionResult, format_value, verdict
from kvplan.usecases.check.target import Target
from kvplan.usecases.plan import PlanSummary
from kvplan.usecases.simulate.capacity_search import Capacity
from kvplan.usecases.simulate.engine_source import ModelFacts, PlannedPool
from kvplan.usecases.simulate.metrics import RunMetrics
from kvplan.usecases.simulate.simulation import SimResult
from kvplan.usecases.simulate.workload import Workload

# settings a target fixes along with its pool; the workload's own engine section keeps the rest (hashing)
TARGET_ENGINE_SETTINGS: dict[str, Callable[[PlanSummary], Any]] = {
    "block_size": lambda plan: plan.block_size,
    "max_model_len": lambda plan: plan.max_model_len,
    "max_num_batched_tokens": lambda plan: plan.max_num_batched_tokens,
    "max_num_seqs": lambda plan: plan.max_num_seqs,
    "enable_prefix_caching": lambda plan: plan.enable_prefix_caching,
    "enable_chunked_prefill": lambda plan: plan.enable_chunked_prefill,
}
SEARCH_RUNS = 6          # bisection steps when looking for the smallest pool that passes
SEARCH_PRECISION = 50     # stop when the bracket is within 2% of its top


@dataclass(frozen=True)
class Figures:
    """What workload assertions read: a run's metrics, and the capacity answers of the first run
    (None for the reruns on other pools)."""

    metrics: RunMetrics
    capacity: Capacity | None
    timed: bool                                   # a step-time model exists: seconds are estimated

    @classmethod
    def of(cls, result: SimResult) -> Figures:
        return cls(result.metrics, result.capacity, result.setup.timer is not None)


@dataclass(frozen=True)
class WorkloadRun:
    name: str
    result: SimResult | None                      # None: the target has no pool to simulate on
    rerun: Callable[[int], Figures] | None        # the same workload on a pool of N blocks
    notes: tuple[str, ...] = ()


def simulated_figure(kind: AssertionKind, figures: Figures, where: str) -> Any:
    """The kind's figure, to the 6 significant digits the simulation document carries."""
    if kind is COMPLETES:
        return not figures.metrics.stalled
    value: Any = figures
    for step in kind.path:
        value = getattr(value, step) if value is not None else None
    if value is None and kind.unit.endswith("(estimate)") and not figures.timed:
        raise KvplanError(f"{where}: {kind.key} is in seconds, and this workload has no step-time model: give "
                          "step_time_ms in the [[assert]] block or timing in the workload")
    if isinstance(value, float):
        value = significant(value)
    if value is not None and kind.per_usable_block:
        value = value / figures.metrics.kv.usable_blocks
    return value


def passes(assertion: Assertion, figures: Figures) -> bool:
    return verdict(assertion.kind, assertion.required, simulated_figure(assertion.kind, figures, assertion.where))[0]


def run_workload(path: Path, target: Target | None, seed: int | None, step_time_ms: float | None,
                 find_max_rate: bool, release: Release, *, trust_remote_code: bool = False) -> WorkloadRun:
    from kvplan.usecases.simulate.driver import SimOptions, prepare, run, with_pool
    from kvplan.usecases.simulate.engine_source import EngineOverrides
    from kvplan.usecases.simulate.simulation import simulate
    from kvplan.usecases.simulate.workload import load_workload

    workload = load_workload(path)
    notes: list[str] = []
    named = workload.engine.vllm_version
    if named is not None and named != release.version:
        notes.append(f"{path.name} names vllm_version {named}; the check follows vLLM {release.version}")
    if target is not None:
        if target.plan is None or target.plan.num_blocks is None:
            return WorkloadRun(path.name, None, None, ("the target does not fit, so there is no pool to simulate on",))
        workload = on_target_pool(workload, target.plan, target)
        notes.append(f"{path.name} ran on the target's pool of {target.plan.num_blocks:,} blocks; "
                     "the workload's own engine section is not used")
    overrides = EngineOverrides(args=EngineArgs(trust_remote_code=trust_remote_code))
    setup = prepare(workload, SimOptions(overrides=overrides, seed=seed, step_time_ms=step_time_ms, release=release))
    result = simulate(setup, find_max_rate=find_max_rate)

    def rerun(num_gpu_blocks: int) -> Figures:
        outcome = run(setup, config=with_pool(setup.config, num_gpu_blocks))
        return Figures(outcome.metrics, None, setup.timer is not None)

    return WorkloadRun(path.name, result, rerun, (*notes, *result.notes))


def on_target_pool(workload: Workload, plan: PlanSummary, target: Target) -> Workload:
    """The workload with the target's pool and settings, and its model's bytes for the step-time model."""
    settings = {key: read(plan) for key, read in TARGET_ENGINE_SETTINGS.items()}
    groups = PlannedPool(plan.num_blocks or 0, settings, ModelFacts(), plan.kv_cache_groups).engine_groups()
    kept = workload.engine.settings_alone()
    engine = replace(kept, num_gpu_blocks=plan.num_blocks, gpu=plan.gpu, args=EngineArgs(**settings).over(kept.args),
                     kv_cache_groups=groups)
    weights = (target.profile.weights_bytes if target.profile else None) or plan.weights_per_gpu_bytes
    per_token = plan.kv_bytes_per_token
    timing = workload.timing
    timing = replace(
        timing,
        weights_bytes=timing.weights_bytes if timing.weights_bytes is not None else weights,
        kv_bytes_per_token=timing.kv_bytes_per_token if timing.kv_bytes_per_token is not None
        else (per_token if isinstance(per_token, int) else None),
    )
    return replace(workload, engine=engine, timing=timing)


def evaluate_workload(assertions: tuple[Assertion, ...], run: WorkloadRun, target: Target | None,
                      completes_where: str) -> list[AssertionResult]:
    """Every assertion of one workload, plus the implicit one that the run finishes."""
    checks = (Assertion(COMPLETES, True, completes_where), *assertions)
    if run.result is None:
        hint = "the target does not fit: make the capacity assertions hold first"
        return [AssertionResult(a.name, run.name, a.kind, a.required, None, False, None, hint) for a in checks]
    figures = Figures.of(run.result)
    results = []
    for assertion in checks:
        measured = simulated_figure(assertion.kind, figures, assertion.where)
        passed, margin = verdict(assertion.kind, assertion.required, measured)
        results.append(AssertionResult(assertion.name, run.name, assertion.kind, assertion.required, measured,
                                       passed, margin))
    failing = [a for a, r in zip(checks, results, strict=True) if not r.passed]
    if not failing:
        return results
    hints = pool_hints(failing, run, target)
    return [r if r.passed else replace(r, hint=hints[a.where]) for a, r in zip(checks, results, strict=True)]


def _zero_preemption_blocks(result: SimResult) -> int | None:
    return result.capacity.zero_preemption.num_gpu_blocks


def pool_hints(failing: list[Assertion], run: WorkloadRun, target: Target | None) -> dict[str, str]:
    """The smallest pool (found by simulating) with which the failing pool-bound assertions hold."""
    assert run.result is not None and run.rerun is not None
    hints: dict[str, str] = {}
    for assertion in failing:
        if not assertion.kind.pool_bound:
            hints[assertion.where] = ("KV capacity does not set this figure: a faster GPU (shorter steps) or more "
                                      "replicas raise it")
    bound = [a for a in failing if a.kind.pool_bound]
    if not bound:
        return hints
    current = run.result.setup.config.num_gpu_blocks
    zero = _zero_preemption_blocks(run.result)
    high = max(zero or 0, 2 * current)
    ample = run.rerun(high)
    fixable = [a for a in bound if passes(a, ample)]
    for assertion in bound:
        if assertion not in fixable:
            value = format_value(assertion.kind, simulated_figure(assertion.kind, ample, assertion.where))
            hints[assertion.where] = (f"more KV cache does not fix it (with {high:,} blocks it is still {value}): "
                                      "lower the arrival rate or max_num_seqs, or raise max_num_batched_tokens")
    if fixable:
        low = current
        for _ in range(SEARCH_RUNS):
            if high - low <= max(1, high // SEARCH_PRECISION):
                break
            middle = (low + high) // 2
            if all(passes(a, run.rerun(middle)) for a in fixable):
                high = middle
            else:
                low = middle
        change = whatif.advise_blocks(target, high) if target is not None else (
            f"give the engine {high:,} blocks (engine.num_gpu_blocks)")
        for assertion in fixable:
            hints[assertion.where] = f"{change}; simulated, it passes"
    return hints


def result_hint(assertion: Assertion, result: SimResult) -> str:
    """What to change, from one simulation alone (the quick `--assert-*` form)."""
    if not assertion.kind.pool_bound:
        return "KV capacity does not set this figure: a faster GPU (shorter steps) or more replicas raise it"
    current = result.setup.config.num_gpu_blocks
    zero = _zero_preemption_blocks(result)
    if zero is not None and zero > current:
        return (f"more KV cache helps: a pool of {zero:,} blocks never preempts with this workload "
                f"(--num-gpu-blocks {zero}); `kvplan check` finds the smallest pool that passes")
    return "KV capacity is not the limit: lower the arrival rate or max_num_seqs, or raise max_num_batched_tokens"
