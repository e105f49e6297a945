"""JSON on stdout: the data and nothing else."""

from __future__ import annotations

import dataclasses
import json
import sys
from typing import Any


def to_jsonable(value: Any) -> Any:
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return {f.name: to_jsonable(getattr(value, f.name)) for f in dataclasses.fields(value)}
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [to_jsonable(v) for v in value]
    return value


def dumps(value: Any, indent: int | None = 2) -> str:
    return json.dumps(to_jsonable(value), indent=indent)


def emit_json(value: Any, indent: int | None = 2) -> None:
    sys.stdout.write(dumps(value, indent) + "\n")
    sys.stdout.flush()
