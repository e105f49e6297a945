"""The quick forms of `kvplan check`: every spec key `k` is a flag `--assert-k-with-dashes` on
`plan`, `profile` and `simulate`, with the same exit codes, and no spec file.

A command opts in without declaring one option per key: it takes the flags as extra arguments
(`context_settings=QUICK_ASSERTS`, a `ctx: typer.Context` parameter), parses them before it works
(`parse_quick_asserts`), and evaluates them on its typed result after it has printed it
(`plan_report`, `profile_report`, `simulation_report`; `kvplan.cli.quick_asserts` prints the
verdict to stderr, so that stdout stays one JSON document with --json)."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from kvplan.errors import KvplanError
from kvplan.parsing import first_unknown_key

if TYPE_CHECKING:
    from kvplan.semantics.releases import Release
    from kvplan.usecases.check.assertions import Assertion, AssertionResult
    from kvplan.usecases.check.evaluate import CheckReport
    from kvplan.usecases.plan import PlanResult
    from kvplan.usecases.profile_summary import ProfileSummary
    from kvplan.usecases.simulate.simulation import SimResult

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
    assertions = []
    index = 0
    while index < len(args):
        assertion, index = read_quick_assert(args, index, command)
        assertions.append(assertion)
    return tuple(assertions)


def quick_asserts_around(argument: str, args: list[str], command: str,
                         metavar: str) -> tuple[tuple[Assertion, ...], str]:
    """The `--assert-*` flags and the command's one argument when typer took a flag for the argument
    (the command reads unknown options, so one given before the argument is taken as it): the
    words are read again in their order, the first that is no flag nor a flag's value the argument."""
    words = [argument, *args]
    assertions = []
    found: str | None = None
    index = 0
    while index < len(words):
        if found is None and not words[index].startswith("-"):
            found = words[index]
            index += 1
            continue
        assertion, index = read_quick_assert(words, index, command)
        assertions.append(assertion)
    if found is None:
        raise KvplanError(f"missing argument '{metavar}' (see `kvplan {command} --help`)")
    return tuple(assertions), found


def read_quick_assert(args: list[str], index: int, command: str) -> tuple[Assertion, int]:
    """The `--assert-*` flag at `args[index]`, with its value (the next word unless given as
    `--assert-k=VALUE`, or a yes/no one given alone); the index after it."""
    from kvplan.usecases.check.assertions import KINDS, Assertion
    from kvplan.usecases.check.spec import parse_required

    scope = COMMAND_SCOPES[command]
    token = args[index]
    index += 1
    if not token.startswith(PREFIX):
        what = "no such option" if token.startswith("-") else "unexpected argument"
        raise KvplanError(f"{what}: {token} (see `kvplan {command} --help`)")
    flag, has_value, value = token.partition("=")
    kind = KINDS.get(flag.removeprefix(PREFIX).replace("-", "_"))
    if kind is None:
        flags = [k.flag for k in KINDS.values() if k.scope == scope]
        unknown = first_unknown_key([flag], flags)
        close = unknown[1] if unknown else None
        raise KvplanError(f"{flag}: no such assertion" + (f"; did you mean {close}?" if close else
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
    return Assertion(kind, parse_required(kind, value, flag), flag), index


def plan_report(assertions: tuple[Assertion, ...], result: PlanResult) -> CheckReport:
    """Capacity assertions on a plan (its KV memory as the plan used it, also when predicted for --gpu)."""
    from kvplan.usecases.check.evaluate import evaluate_on
    from kvplan.usecases.check.target import plan_result_target

    return evaluate_on(assertions, plan_result_target(result, f"plan of {result.summary.model}"), "plan")


def profile_report(assertions: tuple[Assertion, ...], profile: ProfileSummary, release: Release,
                   trust_remote_code: bool = False) -> CheckReport:
    """Capacity assertions on a profile of `release` (`trust_remote_code`: the command line's)."""
    from kvplan.usecases.check.evaluate import evaluate_on
    from kvplan.usecases.check.target import profile_target

    target = profile_target(profile, None, release=release, trust_remote_code=trust_remote_code)
    return evaluate_on(assertions, target, "profile")


def simulation_report(assertions: tuple[Assertion, ...], result: SimResult) -> CheckReport:
    from kvplan.usecases.check.evaluate import CheckReport

    results = tuple(_on_simulation(a, result) for a in assertions)
    return CheckReport("simulate", "simulate", None, results, release=result.setup.config.release)


def _on_simulation(assertion: Assertion, result: SimResult) -> AssertionResult:
    from kvplan.usecases.check.assertions import AssertionResult, verdict
    from kvplan.usecases.check.workload_checks import Figures, result_hint, simulated_figure

    measured = simulated_figure(assertion.kind, Figures.of(result), assertion.where)
    passed, margin = verdict(assertion.kind, assertion.required, measured)
    hint = None if passed else result_hint(assertion, result)
    return AssertionResult(assertion.name, result.setup.workload.name, assertion.kind, assertion.required,
                           measured, passed, margin, hint)
