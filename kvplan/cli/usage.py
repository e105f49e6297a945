"""typer's usage errors (an unknown option, a value it cannot convert, a missing argument) as kvplan's
one line: `kvplan: error: what is wrong (see `kvplan COMMAND --help`)`, exit 2, the form `kvplan
plan`'s own parser (`plan_args`) gives. typer itself prints them in a box of several lines."""

from __future__ import annotations

from typing import Any

from kvplan.cli.plan_args import shown_value
from kvplan.parsing import first_unknown_key


def _click_exception() -> type[Exception]:
    """click's ClickException, the base of its usage errors (typer vendors click in newer releases and
    exports only BadParameter: the base is found from it, whichever click it is)."""
    import typer

    return next(cls for cls in typer.BadParameter.__mro__ if cls.__name__ == "ClickException")


def usage_error(error: BaseException) -> tuple[str, int] | None:
    """The one line and exit code of a click error ("" when there is nothing to add: a group given
    no command has printed its help); None for any other exception."""
    if not isinstance(error, _click_exception()):
        return None
    if type(error).__name__ == "NoArgsIsHelpError":     # (typer tells it by name too)
        return "", int(getattr(error, "exit_code", 2))
    ctx = getattr(error, "ctx", None)
    command = ctx.command_path if ctx is not None else "kvplan"
    option = getattr(error, "option_name", None)
    if option is not None and hasattr(error, "possibilities"):
        # click's NoSuchOption; its own suggestions are loose ("--bogus": "--gpus"), kvplan's are difflib's
        known = _option_names(ctx)
        unknown = first_unknown_key([option], known) if known else None
        close = unknown[1] if unknown else None
        what = f"no such option: {option}" + (f"; did you mean {close}?" if close else "")
    else:
        what = _not_converted(error) or _own_words(error.format_message())  # type: ignore[attr-defined]
    return f"{what} (see `{command} --help`)", int(getattr(error, "exit_code", 2))


# the conversions typer hands to pydantic, in the words `kvplan plan`'s parser uses (`plan_args`)
_TAKES = {"int_parsing": "an integer", "int_from_float": "an integer", "float_parsing": "a number"}


def _not_converted(error: Exception) -> str | None:
    """"--max-num-seqs takes an integer, got 'abc'" for a value typer could not convert (None: another error)."""
    param, cause = getattr(error, "param", None), error.__cause__
    problems = cause.errors() if cause is not None and hasattr(cause, "errors") else []
    if param is None or not getattr(param, "opts", None) or len(problems) != 1 or problems[0]["type"] not in _TAKES:
        return None
    return f"{param.opts[0]} takes {_TAKES[problems[0]['type']]}, got {shown_value(str(problems[0]['input']))}"


def _own_words(message: str) -> str:
    what = message.rstrip(".")
    return what[:1].lower() + what[1:]


def _option_names(ctx: Any) -> list[str]:
    """The long spellings the command takes, shown or not (an old spelling still reads)."""
    if ctx is None:
        return []
    names = [name for param in ctx.command.params for name in (*param.opts, *param.secondary_opts)]
    return [name for name in names if name.startswith("--")]
