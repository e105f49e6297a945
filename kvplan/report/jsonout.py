"""JSON on stdout: the data and nothing else."""

from __future__ import annotations

import dataclasses
import json
import math
import sys
from typing import Any

from kvplan.errors import ReaderGone
from kvplan.report.text import valid_text


def to_jsonable(value: Any) -> Any:
    """Plain JSON data: dataclasses as objects, strings as valid Unicode, non-finite numbers as null."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {valid_text(str(k)): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    if isinstance(value, str):
        return valid_text(value)
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def dumps(value: Any, indent: int | None = 2) -> str:
    """One JSON document (RFC 8259: no NaN, no lone surrogate)."""
    return json.dumps(to_jsonable(value), indent=indent, allow_nan=False)


def emit_json(value: Any, indent: int | None = 2) -> None:
    try:
        sys.stdout.write(dumps(value, indent) + "\n")
        sys.stdout.flush()
    except BrokenPipeError:
        raise ReaderGone from None
