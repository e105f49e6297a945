"""The check report as one JSON document (`kvplan check --json`; schema in docs/schemas/check.json)."""

from __future__ import annotations

from typing import Any

from kvplan import __version__
from kvplan.usecases.check.assertions import AssertionResult, Concurrency
from kvplan.usecases.check.evaluate import CheckReport
from kvplan.usecases.check.target import Target

CHECK_SCHEMA_VERSION = 1


def describe(target: Target | None) -> dict[str, Any] | None:
    if target is None:
        return None
    plan = target.plan
    return {
        "kind": target.kind,
        "label": target.label,
        "profile": None if target.path is None else str(target.path),
        "model": target.request.model if plan is None else plan.model,
        "config_sha256": None if plan is None else plan.config_sha256,
        "gpu": None if plan is None else plan.gpu,
        "predicted": None if target.profile is None else target.profile.predicted,
        "num_blocks": None if plan is None else plan.num_blocks,
    }


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
        "vllm_semantics": report.release.version,
        "name": report.name,
        "source": report.source,
        "target": describe(report.target),
        "passed": report.passed,
        "exit_code": report.exit_code,
        "counts": {"total": len(report.results), "passed": len(report.results) - len(report.failures),
                   "failed": len(report.failures)},
        "results": [result_record(result) for result in report.results],
        "notes": list(report.notes),
    }
