"""The error types that map to kvplan's exit codes, in one place."""

from __future__ import annotations

EXIT_OK = 0
EXIT_FINDING = 1
EXIT_BAD_INPUT = 2
EXIT_STALLED = 3


class KvplanError(Exception):
    """A user mistake: bad input, unknown model, missing file. Exit code 2, one line."""

    exit_code = EXIT_BAD_INPUT


class ReaderGone(Exception):
    """Standard output's reader stopped reading (`kvplan gpus | head -1`, a pager closed): the command ends
    quietly, exit 0. Not an OSError, which typer would end with exit 1, kvplan's code for a finding."""


class ConfigRejected(KvplanError):
    """vLLM would refuse these arguments before sizing anything (exit code 2), in vLLM's words."""


class DoesNotFitError(KvplanError):
    """A configuration that does not fit, found while preparing another command's input. Exit 1."""

    exit_code = EXIT_FINDING


class MissingExtraError(KvplanError):
    """A command needs the `profile` extra (torch, transformers) and it is not installed."""

    def __init__(self, what: str, missing: str) -> None:
        super().__init__(
            f"{what} needs {missing}, which is not installed: "
            "run `pip install -e '.[profile]'` in kvplan's clone (or `make setup` there)"
        )


def require_profile_extra(what: str) -> None:
    """Fail with one line when torch or transformers cannot be imported."""
    import importlib.util

    for module in ("torch", "transformers"):
        if importlib.util.find_spec(module) is None:
            raise MissingExtraError(what, module)
