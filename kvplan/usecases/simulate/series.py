"""A time series of bounded size: at most ``capacity`` equal buckets, however long the run.

Each step (or idle gap) adds an interval during which some quantities held constant; the
series keeps their time-weighted sums and maxima per bucket. When an interval ends beyond the
last bucket, neighbouring buckets are merged pairwise and the bucket width doubles, so memory
stays flat as the number of steps grows and the result depends only on the inputs.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class SeriesPoint:
    start: float
    end: float
    weight: float  # how much of the bucket is covered by observations (time or steps)
    means: tuple[float, ...]
    maxima: tuple[float, ...]


class Downsampler:
    def __init__(self, names: tuple[str, ...], first_width: float, capacity: int = 240) -> None:
        if capacity < 2 or capacity % 2:
            raise ValueError("capacity must be an even number >= 2")
        self.names = names
        self.capacity = capacity
        self.width = first_width
        self.end = 0.0
        self._weights: list[float] = []
        self._sums: list[list[float]] = []
        self._maxima: list[list[float]] = []

    def add(self, start: float, end: float, values: tuple[float, ...]) -> None:
        """Record that ``values`` held over ``[start, end)``; intervals arrive in time order."""
        if end <= start:
            return
        while end > self.width * self.capacity:
            self._merge()
        width = self.width
        first = int(start // width)
        last = min(int(end // width), self.capacity - 1)
        if first == last and first < len(self._weights):
            # the commonest interval by far (a step): inside one existing bucket, the loop below
            # for that one index, with the same arithmetic
            overlap = min(end, (first + 1) * width) - max(start, first * width)
            if overlap > 0:
                self._add(first, overlap, values)
            if end > self.end:
                self.end = end
            return
        while len(self._weights) <= last:
            self._weights.append(0.0)
            self._sums.append([0.0] * len(self.names))
            self._maxima.append([0.0] * len(self.names))
        for index in range(first, last + 1):
            overlap = min(end, (index + 1) * self.width) - max(start, index * self.width)
            if overlap > 0:
                self._add(index, overlap, values)
        self.end = max(self.end, end)

    def _add(self, index: int, overlap: float, values: tuple[float, ...]) -> None:
        """One bucket's share of an interval: its weight, the weighted sums and the maxima."""
        self._weights[index] += overlap
        sums = self._sums[index]
        maxima = self._maxima[index]
        for k, value in enumerate(values):
            sums[k] += value * overlap
            if value > maxima[k]:
                maxima[k] = value

    def _merge(self) -> None:
        weights, sums, maxima = self._weights, self._sums, self._maxima
        self._weights, self._sums, self._maxima = [], [], []
        for i in range(0, len(weights), 2):
            pair = slice(i, i + 2)
            self._weights.append(sum(weights[pair]))
            self._sums.append([sum(col) for col in zip(*sums[pair], strict=True)])
            self._maxima.append([max(col) for col in zip(*maxima[pair], strict=True)])
        self.width *= 2

    def points(self) -> list[SeriesPoint]:
        out = []
        for index, weight in enumerate(self._weights):
            start = index * self.width
            means = tuple(s / weight if weight else 0.0 for s in self._sums[index])
            out.append(SeriesPoint(start, min(start + self.width, self.end), weight, means, tuple(self._maxima[index])))
        return out
