"""Files at the edge: reading an input without surprises, telling whether two paths are one file,
and writing an output so that nothing is ever half-written or lost.

    read_input_text(path, shown)     a regular file of at most MAX_INPUT_BYTES, UTF-8 (exit 2 otherwise)
    parse_json(text, shown)          JSON, with too-deep nesting and absurd numbers as one line (exit 2)
    parse_toml(text, shown)          the same for TOML
    same_file(a, b)                  one file under two names (the path, a symlink, a hard link)
    atomic_output(path)              a text stream to a temporary file beside `path`, renamed into
                                     place when the block ends without error, removed otherwise
"""

from __future__ import annotations

import contextlib
import json
import os
import stat
import tempfile
import tomllib
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TextIO

from kvplan.errors import KvplanError
from kvplan.limits import MAX_INPUT_BYTES


def read_input_bytes(path: Path, shown: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of a regular file; devices, pipes and oversized files are refused before reading."""
    try:
        info = path.stat()
        if stat.S_ISDIR(info.st_mode):
            raise KvplanError(f"{shown}: is a directory; give a file")
        if not stat.S_ISREG(info.st_mode):
            raise KvplanError(f"{shown}: not a regular file (a device, pipe or socket); give a file")
        if info.st_size > limit:
            raise KvplanError(f"{shown}: {info.st_size:,} bytes, more than the {limit >> 30} GiB kvplan reads")
        with path.open("rb") as stream:
            data = stream.read(limit + 1)
    except FileNotFoundError:
        raise KvplanError(f"{shown}: file not found") from None
    except OSError as error:
        raise KvplanError(f"{shown}: cannot read it ({error.strerror or error})") from None
    except ValueError as error:  # a path holding a NUL character
        raise KvplanError(f"{shown}: cannot read it ({error})") from None
    if len(data) > limit:
        raise KvplanError(f"{shown}: more than the {limit >> 30} GiB kvplan reads")
    return data


def read_input_text(path: Path, shown: str, limit: int = MAX_INPUT_BYTES) -> str:
    data = read_input_bytes(path, shown, limit)
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise KvplanError(f"{shown}: not UTF-8 text (byte {error.start:,} cannot be read)") from None


def parse_json(text: str, shown: str, hint: str = "") -> Any:
    """JSON text -> data; `hint` follows the one-line error (what the file should hold)."""
    after = f"; {hint}" if hint else ""
    try:
        return json.loads(text)
    except json.JSONDecodeError as error:
        raise KvplanError(f"{shown}: not valid JSON (line {error.lineno}, column {error.colno}: {error.msg}){after}") \
            from None
    except RecursionError:
        raise KvplanError(f"{shown}: nests too deeply to be a kvplan input") from None
    except ValueError:  # the only other ValueError: an integer of thousands of digits
        raise KvplanError(f"{shown}: not valid JSON (a number of more than 4,300 digits){after}") from None


def parse_toml(text: str, shown: str) -> Any:
    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as error:
        raise KvplanError(f"{shown}: not valid TOML ({error})") from None
    except RecursionError:
        raise KvplanError(f"{shown}: nests too deeply to be a kvplan input") from None
    except ValueError:
        raise KvplanError(f"{shown}: not valid TOML (a number of more than 4,300 digits)") from None


def load_json(path: Path, shown: str) -> Any:
    return parse_json(read_input_text(path, shown), shown)


# ---------------------------------------------------------------------------- outputs


def same_file(a: Path, b: Path) -> bool:
    """True when `a` and `b` name one file: equal after resolving symlinks, or one inode (a hard link)."""
    try:
        if a.resolve() == b.resolve():
            return True
        return a.exists() and b.exists() and os.path.samefile(a, b)
    except (OSError, ValueError, RuntimeError):
        return False


def inside(path: Path, directory: Path) -> bool:
    """True when `path` lies in `directory` (or below), symlinks resolved."""
    try:
        return path.resolve().is_relative_to(directory.resolve())
    except (OSError, ValueError, RuntimeError):
        return False


def _mode_for(path: Path) -> int:
    """The permissions the new file gets: the old file's, else what open() would give."""
    try:
        return stat.S_IMODE(path.stat().st_mode)
    except OSError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask


@contextlib.contextmanager
def atomic_output(path: Path, *, buffering: int = -1) -> Iterator[TextIO]:
    """Write `path` all at once: the block writes a temporary file in the same directory, which
    replaces `path` only when the block ends without an error (Ctrl-C included)."""
    directory = path.parent if str(path.parent) else Path(".")
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".partial", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8", buffering=buffering) as stream:
            yield stream
        os.chmod(temporary, _mode_for(path))
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def write_output_text(path: Path, text: str) -> None:
    with atomic_output(path) as stream:
        stream.write(text)
