"""`kvplan check`: a spec's assertions evaluated on its target, as one report.

    evaluate(spec) -> CheckReport          (KvplanError, exit 2, for a spec or input that is invalid)
    CheckReport.exit_code                  0 every assertion holds, 1 one failed
    check_record(report) -> dict           the `--json` document (schema in docs/schemas/check.json)"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kvplan import VLLM_SEMANTICS, __version__
from kvplan.errors import EXIT_FINDING, EXIT_OK
from kvplan.usecases.check.assertions import Assertion, AssertionResult, Concurrency
from kvplan.usecases.check.capacity_checks import evaluate_capacity
from kvplan.usecases.check.spec import CheckSpec
from kvplan.usecases.check.target import Target, load_target

CHECK_SCHEMA_VERSION = 1


@dataclass(frozen=True)
class CheckReport:
    name: str
    source: str                                   # the spec file, or the command of a quick form
    target: dict[str, Any] | None
    results: tuple[AssertionResult, ...]
    notes: tuple[str, ...] = ()

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


def evaluate(spec: CheckSpec) -> CheckReport:
    from kvplan.usecases.check.workload_checks import evaluate_workload, run_workload

    shown = spec.path.name
    target = load_target(spec.target, shown) if spec.target is not None else None
    results: list[AssertionResult] = []
    notes: list[str] = []
    for block in spec.blocks:
        capacity = [a for a in block.assertions if a.kind.scope == "capacity"]
        assert target is not None or not capacity  # the spec parser demands a target for these
        results.extend(evaluate_capacity(a, target) for a in capacity if target is not None)
        workload = tuple(a for a in block.assertions if a.kind.scope == "workload")
        if block.workload is not None:
            find_max_rate = any(a.kind.key == "min_sustained_rate_rps" for a in workload)
            run = run_workload(block.workload, target, block.seed, block.step_time_ms, find_max_rate)
            notes.extend(run.notes)
            results.extend(evaluate_workload(workload, run, target, f"assert[{block.index}].workload"))
    return CheckReport(spec.name, str(spec.path), describe(target), tuple(results), tuple(dict.fromkeys(notes)))


def evaluate_on(assertions: tuple[Assertion, ...], target: Target, source: str) -> CheckReport:
    """Capacity assertions on a target already at hand (the quick forms of plan and profile)."""
    results = tuple(evaluate_capacity(assertion, target) for assertion in assertions)
    return CheckReport(source, source, describe(target), results)


def describe(target: Target | None) -> dict[str, Any] | None:
    return None if target is None else target.describe()


def _value(value: Any) -> Any:
    if isinstance(value, Concurrency):
        return {"at_least": value.at_least, "tokens_per_request": value.tokens_per_request}
    return value


def result_record(result: AssertionResult) -> dict[str, Any]:
    kind = result.kind
    return {
        "name": result.name,
        "group": result.group,
        "key": kind.key,
        "scope": kind.scope,
        "bound": kind.bound,
        "unit": kind.unit,
        "required": _value(result.required),
        "measured": result.measured,
        "passed": result.passed,
        "margin": result.margin,
        "hint": result.hint,
        "detail": result.detail,
    }


def check_record(report: CheckReport) -> dict[str, Any]:
    return {
        "schema_version": CHECK_SCHEMA_VERSION,
        "kind": "kvplan.check",
        "kvplan_version": __version__,
        "vllm_semantics": VLLM_SEMANTICS,
        "name": report.name,
        "source": report.source,
        "target": report.target,
        "passed": report.passed,
        "exit_code": report.exit_code,
        "counts": {"total": len(report.results), "passed": len(report.results) - len(report.failures),
                   "failed": len(report.failures)},
        "results": [result_record(result) for result in report.results],
        "notes": list(report.notes),
    }
