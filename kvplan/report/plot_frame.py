"""The frame every chart of the HTML pages is drawn in: round ticks from zero up, the scaling from
data to pixels, grid lines, tick labels, axis titles and axes, as inline SVG. The pages draw their
data between `PlotFrame.head` and `PlotFrame.tail`, so the axes lie on top of it.

Both axes start at zero: every figure charted is a count, a rate, a cost or a duration. The
scaling is linear all the same, so a value beyond the ticks (below zero, above the top one) lies
outside the plot area rather than being clamped to it."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from kvplan.report.text import html_text

X_TICKS, Y_TICKS = 6, 5   # about how many steps each axis is cut into
GRID, AXIS, TICK_TEXT, TITLE_TEXT = "#eee", "#999", "#555", "#333"
TITLE_X = 14              # the rotated y title's centre, from the left edge


def nice_ticks(top: float, count: int = 5) -> list[float]:
    """Round tick values from 0 to the first one above ``top`` (a top on a tick gets a step of room
    over it), about ``count`` steps of 1, 2, 2.5 or 5 times a power of ten; [0, 1] where there is
    nothing above zero to show."""
    raw = top / count
    if not (math.isfinite(raw) and raw > 0):
        return [0.0, 1.0]
    magnitude = 10 ** math.floor(math.log10(raw))
    step = next(m * magnitude for m in (1, 2, 2.5, 5, 10) if m * magnitude >= raw)
    return [i * step for i in range(math.ceil(top / step + 1e-9) + 1)]


def tick_label(value: float) -> str:
    """A tick's text: thousands separated, else three significant digits."""
    if value == 0:
        return "0"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


@dataclass(frozen=True)
class PixelBox:
    """An SVG of ``width`` x ``height`` pixels whose plot area leaves these margins around it."""

    width: int
    height: int
    left: int
    right: int
    top: int
    bottom: int

    @property
    def plot_width(self) -> int:
        return self.width - self.left - self.right

    @property
    def plot_height(self) -> int:
        return self.height - self.top - self.bottom

    @property
    def right_edge(self) -> int:
        return self.width - self.right

    @property
    def bottom_edge(self) -> int:
        return self.height - self.bottom


@dataclass(frozen=True)
class PlotFrame:
    """Data from 0 to the last tick on each axis, drawn in ``box``'s plot area."""

    box: PixelBox
    x_ticks: tuple[float, ...]
    y_ticks: tuple[float, ...]

    def px(self, x: float) -> float:
        return self.box.left + self.box.plot_width * x / self.x_ticks[-1]

    def py(self, y: float) -> float:
        return self.box.top + self.box.plot_height * (1 - y / self.y_ticks[-1])

    def points(self, data: Iterable[tuple[float, float]]) -> str:
        """The ``points`` attribute of a polyline or polygon through the data."""
        return " ".join(f"{self.px(x):.1f},{self.py(y):.1f}" for x, y in data)

    def head(self, label: str, x_title: str, y_title: str) -> str:
        """The opening ``<svg>`` (``label`` for screen readers), grid, tick labels and axis titles."""
        box = self.box
        parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{box.width}" height="{box.height}" '
                 f'viewBox="0 0 {box.width} {box.height}" role="img" aria-label="{html_text(label)}">']
        for tick in self.y_ticks:
            y = self.py(tick)
            parts.append(f'<line x1="{box.left}" x2="{box.right_edge}" y1="{y:.1f}" y2="{y:.1f}" stroke="{GRID}"/>')
            parts.append(f'<text x="{box.left - 6}" y="{y + 4:.1f}" font-size="11" text-anchor="end" '
                         f'fill="{TICK_TEXT}">{tick_label(tick)}</text>')
        for tick in self.x_ticks:
            parts.append(f'<text x="{self.px(tick):.1f}" y="{box.bottom_edge + 16}" font-size="11" '
                         f'text-anchor="middle" fill="{TICK_TEXT}">{tick_label(tick)}</text>')
        middle_x, middle_y = box.left + box.plot_width / 2, box.top + box.plot_height / 2
        parts.append(f'<text x="{middle_x:.0f}" y="{box.height - 6}" font-size="12" text-anchor="middle" '
                     f'fill="{TITLE_TEXT}">{html_text(x_title)}</text>')
        parts.append(f'<text x="{TITLE_X}" y="{middle_y:.0f}" font-size="12" text-anchor="middle" '
                     f'fill="{TITLE_TEXT}" transform="rotate(-90 {TITLE_X} {middle_y:.0f})">'
                     f'{html_text(y_title)}</text>')
        return "".join(parts)

    def tail(self) -> str:
        """The two axes, over whatever was drawn after `head`, and the closing ``</svg>``."""
        box = self.box
        return (f'<line x1="{box.left}" x2="{box.left}" y1="{box.top}" y2="{box.bottom_edge}" stroke="{AXIS}"/>'
                f'<line x1="{box.left}" x2="{box.right_edge}" y1="{box.bottom_edge}" y2="{box.bottom_edge}" '
                f'stroke="{AXIS}"/></svg>')


def whole_ticks(top: float, count: int = 5) -> list[float]:
    """`nice_ticks` for a count of whole things (GPUs): steps of at least one."""
    ticks = nice_ticks(top, count)
    step = ticks[1] - ticks[0]
    if step >= 1 and float(step).is_integer():
        return ticks
    step = max(1, math.ceil(step))
    return [float(i * step) for i in range(math.ceil(top / step + 1e-9) + 1)]


def plot_frame(box: PixelBox, x_max: float, y_max: float, whole_y: bool = False) -> PlotFrame:
    """The frame whose ticks reach at least ``x_max`` and ``y_max`` (the largest values to show);
    `whole_y`: the y axis counts whole things (GPUs), so no tick falls between two."""
    y_ticks = whole_ticks(y_max, Y_TICKS) if whole_y else nice_ticks(y_max, Y_TICKS)
    return PlotFrame(box, tuple(nice_ticks(x_max, X_TICKS)), tuple(y_ticks))
