"""Byte sizes as people write them and as vLLM logs them, and the integer arithmetic that sizes are
computed with (ceil division, rounding up to a granularity)."""

from __future__ import annotations

import math
import re

from kvplan.errors import KvplanError

# Size units. One letter follows vLLM's `human_readable_int` (the parser of its --kv-cache-memory-bytes
# and --max-num-batched-tokens): lower case is a power of 1000, upper case a power of 1024, and an
# upper-case letter takes whole numbers only. Two and three letters are case-insensitive: KB, MB,
# GB, TB, PB are powers of 1000; KiB, MiB, GiB, TiB, PiB powers of 1024.
DECIMAL_LETTERS = {"k": 1000, "m": 1000**2, "g": 1000**3, "t": 1000**4, "p": 1000**5}
BINARY_LETTERS = {"K": 1024, "M": 1024**2, "G": 1024**3, "T": 1024**4, "P": 1024**5}
NAMED_UNITS = {
    "b": 1,
    "kb": 1000, "mb": 1000**2, "gb": 1000**3, "tb": 1000**4, "pb": 1000**5,
    "kib": 1024, "mib": 1024**2, "gib": 1024**3, "tib": 1024**4, "pib": 1024**5,
}
_SIZE = re.compile(r"(?P<number>[0-9]+(?:_[0-9]+)*(?:\.[0-9]+)?) ?(?P<unit>[A-Za-z]{0,3})")
SIZE_EXAMPLES = "25938100224, 24GiB, 900MiB, 80GB or 24G (vLLM's spelling of 24GiB)"


def parse_size(text: str, what: str = "size", *, unit_name: str = "byte") -> int:
    """`25938100224`, `24.16GiB`, `900MiB`, `80GB`, `24G`, `25.6k` -> an integer (fractions round down).

    One number, one unit, nothing else: `1,5GiB`, `1e9`, `-1` and `24 G B` are refused."""
    stripped = text.strip()
    match = _SIZE.fullmatch(stripped) if len(stripped) <= MAX_SIZE_TEXT else None
    if match is None:
        raise KvplanError(f"{what}: cannot read {shown_text(text)} as a {unit_name} count: write one number and "
                          f"one unit, e.g. {SIZE_EXAMPLES}")
    number, unit = match.group("number").replace("_", ""), match.group("unit")
    if len(number) > MAX_SIZE_DIGITS:
        raise KvplanError(f"{what}: {shown_text(text)} has more than {MAX_SIZE_DIGITS} digits")
    if unit in BINARY_LETTERS:
        if "." in number:
            raise KvplanError(f"{what}: {shown_text(text)}: {unit} (vLLM's binary unit) takes a whole number; "
                              f"write {number}{unit.lower()} for powers of 1000 or {number}{unit}iB")
        return int(number) * BINARY_LETTERS[unit]
    scale = DECIMAL_LETTERS.get(unit) or NAMED_UNITS.get(unit.lower()) or (1 if not unit else None)
    if scale == 1 and "." in number:
        raise KvplanError(f"{what}: {shown_text(text)} is not a whole number of {unit_name}s; give a unit for a "
                          "fraction, e.g. 1.5GiB")
    if scale is None:
        raise KvplanError(f"{what}: {shown_text(text)}: unknown unit {unit!r}; units are k m g t p (powers of 1000), "
                          "K M G T P (powers of 1024), KB MB GB TB PB, KiB MiB GiB TiB PiB")
    # as vLLM computes it: a fraction times the unit in floating point, rounded down
    return int(number) * scale if "." not in number else int(float(number) * scale)


def parse_bytes(text: str | int, what: str = "size") -> int:
    """A byte count: an integer as is, text by `parse_size`; never negative."""
    if isinstance(text, bool):
        raise KvplanError(f"{what}: expected a byte count, got {text!r}")
    if isinstance(text, int):
        if text < 0:
            raise KvplanError(f"{what}: {text} is negative; give a size of 0 bytes or more")
        return text
    return parse_size(text, what)


def shown_text(text: str, limit: int = 40) -> str:
    """User text quoted for a message: shortened, and safe to print whatever it holds."""
    short = text if len(text) <= limit else text[:limit] + "..."
    return ascii(short) if any(not ch.isprintable() for ch in short) else repr(short)


MAX_SIZE_DIGITS = 24
MAX_SIZE_TEXT = 64


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


_COUNT = re.compile(r"(?P<number>[0-9]+(?:_[0-9]+)*(?:\.[0-9]+)?)(?P<unit>[kKmMgGtT]?)")


def parse_count(text: str, what: str) -> int:
    """A count as vLLM's `human_readable_int` reads it: `2048`, `25.6k` (powers of 1000), `32K`
    (powers of 1024, whole numbers only)."""
    stripped = text.strip()
    match = _COUNT.fullmatch(stripped) if len(stripped) <= MAX_SIZE_TEXT else None
    if match is None:
        raise KvplanError(f"{what}: cannot read {shown_text(text)} as a number: write e.g. 8192, 8k (8,000) or "
                          "8K (8,192)")
    number, unit = match.group("number").replace("_", ""), match.group("unit")
    if len(number) > MAX_SIZE_DIGITS:
        raise KvplanError(f"{what}: {shown_text(text)} has more than {MAX_SIZE_DIGITS} digits")
    if not unit:
        if "." in number:
            raise KvplanError(f"{what}: {shown_text(text)} is not a whole number")
        return int(number)
    return parse_size(f"{number}{unit}", what)


# ---------------------------------------------------------------------------- durations

_DURATION = re.compile(r"^\s*([0-9]*\.?[0-9]+(?:e[-+]?[0-9]+)?)\s*(ms|s|us|min|m|h)?\s*$", re.IGNORECASE)
_DURATION_UNITS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "min": 60.0, "h": 3600.0}
DURATION_EXAMPLES = "500ms, 0.5s or 0.5 (seconds)"


def parse_duration(text: str, where: str) -> float:
    """Seconds from a duration as `fit --slo` and a check spec write it: `500ms`, `0.5s`, `2min`,
    or a bare number of seconds; positive and finite."""
    match = _DURATION.match(text) if len(text) <= MAX_SIZE_TEXT else None
    if match is None:
        raise KvplanError(f"{where}: {shown_text(text)} is not a duration; write e.g. {DURATION_EXAMPLES}")
    unit = (match.group(2) or "s").lower()
    value = float(match.group(1)) * _DURATION_UNITS[unit]
    if not math.isfinite(value) or value <= 0:
        raise KvplanError(f"{where}: {shown_text(text)} must be a positive duration")
    return value


def format_duration(seconds: float) -> str:
    """A duration as people read it: "840 ms", "12.4 s", "17 min 10 s", "2 h 5 min"."""
    if not math.isfinite(seconds):
        return f"{seconds} s"
    if seconds < 0:
        return "-" + format_duration(-seconds)
    if seconds < 1:
        return f"{seconds * 1e3:.3g} ms"
    if seconds < 60:
        return f"{seconds:.3g} s"
    whole = round(seconds)
    if whole < 3600:
        minutes, rest = divmod(whole, 60)
        return f"{minutes} min {rest} s" if rest else f"{minutes} min"
    minutes = round(seconds / 60)
    hours, rest = divmod(minutes, 60)
    return f"{hours} h {rest} min" if rest else f"{hours} h"
