"""Typed reads from parsed JSON that fail with one line naming the field.

Every reader takes the dotted path of the value it reads (``classes[0].prompt_tokens.mean``), so a
bad workload file is answered with exactly the field that is wrong and what was expected.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from kvplan.errors import KvplanError


class WorkloadError(KvplanError):
    """A workload file that cannot be used: exit code 2, one line naming the field."""

    def __init__(self, path: str, message: str) -> None:
        super().__init__(f"{path}: {message}" if path else message)
        self.path = path


def _kind(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int):
        return "an integer"
    if isinstance(value, float):
        return "a number"
    if isinstance(value, str):
        return "a string"
    if isinstance(value, list):
        return "a list"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def child(path: str, key: str | int) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    return f"{path}.{key}" if path else key


def as_object(value: Any, path: str) -> Mapping[str, Any]:
    if not isinstance(value, dict):
        raise WorkloadError(path, f"expected an object, got {_kind(value)}")
    return value


def as_list(value: Any, path: str, *, non_empty: bool = True) -> list[Any]:
    if not isinstance(value, list):
        raise WorkloadError(path, f"expected a list, got {_kind(value)}")
    if non_empty and not value:
        raise WorkloadError(path, "expected a non-empty list")
    return value


def reject_unknown(obj: Mapping[str, Any], path: str, allowed: Iterable[str]) -> None:
    allowed_set = set(allowed)
    for key in obj:
        if key not in allowed_set:
            expected = ", ".join(sorted(allowed_set))
            raise WorkloadError(child(path, key), f"unknown key (expected one of: {expected})")


def as_int(value: Any, path: str, *, minimum: int | None = None) -> int:
    # JSON has one number type; 12.0 is accepted as 12, 12.5 is not.
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise WorkloadError(path, f"expected an integer, got {_kind(value)}")
    if minimum is not None and value < minimum:
        raise WorkloadError(path, f"must be >= {minimum}, got {value}")
    return value


def as_number(value: Any, path: str, *, minimum: float | None = None, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise WorkloadError(path, f"expected a number, got {_kind(value)}")
    number = float(value)
    if not math.isfinite(number):
        raise WorkloadError(path, f"must be a finite number, got {value}")
    if positive and number <= 0:
        raise WorkloadError(path, f"must be > 0, got {value}")
    if minimum is not None and number < minimum:
        raise WorkloadError(path, f"must be >= {minimum:g}, got {value}")
    return number


def as_bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise WorkloadError(path, f"expected true or false, got {_kind(value)}")
    return value


def as_str(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise WorkloadError(path, f"expected a non-empty string, got {_kind(value)}")
    return value


def get(obj: Mapping[str, Any], key: str, path: str, reader: Any, default: Any = ..., **kwargs: Any) -> Any:
    """Read ``obj[key]`` with ``reader``; a missing key without a default is an error."""
    if key not in obj:
        if default is ...:
            raise WorkloadError(child(path, key), "required key is missing")
        return default
    return reader(obj[key], child(path, key), **kwargs)
