"""The typer application: the root options; each command module registers itself on `app`."""

from __future__ import annotations

from typing import Any

import typer

from kvplan.cli.options import JSON_FLAG
from kvplan.semantics.releases import RELEASES


def json_option(what: str = "one JSON document") -> Any:
    """The --json option, the same on every command: stdout is then only `what`."""
    return typer.Option(False, JSON_FLAG, help=f"Print {what} on stdout and nothing else.")


JSON = json_option()

app = typer.Typer(
    name="kvplan",
    help="KV-cache capacity planning, profiling and simulation, exact to vLLM "
         f"{', '.join(list(RELEASES)[:-1])} and {list(RELEASES)[-1]} (--vllm-version).",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _print_version(given: bool) -> None:
    if given:
        from kvplan.cli.version import version_line

        print(version_line())
        raise typer.Exit()


@app.callback()
def _root(
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_print_version,
                                 help="Print kvplan's version and exit (as `kvplan version`)."),
) -> None:
    """The root options; the application's help names the releases of the release table."""
