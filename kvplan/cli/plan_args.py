"""`kvplan plan`'s command line, read without typer: the one parser of `plan`.

typer validates every value through pydantic, whose import alone takes longer than the plan, and
typer itself is too slow even without it: with typer's pydantic coercion replaced by a plain
int()/float()/str() (an experiment, issue 19), the plan parsed by typer took a median of 377 ms
beside this parser's 235 ms (`python -c pass` 39 ms; 7 cold runs each, back to back), over the
300 ms of `make bench` (benchmarks/targets.py).

The words are read from the declarations typer renders `kvplan plan --help` from
(`kvplan.cli.options.engine_flags`, `PROFILE`, `--json`), with the conversions typer's path made
(int(), float(), then each setting's own reader: sizes, lengths, ranges) and the hidden old spellings
with their deprecation line (`read_engine_options`). A word is `--flag VALUE`, `--flag=VALUE` or
`-mVALUE`, a switch (`--json`, `--no-enable-prefix-caching`), an `--assert-*` quick assertion
(`kvplan.usecases.check.quick`), `--` (the rest are words), or the model (`vllm serve MODEL`).
What is wrong is one line (`kvplan: error: ...`, exit 2); help is typer's (`kvplan.cli.plan`)."""

from __future__ import annotations

import types
from collections.abc import Sequence
from dataclasses import dataclass
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
from kvplan.errors import KvplanError
from kvplan.hub import hub_access

if TYPE_CHECKING:
    from kvplan.usecases.check.assertions import Assertion

HELP = ("-h", "--help")                 # the root's help_option_names (`kvplan.cli.root`)
ASSERT = "--assert-"                    # `kvplan.usecases.check.quick.PREFIX`, without importing the check code
ROOT_OPTIONS = ("--version",)           # kvplan's own options, which a command does not take
SEE_HELP = "(see `kvplan plan --help`)"
SHOWN_CHARS = 40                        # of a value that is not a number, in its message

PROFILE = Flag(
    Path | None, None, ("--profile",), metavar="P.json",
    help="Size the cache from a saved profile's measured terms (`kvplan profile --save`, `kvplan explain LOG "
    "--save-profile`) at the settings given here: another --gpu-memory-utilization, --max-model-len or "
    "--kv-cache-dtype, as if the GPU had been measured. The rest of the settings are the profile's.")

# plan's own options beside the engine settings (`kvplan.cli.plan` declares the same to typer)
OWN = {"profile": PROFILE, "json_output": Flag(bool, False, (JSON_FLAG,))}


@dataclass(frozen=True)
class PlanArgs:
    """One `kvplan plan` command line, read."""

    engine: EngineOptions
    json_output: bool = False
    assertions: tuple[Assertion, ...] = ()
    profile: Path | None = None


def run_plan_command(args: Sequence[str]) -> int | None:
    """Run `kvplan plan ARGS`; its exit code, or None when ARGS ask for the help (typer renders it)."""
    from kvplan.cli.plan_run import run_plan

    parsed = parse_plan_args(args)
    if parsed is None:
        return None
    engine = parsed.engine
    with hub_access(engine_access(engine)):
        return run_plan(engine, parsed.json_output, parsed.assertions, profile=parsed.profile,
                        model_given=engine.model is not None)


def parse_plan_args(args: Sequence[str]) -> PlanArgs | None:
    """The command line read; None when it asks for the help (`-h` or `--help` anywhere before `--`,
    as typer's eager help option); bad input raises KvplanError."""
    words = list(args)
    if any(word in HELP for word in words[:words.index("--") if "--" in words else len(words)]):
        return None
    flags = {**engine_flags(PLANNING), **OWN}
    spellings = _spellings(flags)
    values: dict[str, Any] = {}
    models: list[str] = []
    assertions: list[Assertion] = []
    index, only_words = 0, False
    while index < len(words):
        word = words[index]
        index += 1
        if only_words or not word.startswith("-") or word == "-":
            models.append(word)
            continue
        if word == "--":
            only_words = True
            continue
        if word.startswith(ASSERT):
            from kvplan.usecases.check.quick import read_quick_assert

            assertion, index = read_quick_assert(words, index - 1, "plan")
            assertions.append(assertion)
            continue
        spelling, value = _split(word, spellings, flags)
        name, switch = spellings[spelling]
        if switch is None:
            given, index = _value_of(spelling, value, flags[name], words, index, spellings)
        elif value is None:
            given = switch
        else:
            pair = next(decl for decl in flags[name].decls if spelling in decl.split("/"))
            raise KvplanError(f"{spelling} takes no value, got {word!r}: give "
                              + (" or ".join(pair.split("/")) if "/" in pair else f"{spelling} alone"))
        values[name] = given        # a flag given again overrides, as in `vllm serve` (argparse) and typer
    if len(models) > 1:
        raise KvplanError(f"unexpected argument: {models[1]} {SEE_HELP}")
    engine = read_engine_options({name: values.get(name, flag.default) for name, flag in flags.items()
                                  if name not in OWN})
    return PlanArgs(fold_model_argument(engine, models[0] if models else None), bool(values.get("json_output")),
                    tuple(assertions), values.get("profile"))


def _value_of(spelling: str, value: str | None, flag: Flag, words: list[str], index: int,
              spellings: dict[str, tuple[str, bool | None]]) -> tuple[Any, int]:
    """The value of an option that takes one (given with it, else the next word, which is not
    another option: `--model --json` is a mistake), as the declared type; the index after it."""
    if value is None:
        if index == len(words) or words[index] in spellings or words[index] in HELP or words[index].startswith(ASSERT):
            raise KvplanError(f"{spelling} needs a value, e.g. {spelling} {flag.metavar or 'VALUE'}")
        value = words[index]
        index += 1
    return _converted(value, flag, spelling), index


def _spellings(flags: dict[str, Flag]) -> dict[str, tuple[str, bool | None]]:
    """Each spelling -> (its flag's name, the value a switch gives; None: the flag takes a value)."""
    spellings: dict[str, tuple[str, bool | None]] = {}
    for name, flag in flags.items():
        for decl in flag.decls:
            if _value_type(flag) is bool:
                positive, _, negative = decl.partition("/")
                spellings[positive] = (name, True)
                if negative:
                    spellings[negative] = (name, False)
            else:
                spellings[decl] = (name, None)
    return spellings


def _split(word: str, spellings: dict[str, tuple[str, bool | None]], flags: dict[str, Flag]) -> tuple[str, str | None]:
    """(the spelling, the value given with it: `--flag=VALUE`, `-mVALUE`; None: none) of an option word."""
    if word in spellings:
        return word, None
    spelling, _, value = word.partition("=")
    if spelling in spellings:
        return spelling, value
    if not word.startswith("--") and spellings.get(word[:2], ("", True))[1] is None:
        return word[:2], word[2:]
    if spelling in ROOT_OPTIONS:
        raise KvplanError(f"{spelling} is an option of kvplan itself, not of plan: give `kvplan {spelling}`")
    from kvplan.parsing import first_unknown_key

    shown = [decl for decl, (name, _) in spellings.items() if not flags[name].hidden]
    _, close = first_unknown_key([spelling], shown) or (spelling, None)
    raise KvplanError(f"no such option: {spelling}" + (f"; did you mean {close}?" if close else "")
                      + f" {SEE_HELP}")


def _value_type(flag: Flag) -> type:
    annotation = flag.annotation
    if get_origin(annotation) in (Union, types.UnionType):
        annotation = next(arg for arg in get_args(annotation) if arg is not type(None))
    return annotation


def _converted(text: str, flag: Flag, spelling: str) -> Any:
    """The value typer's path handed to the flag's reader: the text as the declared type."""
    kind = _value_type(flag)
    if kind is Path:
        return Path(text)
    if kind in (int, float):
        try:
            return kind(text)
        except ValueError:
            what = "an integer" if kind is int else "a number"
            raise KvplanError(f"{spelling} takes {what}, got {shown_value(text)}") from None
    return text


def shown_value(text: str) -> str:
    """A flag's value that is not a number, quoted for its message (typer's commands say it alike, `usage`)."""
    return repr(text) if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]!r}... ({len(text)} characters)"
