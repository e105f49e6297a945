"""Output files, checked before the work starts: nothing the user gave is overwritten or lost.

    prepare_outputs([("-o", path), ("--timeline", path)], inputs)

is the one check every command makes of every file it will write (outputs, reports, saved
profiles, the sweep's journal): it refuses (exit 2, one line) an output that is a directory, a
device, a FIFO or a socket, that names a file the command reads (the same path, a symlink to it, a
hard link of it, or a file inside a model directory it reads), that names the same file as another
output, or where no file can be created (`kvplan.files.output_refusal`); it creates missing parent
directories and checks that they are writable. The files themselves are then written with
`kvplan.files.atomic_output`: a temporary file beside the target, renamed into place only when the
work succeeded."""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

from kvplan.errors import KvplanError
from kvplan.files import creation_refusal, output_refusal, same_file
from kvplan.schema import text_problem
from kvplan.sources.models import local_model_path


def _shown(path: Path) -> str:
    text = str(path)
    return text if text_problem(text) is None else ascii(text)


def model_inputs(models: Iterable[str | None]) -> tuple[Path, ...]:
    """The files and directories on disk that these `--model` values name (hub ids name none)."""
    return tuple(path for path in (local_model_path(model) for model in models if model) if path is not None)


def prepare_outputs(outputs: Sequence[tuple[str, Path | None]], inputs: Iterable[Path]) -> None:
    given = [(flag, path) for flag, path in outputs if path is not None]
    read = [path for path in inputs if path is not None]
    for flag, path in given:
        problem = text_problem(str(path))
        if problem is not None:
            raise KvplanError(f"{flag} {_shown(path)}: the path {problem}; choose a plainer file name")
        refusal = output_refusal(path, read, _shown, create=False)
        if refusal is not None:
            raise KvplanError(f"{flag} {_shown(path)}: {refusal}")
    for index, (flag, path) in enumerate(given):
        for other_flag, other in given[index + 1:]:
            if same_file(path, other):
                raise KvplanError(f"{flag} and {other_flag} name one file ({_shown(path)}); give each its own file")
    for flag, path in given:
        _writable_directory(flag, path)
        refusal = creation_refusal(path)
        if refusal is not None:
            raise KvplanError(f"{flag} {_shown(path)}: {refusal}")


def _writable_directory(flag: str, path: Path) -> None:
    directory = path.parent if str(path.parent) else Path(".")
    try:
        directory.mkdir(parents=True, exist_ok=True)
    except FileExistsError:
        raise KvplanError(f"{flag} {_shown(path)}: {_shown(directory)} is not a directory") from None
    except OSError as error:
        raise KvplanError(f"{flag} {_shown(path)}: cannot create {_shown(directory)} ({error.strerror})") from None
    if not os.access(directory, os.W_OK | os.X_OK):
        raise KvplanError(f"{flag} {_shown(path)}: cannot write in {_shown(directory)} (permission denied)")
