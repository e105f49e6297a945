"""The results table of `kvplan sweep`: Parquet (pyarrow, the `kvplan[parquet]` extra), CSV or JSON
Lines, by the output's suffix; one column per field of `SweepRow`, typed.

While a sweep runs, each row is appended to a journal beside the output (`.NAME.journal.jsonl`),
so that an interrupted sweep loses nothing; the table is written once at the end, through a
temporary file renamed into place, and the journal removed. A later sweep to the same output
reads both and skips the cells they hold."""

from __future__ import annotations

import contextlib
import csv
import json
import types
import typing
from collections.abc import Iterable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any, TextIO

from kvplan.errors import KvplanError
from kvplan.files import atomic_output
from kvplan.usecases.sweep.cells import COLUMNS, SweepRow

FORMATS = {".parquet": "parquet", ".pq": "parquet", ".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl"}
PARQUET_EXTRA = "pip install 'kvplan[parquet]'"
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
    """A value read back from a file, as its column's type (CSV gives text)."""
    if value is None or value == "":
        return None
    try:
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
            return float(value)
        return str(value)
    except (TypeError, ValueError):
        raise KvplanError(f"{shown}: column {column}: {value!r} is not a {kind.__name__}") from None


def _checked(records: Iterable[Record], shown: str) -> list[Record]:
    rows = []
    for raw in records:
        if set(raw) != set(COLUMNS):
            raise KvplanError(f"{shown}: not a results table of this kvplan's sweep (its columns differ); give "
                              "another -o, or move that file away")
        rows.append({column: _typed(raw[column], COLUMN_TYPES[column], column, shown) for column in COLUMNS})
    return rows


def read_table(path: Path) -> list[Record]:
    """The rows of an existing results table, typed; refuses a file that is not one."""
    kind = table_format(path)
    shown = str(path)
    try:
        if kind == "parquet":
            pyarrow = _pyarrow()
            try:
                table = pyarrow.parquet.read_table(path)
            except pyarrow.ArrowInvalid as error:
                raise KvplanError(f"{shown}: not a Parquet file ({error})") from None
            if set(table.column_names) != set(COLUMNS):
                return _checked([dict.fromkeys(table.column_names)], shown)
            return _checked(table.to_pylist(), shown)
        with path.open(encoding="utf-8", newline="") as stream:
            if kind == "csv":
                reader = csv.DictReader(stream)
                if reader.fieldnames is not None and set(reader.fieldnames) != set(COLUMNS):
                    return _checked([dict.fromkeys(reader.fieldnames)], shown)
                return _checked(reader, shown)
            return _checked(_json_lines(stream, shown), shown)
    except OSError as error:
        raise KvplanError(f"{shown}: cannot read it ({error.strerror})") from None
    except UnicodeDecodeError:
        raise KvplanError(f"{shown}: not a results table of kvplan's sweep (not UTF-8 text)") from None


def _json_lines(stream: TextIO, shown: str) -> Iterator[Record]:
    for number, line in enumerate(stream, start=1):
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except json.JSONDecodeError:
            raise KvplanError(f"{shown}: line {number} is not JSON; not a results table of kvplan's sweep") from None
        if not isinstance(value, dict):
            raise KvplanError(f"{shown}: line {number} is not a row object")
        yield value


def write_table(path: Path, rows: list[Record]) -> None:
    """All rows at once, through `atomic_output`: the table replaces `path` only when complete."""
    kind = table_format(path)
    try:
        with atomic_output(path) as stream:
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
                    stream.write(json.dumps(row, ensure_ascii=False) + "\n")
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


def read_journal(output: Path) -> list[Record]:
    path = journal_path(output)
    if not path.exists():
        return []
    with path.open(encoding="utf-8") as stream:
        lines = stream.read().splitlines()
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # the line being written when the sweep was stopped
    return _checked(records, str(path))


@contextlib.contextmanager
def journal(output: Path) -> Iterator[TextIO]:
    """Append-only, one JSON row per line, flushed as each row arrives."""
    path = journal_path(output)
    try:
        stream = path.open("a", encoding="utf-8")
    except OSError as error:
        raise KvplanError(f"cannot write {path}: {error.strerror}") from None
    with stream:
        yield stream


def append(stream: TextIO, row: SweepRow) -> None:
    stream.write(json.dumps(record(row), ensure_ascii=False) + "\n")
    stream.flush()


def merged(previous: list[Record], new: list[Record], order: dict[str, int]) -> list[Record]:
    """One row per cell id, the newest winning, in the grid's order (rows of cells the grid no
    longer has keep their place after them)."""
    by_id: dict[str, Record] = {}
    for row in (*previous, *new):
        by_id.pop(row["cell_id"], None)
        by_id[row["cell_id"]] = row
    rows = list(by_id.values())
    return sorted(rows, key=lambda row: (order.get(row["cell_id"], len(order)),))
