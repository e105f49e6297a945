"""The quick forms of `kvplan check`: every spec key `k` is a flag `--assert-k-with-dashes` on
`plan`, `profile` and `simulate`, with the same exit codes, and no spec file.

A command opts in without declaring one option per key: it takes the flags as extra arguments
(`context_settings=QUICK_ASSERTS`, a `ctx: typer.Context` parameter), parses them before it
works, and evaluates them on its record after it has printed it:

    assertions = parse_quick_asserts(ctx.args, "profile")
    ...
    code = evaluate_quick(assertions, record, finding=not result.fits)
    if code:
        raise typer.Exit(code)

The verdict goes to stderr, so that stdout stays one JSON document with --json."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvplan.errors import EXIT_FINDING, EXIT_OK, KvplanError

if TYPE_CHECKING:
    from kvplan.usecases.check.assertions import Assertion, AssertionResult
    from kvplan.usecases.check.evaluate import CheckReport
    from kvplan.usecases.plan import PlanRequest

QUICK_ASSERTS: dict[str, Any] = {"allow_extra_args": True, "ignore_unknown_options": True}
PREFIX = "--assert-"
# which assertion kinds a command's record can answer
COMMAND_SCOPES = {"plan": "capacity", "profile": "capacity", "simulate": "workload"}
EXAMPLES = {"capacity": "--assert-min-kv-tokens=500000", "workload": "--assert-max-preemptions=0"}


def quick_help(command: str) -> str:
    """The help epilog of a command that takes the quick forms."""
    scope = COMMAND_SCOPES[command]
    return (f"Assertions for CI: --assert-KEY=VALUE for any {scope} key of `kvplan check`, e.g. "
            f"{EXAMPLES[scope]}; the verdict goes to stderr and a failure exits 1 (docs/check.md).")


def parse_quick_asserts(args: list[str], command: str) -> tuple[Assertion, ...]:
    """The `--assert-*` flags among a command's extra arguments; anything else is a bad option (exit 2)."""
    if not args:
        return ()
    import difflib

    from kvplan.usecases.check.assertions import KINDS, Assertion
    from kvplan.usecases.check.spec import parse_required

    scope = COMMAND_SCOPES[command]
    assertions = []
    index = 0
    while index < len(args):
        token = args[index]
        index += 1
        if not token.startswith(PREFIX):
            what = "no such option" if token.startswith("-") else "unexpected argument"
            raise KvplanError(f"{what}: {token} (see `kvplan {command} --help`)")
        flag, has_value, value = token.partition("=")
        kind = KINDS.get(flag.removeprefix(PREFIX).replace("-", "_"))
        if kind is None:
            flags = [k.flag for k in KINDS.values() if k.scope == scope]
            close = difflib.get_close_matches(flag, flags, n=1)
            raise KvplanError(f"{flag}: no such assertion" + (f"; did you mean {close[0]}?" if close else
                                                               "; docs/check.md lists them"))
        if kind.scope != scope:
            applies = " and ".join(f"`kvplan {name}`" for name, s in COMMAND_SCOPES.items() if s == kind.scope)
            raise KvplanError(f"{flag} applies to {applies}, not `kvplan {command}`"
                              + (" (or to a workload in a `kvplan check` spec)" if kind.scope == "workload" else ""))
        if not has_value:
            if kind.value == "bool" and (index == len(args) or args[index].startswith("--")):
                value = "true"
            elif index == len(args):
                raise KvplanError(f"{flag} needs a value, e.g. {flag}=VALUE")
            else:
                value = args[index]
                index += 1
        assertions.append(Assertion(kind, parse_required(kind, value, flag), flag))
    return tuple(assertions)


def evaluate_quick(assertions: tuple[Assertion, ...], record: dict[str, Any], *, finding: bool = False,
                   request: PlanRequest | None = None) -> int:
    """Evaluate the flags on a command's record (plan, profile or simulation), print the verdict to
    stderr, and return the command's exit code: 1 for a failed assertion or a finding of the
    command itself (`finding`: the configuration does not fit), else 0."""
    command_code = EXIT_FINDING if finding else EXIT_OK
    if not assertions:
        return command_code
    from rich.console import Console

    from kvplan.report.check_console import render_check

    report = quick_report(assertions, record, request)
    render_check(report, Console(stderr=True, highlight=False))
    return max(command_code, report.exit_code)


def quick_report(assertions: tuple[Assertion, ...], record: dict[str, Any],
                 request: PlanRequest | None = None) -> CheckReport:
    from kvplan.usecases.check.evaluate import CheckReport, evaluate_on

    kind = record.get("kind")
    if kind == "kvplan.simulation":
        return CheckReport("simulate", "simulate", None, tuple(_on_document(a, record) for a in assertions))
    from kvplan.usecases.check.target import Target, profile_target

    if kind == "kvplan.profile":
        return evaluate_on(assertions, profile_target(record, None), "profile")
    if kind == "kvplan.plan":
        if request is None:
            raise ValueError("a plan record is checked with the PlanRequest that made it")
        from dataclasses import replace

        # the record holds the KV memory the plan used, also when it was predicted for --gpu
        sized = replace(request, kv_cache_memory_bytes=record["kv_cache_memory_bytes"], with_weights=False)
        target = Target("plan", f"plan of {record['model']}", record, None, sized)
        return evaluate_on(assertions, target, "plan")
    raise ValueError(f"no quick assertions for a record of kind {kind!r}")


def _on_document(assertion: Assertion, document: dict[str, Any]) -> AssertionResult:
    from kvplan.usecases.check.assertions import AssertionResult, verdict
    from kvplan.usecases.check.workload_checks import document_hint, measure

    measured = measure(assertion.kind, document, assertion.where)
    passed, margin = verdict(assertion.kind, assertion.required, measured)
    hint = None if passed else document_hint(assertion, document)
    return AssertionResult(assertion.name, document["workload"]["name"], assertion.kind, assertion.required,
                           measured, passed, margin, hint)
