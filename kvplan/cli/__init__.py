"""Command-line interface: each command lives in its own module and only parses, calls, renders.

`kvplan.cli.root` is the whole application with every command registered. A run imports only the
command it runs, and `kvplan plan` with plain flags runs without typer at all (`plan_plain`)."""

from __future__ import annotations

import sys
from typing import Any

from kvplan.errors import EXIT_BAD_INPUT, KvplanError

__all__ = ["app", "fail", "main", "run_app"]


def main() -> None:
    run_app()


def fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    """Print one line to stderr and exit."""
    print(f"kvplan: error: {message}", file=sys.stderr)
    raise SystemExit(code)


def run_app(argv: list[str] | None = None) -> None:
    """Run the command line; the one place where errors become exit codes."""
    args = sys.argv[1:] if argv is None else list(argv)
    try:
        _run(args)
    except KvplanError as error:
        fail(str(error), error.exit_code)
    except KeyboardInterrupt:
        fail("interrupted", 130)


def _run(args: list[str]) -> None:
    from kvplan.cli import commands

    command = commands.command_of(args)
    if command == "plan":
        from kvplan.cli.plan_plain import run_plain

        code = run_plain(args[1:])
        if code is not None:
            raise SystemExit(code)
    if command is None:
        commands.load_all()
    else:
        commands.load_command(command)
    from kvplan.cli.root import app

    app(args=args, prog_name="kvplan")


def __getattr__(name: str) -> Any:
    if name == "app":
        from kvplan.cli import commands

        commands.load_all()
        from kvplan.cli.root import app

        return app
    raise AttributeError(f"module 'kvplan.cli' has no attribute {name!r}")
