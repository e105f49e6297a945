"""Files at the edge: reading an input without surprises, telling whether two paths are one file,
and writing an output so that nothing is ever half-written or lost.

    read_input_text(path, shown)     a regular file of at most MAX_INPUT_BYTES, UTF-8 (exit 2 otherwise)
    parse_json(text, shown)          JSON, with too-deep nesting and absurd numbers as one line (exit 2)
    parse_toml(text, shown)          the same for TOML
    same_file(a, b)                  one file under two names (the path, a symlink, a hard link)
    output_refusal(path, inputs)     why a command may not write `path` (a directory, a device, a
                                     FIFO, a socket, one of its inputs by any name, a place where no
                                     file can be created), or None: every command's outputs, journals
                                     and temporary files are checked with it before any work
    atomic_output(path)              a text stream to a temporary file beside `path`, renamed into
                                     place when the block ends without error, removed otherwise; a
                                     write that fails all the same is one line (exit 2)
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
import tempfile
import tomllib
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, TextIO

from kvplan.errors import KvplanError
from kvplan.limits import MAX_INPUT_BYTES


def read_input_bytes(path: Path, shown: str, limit: int = MAX_INPUT_BYTES) -> bytes:
    """The bytes of a regular file; devices, pipes and oversized files are refused before reading.
    The file is opened without blocking (a FIFO would otherwise wait for a writer forever) and its
    type and size are those of the file opened, not of a name that may have changed since."""
    try:
        handle = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise KvplanError(f"{shown}: file not found") from None
    except OSError as error:
        raise KvplanError(f"{shown}: cannot read it ({error.strerror or error})") from None
    except ValueError as error:  # a path holding a NUL character
        raise KvplanError(f"{shown}: cannot read it ({error})") from None
    try:
        info = os.fstat(handle)
        if stat.S_ISDIR(info.st_mode):
            raise KvplanError(f"{shown}: is a directory; give a file")
        if not stat.S_ISREG(info.st_mode):
            raise KvplanError(f"{shown}: not a regular file (a device, pipe or socket); give a file")
        if info.st_size > limit:
            raise KvplanError(f"{shown}: {info.st_size:,} bytes, more than the {_size(limit)} kvplan reads")
        with os.fdopen(handle, "rb", closefd=False) as stream:
            data = stream.read(limit + 1)
    except OSError as error:
        raise KvplanError(f"{shown}: cannot read it ({error.strerror or error})") from None
    finally:
        os.close(handle)
    if len(data) > limit:
        raise KvplanError(f"{shown}: more than the {_size(limit)} kvplan reads")
    return data


def _size(limit: int) -> str:
    return f"{limit >> 30} GiB" if limit >= 1 << 30 else f"{limit >> 20:,} MiB" if limit >= 1 << 20 else \
        f"{limit:,} bytes"


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


def output_refusal(path: Path, inputs: Iterable[Path], shown: Callable[[Path], str] = str, *,
                   create: bool = True) -> str | None:
    """Why a command may not write `path`, or None. An existing directory, device, FIFO or socket
    is refused (writing would block, fill a device, or replace the node with a file), as is any of
    the command's `inputs` under any name (the path, a symlink, a hard link: one inode; a file in
    an input directory, a model's), and a place where `atomic_output` cannot create its temporary
    file (a read-only or virtual file system, a name too long; `create` False leaves that test
    out, for a caller that creates the directory first): all of it before any work."""
    try:
        info = path.stat()          # follows a symlink: a link to /dev/zero is a device
    except (FileNotFoundError, NotADirectoryError):
        info = None                 # a new file (or a dangling link, which the rename replaces)
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            return "the name is longer than the file system allows; choose a shorter one"
        return f"cannot inspect it ({error.strerror or error})"
    except ValueError as error:
        return f"cannot write it ({error})"
    if info is not None and stat.S_ISDIR(info.st_mode):
        return "is a directory; give a file path"
    if info is not None and not stat.S_ISREG(info.st_mode):
        return "is a device, a FIFO or a socket, not a regular file; give a file path"
    for source in inputs:
        if source.is_dir():
            if info is not None and inside(path, source):
                return f"that is a file in {shown(source)}, which this command reads; choose another output file"
        elif same_file(path, source):
            what = "this command reads that file" if str(path) == str(source) else \
                f"that is the same file as {shown(source)}, which this command reads"
            return f"{what}; choose another output file"
    return creation_refusal(path) if create else None


def creation_refusal(path: Path) -> str | None:
    """Create and remove the temporary file `atomic_output` would create: whatever stops it (a
    read-only place such as /proc or /sys, a name over the file system's limit) is known now."""
    directory = path.parent if str(path.parent) else Path(".")
    try:
        handle, temporary = tempfile.mkstemp(prefix=_TEMPORARY_PREFIX.format(path.name), suffix=_TEMPORARY_SUFFIX,
                                             dir=directory)
    except OSError as error:
        if error.errno == errno.ENAMETOOLONG:
            return "the name (with the temporary file's 16 characters more) is longer than the file system allows; " \
                   "choose a shorter one"
        return f"no file can be created there ({error.strerror or error}); choose another output file"
    os.close(handle)
    Path(temporary).unlink(missing_ok=True)
    return None


_TEMPORARY_PREFIX = ".{}."
_TEMPORARY_SUFFIX = ".partial"
# errors of a write itself (the disk full, a quota, a file too large): the output cannot be written
_WRITE_ERRORS = frozenset({errno.ENOSPC, errno.EDQUOT, errno.EFBIG, errno.EIO, errno.EROFS, errno.EPERM,
                           errno.EACCES})


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
    replaces `path` only when the block ends without an error (Ctrl-C included). When the file
    system refuses (no space, no permission, read-only), the error is one line (exit 2)."""
    directory = path.parent if str(path.parent) else Path(".")
    try:
        handle, temporary = tempfile.mkstemp(prefix=_TEMPORARY_PREFIX.format(path.name), suffix=_TEMPORARY_SUFFIX,
                                             dir=directory)
    except OSError as error:
        raise _cannot_write(path, error) from None
    try:
        with os.fdopen(handle, "w", encoding="utf-8", buffering=buffering) as stream:
            yield stream
        os.chmod(temporary, _mode_for(path))
        os.replace(temporary, path)
    except OSError as error:
        Path(temporary).unlink(missing_ok=True)
        if error.errno in _WRITE_ERRORS or error.errno == errno.ENAMETOOLONG:
            raise _cannot_write(path, error) from None
        raise
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _cannot_write(path: Path, error: OSError) -> KvplanError:
    return KvplanError(f"cannot write {path} ({error.strerror or error}); nothing was written, choose another "
                       "output file")


def write_output_text(path: Path, text: str) -> None:
    with atomic_output(path) as stream:
        stream.write(text)
