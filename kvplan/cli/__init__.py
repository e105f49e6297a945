"""Command-line interface: each command lives in its own module and only parses, calls, renders."""

from __future__ import annotations

from kvplan.cli import commands as _commands  # noqa: F401  (registers the commands)
from kvplan.cli.app import app, run_app

__all__ = ["app", "main"]


def main() -> None:
    run_app()
