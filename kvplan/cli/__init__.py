"""Command-line interface: each command lives in its own module and only parses, calls, renders.

`kvplan.cli.root` is the whole application with every command registered. A run imports only the
command it runs, and `kvplan plan` runs without typer at all: its one parser is `plan_args`, from
the declarations typer renders its help from (typer runs for `kvplan plan --help` only)."""

from __future__ import annotations

import contextlib
import io
import os
import signal
import sys
import threading
from collections.abc import Iterator
from typing import Any

from kvplan.errors import EXIT_BAD_INPUT, KvplanError, ReaderGone

__all__ = ["app", "fail", "main", "run_app"]


def main() -> None:
    run_app()


# an error passed on from a library (transformers lists every config class it knows) is cut here
MAX_ERROR_CHARS = 1000


def one_line(message: str, limit: int = MAX_ERROR_CHARS) -> str:
    """The message on one line (a library's multi-line error included), at most `limit` characters."""
    line = " ".join(message.split())
    return line if len(line) <= limit else line[:limit - 4].rstrip() + " ..."


def fail(message: str, code: int = EXIT_BAD_INPUT) -> None:
    """Print one line to stderr and exit."""
    print(f"kvplan: error: {one_line(message)}", file=sys.stderr)
    raise SystemExit(code)


def _tolerant_output() -> None:
    """A character the terminal's encoding lacks (a name in Japanese on an ASCII locale) prints as
    its escape instead of ending the command with UnicodeEncodeError; JSON is ASCII anyway."""
    for stream in (sys.stdout, sys.stderr):
        if isinstance(stream, io.TextIOWrapper) and stream.errors == "strict":
            stream.reconfigure(errors="backslashreplace")


_HANDLER_PID: list[int] = []    # the process that installed `_terminated` (a forked worker inherits it)


def _terminated(signum: int, frame: object) -> None:
    if os.getpid() not in _HANDLER_PID:
        # a worker forked from the command (sweep, fit): it dies as a process does, as its pool expects
        signal.signal(signum, signal.SIG_DFL)
        os.kill(os.getpid(), signum)
        return
    raise SystemExit(128 + signum)


@contextlib.contextmanager
def _terminate_like_interrupt() -> Iterator[None]:
    """SIGTERM (a CI timeout, `kill`) unwinds like Ctrl-C, so that an output being written is removed
    (`kvplan.files.atomic_output`) instead of left behind half-written."""
    if threading.current_thread() is not threading.main_thread() or \
            signal.getsignal(signal.SIGTERM) is not signal.SIG_DFL:
        yield
        return
    _HANDLER_PID[:] = [os.getpid()]
    signal.signal(signal.SIGTERM, _terminated)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_DFL)


def run_app(argv: list[str] | None = None) -> None:
    """Run the command line; the one place where errors become exit codes."""
    args = sys.argv[1:] if argv is None else list(argv)
    _tolerant_output()
    try:
        try:
            with _terminate_like_interrupt():
                _run(args)
        finally:
            sys.stdout.flush()      # here, where a failed write is ours to report, not at the interpreter's exit
    except KvplanError as error:
        fail(str(error), error.exit_code)
    except KeyboardInterrupt:
        fail("interrupted", 130)
    except (ReaderGone, BrokenPipeError):
        # the reader (`head`, a pager) stopped reading: not an error of ours, as `kvplan replay` treats it
        _discard_stdout()
        raise SystemExit(0) from None
    except OSError as error:
        if error.filename is not None:      # a file the command opened says its own name
            raise
        _discard_stdout()
        fail(f"cannot write the output: {error.strerror or error}")


def _discard_stdout() -> None:
    """What is still buffered for standard output is dropped: it can no longer be written."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())


def _run(args: list[str]) -> None:
    from kvplan.cli import commands

    command = commands.command_of(args)
    if command == "plan":
        from kvplan.cli.plan_args import run_plan_command

        code = run_plan_command(args[1:])
        if code is not None:
            raise SystemExit(code)
    if command is None:
        commands.load_all()
    else:
        commands.load_command(command)
    from kvplan.cli.root import app
    from kvplan.cli.usage import usage_error

    try:
        # not standalone: typer hands usage errors over instead of printing them in a box, and
        # returns the code of a typer.Exit (a command itself returns None)
        code = app(args=args, prog_name="kvplan", standalone_mode=False)
    except Exception as error:
        usage = usage_error(error)
        if usage is None:
            raise
        message, code = usage
        if message:
            fail(message, code)
        raise SystemExit(code) from None
    raise SystemExit(code or 0)    # as typer's standalone run ends, done or not


def __getattr__(name: str) -> Any:
    if name == "app":
        from kvplan.cli import commands

        commands.load_all()
        from kvplan.cli.root import app

        return app
    raise AttributeError(f"module 'kvplan.cli' has no attribute {name!r}")
