"""`kvplan check`: a spec's assertions evaluated on its target, as one report.

    evaluate(spec) -> CheckReport          (KvplanError, exit 2, for a spec or input that is invalid)
    evaluate_on(assertions, target, source) -> CheckReport   (the quick forms of plan and profile)
    CheckReport.exit_code                  0 every assertion holds, 1 one failed"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

from kvplan.errors import EXIT_FINDING, EXIT_OK
from kvplan.semantics.releases import Release
from kvplan.sources.installed import default_release
from kvplan.usecases.check.assertions import Assertion, AssertionResult
from kvplan.usecases.check.capacity_checks import evaluate_capacity
from kvplan.usecases.check.spec import CheckSpec
from kvplan.usecases.check.target import Target, load_target
from kvplan.usecases.plan import distinct_weights_warnings


@dataclass(frozen=True)
class CheckReport:
    name: str
    source: str                                   # the spec file, or the command of a quick form
    target: Target | None
    results: tuple[AssertionResult, ...]
    notes: tuple[str, ...] = ()
    release: Release = field(default_factory=default_release)   # whose numbers the assertions were judged on
    # the plans' (the target's, a workload's pool) that could not count a model's weights, once per model
    weights_warnings: tuple[str, ...] = ()

    @property
    def failures(self) -> tuple[AssertionResult, ...]:
        return tuple(result for result in self.results if not result.passed)

    @property
    def passed(self) -> bool:
        return not self.failures

    @property
    def exit_code(self) -> int:
        return EXIT_OK if self.passed else EXIT_FINDING

    @property
    def groups(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(result.group for result in self.results))


def evaluate(spec: CheckSpec, *, trust_remote_code: bool = False) -> CheckReport:
    """Every assertion of the spec; `trust_remote_code` is the command line's, never the spec's."""
    from kvplan.usecases.check.workload_checks import evaluate_workload, run_workload

    shown = spec.path.name
    target = load_target(spec.target, shown, spec.release, trust_remote_code=trust_remote_code) \
        if spec.target is not None else None
    results: list[AssertionResult] = []
    notes: list[str] = []
    weights_warnings = [target.weights_warning] if target is not None else []
    for block in spec.blocks:
        capacity = [a for a in block.assertions if a.kind.scope == "capacity"]
        assert target is not None or not capacity  # the spec parser demands a target for these
        results.extend(evaluate_capacity(a, target) for a in capacity if target is not None)
        workload = tuple(a for a in block.assertions if a.kind.scope == "workload")
        if block.workload is not None:
            find_max_rate = any(a.kind.key == "min_sustained_rate_rps" for a in workload)
            run = run_workload(block.workload, target, block.seed, block.step_time_ms, find_max_rate, spec.release,
                               trust_remote_code=trust_remote_code)
            notes.extend(run.notes)
            weights_warnings.append(run.result.setup.engine.weights_warning if run.result is not None else None)
            results.extend(evaluate_workload(workload, run, target, f"assert[{block.index}].workload"))
    return CheckReport(spec.name, str(spec.path), target, tuple(results), tuple(dict.fromkeys(notes)), spec.release,
                       distinct_weights_warnings(weights_warnings))


def evaluate_on(assertions: tuple[Assertion, ...], target: Target, source: str) -> CheckReport:
    """Capacity assertions on a target already at hand (the quick forms of plan and profile)."""
    results = tuple(evaluate_capacity(assertion, target) for assertion in assertions)
    return CheckReport(source, source, target, results, release=target.request.release)


def spec_inputs(spec: CheckSpec) -> tuple[Path, ...]:
    """Every file evaluating the spec reads: the spec, its profile, the model config or directory it
    plans (its own, or the one the profile names), each workload and the files that workload reads."""
    from kvplan.sources.models import local_model_path
    from kvplan.usecases.profile_summary import load_profile
    from kvplan.usecases.simulate.workload import load_workload

    inputs: list[Path] = [spec.path]
    target = spec.target
    if target is not None:
        models = [target.model]
        if target.profile is not None:
            inputs.append(target.profile)
            if target.model is None and target.profile.is_file():
                models.append(load_profile(target.profile, f"{spec.path.name}: target.profile").provenance.model)
        inputs.extend(path for model in models if model and (path := local_model_path(model)) is not None)
    for block in spec.blocks:
        if block.workload is not None:
            inputs.extend(load_workload(block.workload).inputs)
    return tuple(dict.fromkeys(inputs))
