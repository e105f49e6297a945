"""The typer application and the one place where errors become exit codes."""

from __future__ import annotations

import sys

import typer

from kvplan.errors import EXIT_BAD_INPUT, KvplanError

app = typer.Typer(
    name="kvplan",
    help="KV-cache capacity planning, profiling and simulation, exact to vLLM 0.17.1.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


@app.callback()
def _root() -> None:
    """KV-cache capacity planning, profiling and simulation, exact to vLLM 0.17.1."""


def fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    """Print one line to stderr and exit."""
    print(f"kvplan: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def run_app(argv: list[str] | None = None) -> None:
    try:
        app(args=argv, prog_name="kvplan")
    except KvplanError as error:
        fail(str(error), error.exit_code)
    except KeyboardInterrupt:
        fail("interrupted", 130)
