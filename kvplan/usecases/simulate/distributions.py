"""Length and think-time distributions of a workload, and sampling them reproducibly.

Written in a workload file as ``{"dist": "lognormal", "mean": 600, "std": 400, "min": 16, "max": 4000}``
or, for a constant, as a bare number. Normal and lognormal take the mean and standard deviation
of the values themselves (not of their logarithm), so the two read the same way. Integer
distributions (token counts) round to the nearest integer; every distribution then clips to
``[min, max]``.

Sampling uses only ``random.Random.random()`` and closed-form transforms of it, so the same seed
gives the same values on every platform and Python version.
"""

from __future__ import annotations

import bisect
import math
import random
from dataclasses import dataclass
from functools import cached_property
from typing import Any

from kvplan.parsing import (
    FieldError,
    as_int,
    as_list,
    as_number,
    as_object,
    child,
    get,
    reject_unknown,
)

DIST_NAMES = ("constant", "uniform", "normal", "lognormal", "empirical", "histogram")

_KEYS = {
    "constant": ("value",),
    "uniform": ("min", "max"),
    "normal": ("mean", "std", "min", "max"),
    "lognormal": ("mean", "std", "min", "max"),
    "empirical": ("values", "min", "max"),
    "histogram": ("bins", "min", "max"),
}


@dataclass(frozen=True)
class Distribution:
    """A distribution of non-negative values, clipped to ``[low, high]``.

    ``params`` holds (value,) for constant, (min, max) for uniform, (mean, std) for normal and
    lognormal; ``table`` holds the empirical values or histogram bins as (low, high) rows and
    ``cumulative`` their cumulative weights.
    """

    kind: str
    integer: bool
    params: tuple[float, ...]
    low: float
    high: float
    table: tuple[tuple[float, float], ...] = ()
    cumulative: tuple[float, ...] = ()

    def sample(self, rng: random.Random) -> float:
        value = _draw(self, rng)
        if self.integer:
            value = float(math.floor(value + 0.5))
        return min(self.high, max(self.low, value))

    def sample_int(self, rng: random.Random) -> int:
        return int(self.sample(rng))

    @cached_property
    def lognormal_params(self) -> tuple[float, float]:
        """A lognormal's mu and sigma of its logarithm, from the mean and std of its values
        (computed once, not for each of a million draws)."""
        mean, std = self.params
        sigma2 = math.log1p((std / mean) ** 2)
        return math.log(mean) - sigma2 / 2, math.sqrt(sigma2)


def _standard_normal(rng: random.Random) -> float:
    # Box-Muller from two uniforms; 1 - random() keeps the logarithm's argument in (0, 1].
    u1 = 1.0 - rng.random()
    u2 = rng.random()
    return math.sqrt(-2.0 * math.log(u1)) * math.cos(2.0 * math.pi * u2)


def _uniform(low: float, high: float, integer: bool, rng: random.Random) -> float:
    if integer:
        return low + math.floor(rng.random() * (high - low + 1))
    return low + rng.random() * (high - low)


def _draw(dist: Distribution, rng: random.Random) -> float:
    kind = dist.kind
    if kind == "constant":
        return dist.params[0]
    if kind == "uniform":
        return _uniform(dist.params[0], dist.params[1], dist.integer, rng)
    if kind == "normal":
        mean, std = dist.params
        return mean + std * _standard_normal(rng)
    if kind == "lognormal":
        mu, sigma = dist.lognormal_params
        return math.exp(mu + sigma * _standard_normal(rng))
    index = bisect.bisect_right(dist.cumulative, rng.random() * dist.cumulative[-1])
    low, high = dist.table[min(index, len(dist.table) - 1)]
    return low if kind == "empirical" else _uniform(low, high, dist.integer, rng)


def _cumulate(weights: list[float]) -> tuple[float, ...]:
    total = 0.0
    out = []
    for weight in weights:
        total += weight
        out.append(total)
    return tuple(out)


def parse_distribution(raw: Any, path: str, *, minimum: int = 0, integer: bool = True) -> Distribution:
    """Parse one distribution; ``minimum`` is the smallest value the field allows."""
    number = as_int if integer else as_number
    floor = float(minimum)
    if isinstance(raw, int | float) and not isinstance(raw, bool):
        return Distribution("constant", integer, (float(number(raw, path, minimum=minimum)),), floor, math.inf)
    obj = as_object(raw, path)
    kind = get(obj, "dist", path, _dist_name)
    reject_unknown(obj, path, ("dist", *_KEYS[kind]))

    if kind == "constant":
        return Distribution(kind, integer, (float(get(obj, "value", path, number, minimum=minimum)),), floor, math.inf)
    if kind == "uniform":
        low = float(get(obj, "min", path, number, minimum=minimum))
        high = float(get(obj, "max", path, number, minimum=minimum))
        _check_order(low, high, path)
        return Distribution(kind, integer, (low, high), low, high)

    low = float(get(obj, "min", path, number, floor, minimum=minimum))
    high = float(get(obj, "max", path, number, math.inf, minimum=minimum))
    _check_order(low, high, path)
    if kind in ("normal", "lognormal"):
        mean = get(obj, "mean", path, as_number, positive=kind == "lognormal", minimum=0)
        std = get(obj, "std", path, as_number, minimum=0)
        return Distribution(kind, integer, (mean, std), low, high)
    if kind == "empirical":
        values_path = child(path, "values")
        values = as_list(obj.get("values"), values_path)
        table = tuple(
            (v, v)
            for v in (float(number(item, child(values_path, i), minimum=minimum)) for i, item in enumerate(values))
        )
        return Distribution(kind, integer, (), low, high, table, _cumulate([1.0] * len(table)))

    bins_path = child(path, "bins")
    rows: list[tuple[float, float]] = []
    weights: list[float] = []
    for i, row in enumerate(as_list(obj.get("bins"), bins_path)):
        row_path = child(bins_path, i)
        items = as_list(row, row_path)
        if len(items) != 3:
            raise FieldError(row_path, f"expected [low, high, weight], got {len(items)} items")
        bin_low = float(number(items[0], child(row_path, 0), minimum=minimum))
        bin_high = float(number(items[1], child(row_path, 1), minimum=minimum))
        if bin_high < bin_low:
            raise FieldError(child(row_path, 1), f"must be >= the bin's low end ({bin_low:g})")
        rows.append((bin_low, bin_high))
        weights.append(as_number(items[2], child(row_path, 2), minimum=0))
    if sum(weights) <= 0:
        raise FieldError(bins_path, "the bin weights must not all be zero")
    return Distribution(kind, integer, (), low, high, tuple(rows), _cumulate(weights))


def _check_order(low: float, high: float, path: str) -> None:
    if high < low:
        raise FieldError(child(path, "max"), f"must be >= min ({low:g}), got {high:g}")


def _dist_name(value: Any, path: str) -> str:
    if value not in DIST_NAMES:
        raise FieldError(path, f"unknown distribution {value!r} (expected one of: {', '.join(DIST_NAMES)})")
    return value
