"""typer's usage errors reach the user as kvplan's one line (kvplan.cli.usage), for every command
that typer parses; `kvplan plan` has its own parser (tests/cli/test_plan_args.py)."""

from __future__ import annotations

import pytest

WORKLOAD = "examples/workloads/chat-5rps.json"

BAD = [
    (["fit", "--max-num-seq", "3"], "no such option: --max-num-seq; did you mean --max-num-seqs? "
     "(see `kvplan fit --help`)"),
    (["sweep", "--nope"], "no such option: --nope (see `kvplan sweep --help`)"),
    (["check"], "missing argument 'SPEC' (see `kvplan check --help`)"),
    (["bench", "serve", "--bogus"], "no such option: --bogus; did you mean --gpu? (see `kvplan bench serve --help`)"),
    (["explain", "--x"], "no such option: --x (see `kvplan explain --help`)"),
    # simulate reads unknown options as --assert-*: one before the workload is still named as unknown
    (["simulate", "--bogus", WORKLOAD], "no such option: --bogus (see `kvplan simulate --help`)"),
    (["simulate", "--assert-max-preemptions", "0"], "missing argument 'WORKLOAD' (see `kvplan simulate --help`)"),
]


@pytest.mark.parametrize(("words", "message"), BAD)
def test_a_usage_error_is_one_line(kvplan, words, message):
    code, out, err = kvplan(*words)
    assert (code, out, err) == (2, "", f"kvplan: error: {message}\n")


@pytest.mark.parametrize(("words", "says"), [
    (["replay", "--max-num-seqs", "abc", "t.json"], "--max-num-seqs takes an integer, got 'abc'"),
    (["replay", "--max-num-seqs", "1.5", "t.json"], "--max-num-seqs takes an integer, got '1.5'"),
    (["simulate", WORKLOAD, "--seed", "x" * 50], f"--seed takes an integer, got {'x' * 40!r}... (50 characters)"),
])
def test_a_value_typer_cannot_convert_is_said_as_plan_says_it(kvplan, words, says):
    # the words of `kvplan plan`'s own parser (test_plan_args.py), not typer's, which its releases change
    code, out, err = kvplan(*words)
    assert (code, out, err) == (2, "", f"kvplan: error: {says} (see `kvplan {words[0]} --help`)\n")


def test_an_assertion_before_the_workload_reads_as_after_it(kvplan):
    before = kvplan("simulate", "--assert-max-preemptions", "0", WORKLOAD, "--json")
    after = kvplan("simulate", WORKLOAD, "--assert-max-preemptions", "0", "--json")
    assert before == after and before[0] == 0 and before[1].startswith("{")


def test_help_and_a_typer_exit_keep_their_codes(kvplan):
    code, out, err = kvplan("check", "--help")
    assert code == 0 and "Usage: kvplan check" in out and err == ""
    # `check` of a failing spec exits 1 through typer.Exit
    code, _, _ = kvplan("check", "examples/checks/fail-tight-kv-cache.toml")
    assert code == 1


@pytest.mark.parametrize("words", [[], ["bench"]])
def test_a_group_given_no_command_shows_its_help_and_exits_2(kvplan, words):
    code, out, err = kvplan(*words)
    assert code == 2 and "Usage: kvplan" in out and err == ""
