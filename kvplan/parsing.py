"""Typed reads from parsed JSON (or TOML) that fail with one line naming the field, and the
unknown-key rule every input format applies.

Every reader takes the dotted path of the value it reads (``classes[0].prompt_tokens.mean``), so a
bad input file is answered with exactly the field that is wrong and what was expected.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kvplan.errors import KvplanError


class FieldError(KvplanError):
    """An input file that cannot be used: exit code 2, one line naming the field."""

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
        raise FieldError(path, f"expected an object, got {_kind(value)}")
    return value


def as_list(value: Any, path: str, *, non_empty: bool = True) -> list[Any]:
    if not isinstance(value, list):
        raise FieldError(path, f"expected a list, got {_kind(value)}")
    if non_empty and not value:
        raise FieldError(path, "expected a non-empty list")
    return value


def first_unknown_key(keys: Iterable[str], allowed: Sequence[str]) -> tuple[str, str | None] | None:
    """The first key that is not allowed, with the allowed key it is closest to (None when none is
    close); None when every key is allowed."""
    for key in keys:
        if key not in allowed:
            close = difflib.get_close_matches(key, allowed, n=1)
            return key, close[0] if close else None
    return None


def reject_unknown(obj: Mapping[str, Any], path: str, allowed: Iterable[str]) -> None:
    allowed_keys = sorted(set(allowed))
    unknown = first_unknown_key(obj, allowed_keys)
    if unknown is not None:
        expected = ", ".join(allowed_keys)
        raise FieldError(child(path, unknown[0]), f"unknown key (expected one of: {expected})")


def as_int(value: Any, path: str, *, minimum: int | None = None) -> int:
    # JSON has one number type; 12.0 is accepted as 12, 12.5 is not.
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise FieldError(path, f"expected an integer, got {_kind(value)}")
    if minimum is not None and value < minimum:
        raise FieldError(path, f"must be >= {minimum}, got {value}")
    return value


def as_number(value: Any, path: str, *, minimum: float | None = None, positive: bool = False) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise FieldError(path, f"expected a number, got {_kind(value)}")
    number = float(value)
    if not math.isfinite(number):
        raise FieldError(path, f"must be a finite number, got {value}")
    if positive and number <= 0:
        raise FieldError(path, f"must be > 0, got {value}")
    if minimum is not None and number < minimum:
        raise FieldError(path, f"must be >= {minimum:g}, got {value}")
    return number


def as_bool(value: Any, path: str) -> bool:
    if not isinstance(value, bool):
        raise FieldError(path, f"expected true or false, got {_kind(value)}")
    return value


def as_str(value: Any, path: str) -> str:
    if not isinstance(value, str) or not value:
        raise FieldError(path, f"expected a non-empty string, got {_kind(value)}")
    return value


def get(obj: Mapping[str, Any], key: str, path: str, reader: Any, default: Any = ..., **kwargs: Any) -> Any:
    """Read ``obj[key]`` with ``reader``; a missing key without a default is an error."""
    if key not in obj:
        if default is ...:
            raise FieldError(child(path, key), "required key is missing")
        return default
    return reader(obj[key], child(path, key), **kwargs)


def get_optional(obj: Mapping[str, Any], key: str, path: str, reader: Any, **kwargs: Any) -> Any:
    """Read ``obj[key]`` with ``reader``; None when the key is missing or null."""
    value = obj.get(key)
    return None if value is None else reader(value, child(path, key), **kwargs)


def as_number_or_int(value: Any, path: str, *, minimum: float | None = None) -> int | float:
    """A number, kept an int when it is one (JSON writes whole floats of Python as 12.0)."""
    number = as_number(value, path, minimum=minimum)
    return value if isinstance(value, int) else number


def parse_calibration(raw: Any, path: str) -> tuple[tuple[int, float], ...]:
    """``[{"num_tokens": 1, "ms": 6.1}, ...]``: step times measured at a few token counts (a workload's
    timing section, a profile's calibration)."""
    points = []
    seen: dict[int, int] = {}
    for i, item in enumerate(as_list(raw, path)):
        point_path = child(path, i)
        point = as_object(item, point_path)
        reject_unknown(point, point_path, ("num_tokens", "ms"))
        tokens = get(point, "num_tokens", point_path, as_int, minimum=1)
        if tokens in seen:
            raise FieldError(child(point_path, "num_tokens"), f"{tokens} is measured twice (also in "
                             f"{child(path, seen[tokens])}): give one step time per token count")
        seen[tokens] = i
        points.append((tokens, get(point, "ms", point_path, as_number, positive=True)))
    return tuple(points)
