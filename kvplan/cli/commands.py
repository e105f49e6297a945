"""The commands and the module that registers each on the app. A run imports only the module of
the command it runs (`kvplan plan` never imports the simulator, the engine or the check code);
help and an unknown command import them all."""

from __future__ import annotations

import importlib

# in the order `kvplan --help` lists them
COMMAND_MODULES: dict[str, str] = {
    "version": "kvplan.cli.version",
    "gpus": "kvplan.cli.gpus",
    "replay": "kvplan.cli.replay",
    "plan": "kvplan.cli.plan",
    "models": "kvplan.cli.models",
    "simulate": "kvplan.cli.simulate",
    "profile": "kvplan.cli.profile",
    "explain": "kvplan.cli.explain",
    "check": "kvplan.cli.check",
    "fit": "kvplan.cli.fit",
    "bench": "kvplan.cli.bench",
    "sweep": "kvplan.cli.sweep",
}


def load_command(name: str) -> None:
    importlib.import_module(COMMAND_MODULES[name])


def load_all() -> None:
    for name in COMMAND_MODULES:
        load_command(name)


def command_of(argv: list[str]) -> str | None:
    """The command an argument list runs, if it names a known one before any other word."""
    for word in argv:
        if word.startswith("-"):
            return None     # a root option (--help, --version) comes before the command
        return word if word in COMMAND_MODULES else None
    return None
