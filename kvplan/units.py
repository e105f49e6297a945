"""Byte sizes as people write them and as vLLM logs them, and the integer arithmetic that sizes are
computed with (ceil division, rounding up to a granularity)."""

from __future__ import annotations

import math
import re

from kvplan.errors import KvplanError

_UNITS = {
    "": 1, "b": 1,
    "k": 1000, "kb": 1000, "m": 1000**2, "mb": 1000**2, "g": 1000**3, "gb": 1000**3,
    "t": 1000**4, "tb": 1000**4,
    "ki": 1024, "kib": 1024, "mi": 1024**2, "mib": 1024**2, "gi": 1024**3, "gib": 1024**3,
    "ti": 1024**4, "tib": 1024**4,
}
_SIZE = re.compile(r"^\s*(-?[0-9][0-9_,]*(?:\.[0-9]+)?)\s*([a-zA-Z]*)\s*$")


def parse_bytes(text: str | int, what: str = "size") -> int:
    """`25938100224`, `24.16GiB`, `900MiB`, `80GB` -> bytes (fractions round down)."""
    if isinstance(text, int):
        value = text
    else:
        match = _SIZE.match(str(text))
        if not match or match.group(2).lower() not in _UNITS:
            raise KvplanError(
                f"{what}: cannot read {text!r} as a byte size; write e.g. 25938100224, 24.16GiB or 900MiB"
            )
        number = match.group(1).replace("_", "").replace(",", "")
        scale = _UNITS[match.group(2).lower()]
        value = int(number) * scale if "." not in number else int(float(number) * scale)
    if value < 0:
        raise KvplanError(f"{what}: {text!r} is negative; give a size of 0 bytes or more")
    return value


def format_gib(num_bytes: int | float) -> str:
    """vLLM's `format_gib`: bytes / 2**30 rounded to 2 decimals."""
    return f"{round(num_bytes / 2**30, 2)}"


def human_bytes(num_bytes: int | float) -> str:
    """A compact binary-unit rendering for tables."""
    value = float(num_bytes)
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if abs(value) < 1024 or unit == "TiB":
            return f"{value:,.0f} {unit}" if unit == "B" else f"{value:,.2f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def cdiv(a: int, b: int) -> int:
    """Ceil division of integers, vLLM's `cdiv`."""
    return -(-a // b)


def round_up(value: int, granularity: int) -> int:
    """`value` rounded up to a multiple of `granularity`."""
    return cdiv(value, granularity) * granularity


def significant(value: float, digits: int = 6) -> float | None:
    """A float to `digits` significant digits, as kvplan's documents carry them (None if not finite)."""
    return float(f"{value:.{digits}g}") if math.isfinite(value) else None
