"""The results table of `kvplan sweep`: Parquet (pyarrow, the `kvplan[parquet]` extra), CSV or JSON
Lines, by the output's suffix; one column per field of `SweepRow`, typed.

While a sweep runs, each row is appended to a journal beside the output (`.NAME.journal.jsonl`),
so that an interrupted sweep loses nothing; the table is written once at the end, through a
temporary file renamed into place, and the journal removed. A later sweep to the same output
reads both and skips the cells they hold."""

from __future__ import annotations

import contextlib
import csv
import io
import json
import math
import os
import stat
import types
import typing
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

from kvplan.errors import KvplanError
from kvplan.files import atomic_output, read_input_bytes
from kvplan.limits import KIB, MAX_INPUT_BYTES
from kvplan.usecases.sweep.cells import COLUMNS, SweepRow

FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}
PARQUET_EXTRA = "pip install -e '.[parquet]' in kvplan's clone"
Record = dict[str, Any]


def _column_types() -> dict[str, type]:
    """Each column's scalar type (int, float, str or bool), from SweepRow's annotations."""
    types_of = {}
    for name, hint in typing.get_type_hints(SweepRow).items():
        args = [arg for arg in typing.get_args(hint) if arg is not types.NoneType] if typing.get_args(hint) else [hint]
        types_of[name] = args[0]
    return types_of


COLUMN_TYPES = _column_types()


def table_format(path: Path) -> str:
    kind = FORMATS.get(path.suffix.lower())
    if kind is None:
        raise KvplanError(f"-o {path}: name the format by the suffix: .parquet, .csv or .jsonl")
    if kind == "parquet":
        _pyarrow()
    return kind


def _pyarrow() -> Any:
    try:
        import pyarrow
        import pyarrow.parquet
    except ImportError:
        raise KvplanError(f"Parquet output needs pyarrow, which is not installed: run `{PARQUET_EXTRA}`, or write "
                          "-o results.csv or results.jsonl") from None
    return pyarrow


def record(row: SweepRow) -> Record:
    return asdict(row)


def _typed(value: Any, kind: type, column: str, shown: str) -> Any:
    """A value read back from a file, as its column's type (CSV gives text); a list, an object or
    a number that is not finite (NaN, infinity: never in a table kvplan writes) is refused."""
    if value is None or value == "":
        return None
    try:
        if isinstance(value, list | dict | bytes):
            raise ValueError(value)
        if kind is bool:
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("true", "false"):
                return str(value).lower() == "true"
            raise ValueError(value)
        if kind is int:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError(value)
            return int(value)
        if kind is float:
            number = float(value)
            if not math.isfinite(number):
                raise ValueError(value)
            return number
        return str(value)
    except (TypeError, ValueError, OverflowError):
        raise KvplanError(f"{shown}: column {column}: {_short(value)} is not a {_KIND_NAMES[kind]}; not a results "
                          f"table of kvplan's sweep: {_MOVE_AWAY}") from None


_KIND_NAMES = {bool: "boolean", int: "whole number", float: "finite number", str: "text"}
_MOVE_AWAY = "give another -o, or move that file away"


def _short(value: Any) -> str:
    try:
        text = json.dumps(value, ensure_ascii=True)
    except (TypeError, ValueError, RecursionError):
        text = repr(value)
    return text if len(text) <= 40 else text[:36] + " ..."


_TABLE = ("a results table", _MOVE_AWAY)
_JOURNAL_AWAY = "move it away (its cells then run again)"


def _checked(records: Iterable[Any], shown: str, kind: tuple[str, str] = _TABLE) -> list[Record]:
    """Rows read back, each an object with the columns of `SweepRow` and values of their types;
    `kind` names the file (a table, a journal) and what to do with one that is not."""
    what, away = kind
    rows = []
    for number, raw in enumerate(records, start=1):
        if not isinstance(raw, dict):
            raise KvplanError(f"{shown}: row {number:,} is {_short(raw)}, not a row object; not {what} of kvplan's "
                              f"sweep: {away}")
        if set(raw) != set(COLUMNS):
            raise KvplanError(f"{shown}: not {what} of this kvplan's sweep (its columns differ); {away}")
        try:
            rows.append({column: _typed(raw[column], COLUMN_TYPES[column], column, shown) for column in COLUMNS})
        except KvplanError as error:
            raise KvplanError(str(error).replace(f"a results table of kvplan's sweep: {_MOVE_AWAY}",
                                                 f"{what} of kvplan's sweep: {away}")) from None
    return rows


# One row as a file holds it (about 80 columns, an error message included) is a few KiB; a resumed
# table or journal may hold at most this much per cell of the grid, plus the rows of cells a grid
# no longer has (kept): reading stops there instead of filling the memory (a link to /dev/zero).
ROW_BYTES = 256 * KIB
KEPT_ROWS = 1024


def resume_limit(num_cells: int) -> int:
    """The most bytes a resumed table or journal of a grid of `num_cells` cells is read to."""
    return min(MAX_INPUT_BYTES, ROW_BYTES * (num_cells + KEPT_ROWS))


def read_table(path: Path, limit: int = MAX_INPUT_BYTES) -> list[Record]:
    """The rows of an existing results table, typed; refuses a file that is not one, a device, a
    FIFO or a file larger than `limit` (`resume_limit` of the grid) before reading it."""
    kind = table_format(path)
    shown = str(path)
    data = read_input_bytes(path, shown, limit)
    if kind == "parquet":
        pyarrow = _pyarrow()
        try:
            table = pyarrow.parquet.read_table(pyarrow.BufferReader(data))
            if set(table.column_names) != set(COLUMNS):
                return _checked([dict.fromkeys(table.column_names)], shown)
            records = table.to_pylist()
        except (pyarrow.ArrowException, OSError, ValueError, TypeError) as error:
            raise KvplanError(f"{shown}: not a Parquet table of kvplan's sweep ({' '.join(str(error).split())[:200]}); "
                              f"{_MOVE_AWAY}") from None
        return _checked(records, shown)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise KvplanError(f"{shown}: not UTF-8 text (byte {error.start:,}); not a results table of kvplan's sweep: "
                          f"{_MOVE_AWAY}") from None
    if kind == "csv":
        return _csv_rows(text, shown)
    return _checked(_json_lines(text, shown), shown)


def _csv_rows(text: str, shown: str) -> list[Record]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        if reader.fieldnames is not None and set(reader.fieldnames) != set(COLUMNS):
            return _checked([dict.fromkeys(reader.fieldnames)], shown)
        return _checked(list(reader), shown)
    except csv.Error as error:    # a NUL byte, a field over csv's 128 KiB limit
        raise KvplanError(f"{shown}: line {reader.line_num:,}: not CSV as kvplan's sweep writes it ({error}); "
                          f"{_MOVE_AWAY}") from None


class _NotFinite(ValueError):
    pass


def _no_constant(name: str) -> Any:
    raise _NotFinite(name)


NOT_JSON = object()


def _json_row(line: str, where: str, away: str = _MOVE_AWAY) -> Any:
    """One line of JSON Lines (NOT_JSON: not JSON at all); NaN, Infinity, too-deep nesting and
    numbers of thousands of digits are refused as one line."""
    try:
        return json.loads(line, parse_constant=_no_constant)
    except json.JSONDecodeError:
        return NOT_JSON
    except _NotFinite as constant:
        raise KvplanError(f"{where} holds {constant}, which is not a number kvplan writes (NaN or infinity); "
                          f"{away}") from None
    except RecursionError:
        raise KvplanError(f"{where} nests too deeply to be a row of kvplan's sweep; {away}") from None
    except ValueError:
        raise KvplanError(f"{where}: a number of more than 4,300 digits; not a row of kvplan's sweep: {away}") from None


def _json_lines(text: str, shown: str) -> Iterator[Any]:
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        value = _json_row(line, f"{shown}: line {number:,}")
        if value is NOT_JSON:
            raise KvplanError(f"{shown}: line {number:,} is not JSON; not a results table of kvplan's sweep: "
                              f"{_MOVE_AWAY}")
        yield value


def _finite(row: Record) -> Record:
    """The row with every non-finite number as None: a table holds valid JSON and CSV only."""
    return {key: None if isinstance(value, float) and not math.isfinite(value) else value
            for key, value in row.items()}


def write_table(path: Path, rows: list[Record]) -> None:
    """All rows at once, through `atomic_output`: the table replaces `path` only when complete."""
    kind = table_format(path)
    try:
        with atomic_output(path) as stream:
            rows = [_finite(row) for row in rows]
            if kind == "parquet":
                pyarrow = _pyarrow()
                arrow = {int: pyarrow.int64(), float: pyarrow.float64(), str: pyarrow.string(), bool: pyarrow.bool_()}
                schema = pyarrow.schema([(column, arrow[COLUMN_TYPES[column]]) for column in COLUMNS])
                # Parquet is bytes: written to the text stream's own binary file
                pyarrow.parquet.write_table(pyarrow.Table.from_pylist(rows, schema=schema), stream.buffer)
            elif kind == "csv":
                writer = csv.DictWriter(stream, fieldnames=COLUMNS, lineterminator="\n")
                writer.writeheader()
                for row in rows:
                    writer.writerow({k: _csv_text(v) for k, v in row.items()})
            else:
                for row in rows:
                    stream.write(json.dumps(row, ensure_ascii=False, allow_nan=False) + "\n")
    except OSError as error:
        raise KvplanError(f"cannot write {path}: {error.strerror}") from None


def _csv_text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return repr(value) if isinstance(value, float) else str(value)


# ---------------------------------------------------------------------------- the journal


def journal_path(output: Path) -> Path:
    return output.with_name(f".{output.name}.journal.jsonl")


def read_journal(output: Path, limit: int = MAX_INPUT_BYTES) -> list[Record]:
    """The rows of the journal an interrupted sweep left beside `output` ([] when there is none).
    Its last line may be cut short (the row being written when the sweep was stopped) and is then
    skipped; any other damage is one line (exit 2), as is a journal that is not a plain file."""
    path = journal_path(output)
    shown = str(path)
    if not os.path.lexists(path):
        return []
    _refuse_link(path, shown)
    data = read_input_bytes(path, shown, limit)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as error:
        raise KvplanError(f"{shown}: not UTF-8 text (byte {error.start:,}); not a journal of kvplan's sweep: "
                          f"{_JOURNAL_AWAY}") from None
    lines = text.split("\n")
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        value = _json_row(line, f"{shown}: line {number:,}", _JOURNAL_AWAY)
        if value is NOT_JSON:
            if number == len(lines):
                continue   # the line being written when the sweep was stopped (no newline after it)
            raise KvplanError(f"{shown}: line {number:,} is not JSON; not a journal of kvplan's sweep: {_JOURNAL_AWAY}")
        records.append(value)
    return _checked(records, shown, ("a journal", _JOURNAL_AWAY))


def _refuse_link(path: Path, shown: str) -> None:
    """The journal is kvplan's own file: a symbolic or hard link to it would append rows to a file
    someone else holds (a grid, a workload)."""
    info = os.lstat(path)
    if stat.S_ISLNK(info.st_mode):
        raise KvplanError(f"{shown}: is a symbolic link, not the journal kvplan writes; {_JOURNAL_AWAY}")
    if stat.S_ISREG(info.st_mode) and info.st_nlink > 1:
        raise KvplanError(f"{shown}: has other names (a hard link), not the journal kvplan writes; {_JOURNAL_AWAY}")


@contextlib.contextmanager
def journal(output: Path) -> Iterator[TextIO]:
    """Append-only, one JSON row per line, flushed as each row arrives. Opened without following a
    link and without blocking, and refused unless it is a plain file of its own."""
    path = journal_path(output)
    shown = str(path)
    if os.path.lexists(path):
        _refuse_link(path, shown)
    try:
        handle = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC,
                         0o666)
    except OSError as error:
        raise KvplanError(f"cannot write {path}: {error.strerror}") from None
    info = os.fstat(handle)
    if not stat.S_ISREG(info.st_mode) or info.st_nlink > 1:
        os.close(handle)
        raise KvplanError(f"{shown}: not a plain file of its own, not the journal kvplan writes; {_JOURNAL_AWAY}")
    with os.fdopen(handle, "a", encoding="utf-8") as stream:
        yield stream


def append(stream: TextIO, row: SweepRow) -> None:
    try:
        stream.write(json.dumps(_finite(record(row)), ensure_ascii=False, allow_nan=False) + "\n")
        stream.flush()
    except OSError as error:
        raise KvplanError(f"cannot write the journal of the sweep ({error.strerror or error}); the rows so far are "
                          "in it: free some space and run the sweep again to resume") from None


def merged(previous: list[Record], new: list[Record], order: dict[str, int]) -> list[Record]:
    """One row per cell id, the newest winning, in the grid's order (rows of cells the grid no
    longer has keep their place after them)."""
    by_id: dict[str, Record] = {}
    for row in (*previous, *new):
        by_id.pop(row["cell_id"], None)
        by_id[row["cell_id"]] = row
    rows = list(by_id.values())
    return sorted(rows, key=lambda row: (order.get(row["cell_id"], len(order)),))
