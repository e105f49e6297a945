"""The chart frame of the HTML pages: round ticks from zero, linear scaling into the pixel box, and
a frame that is well-formed SVG with one grid line and label per tick, the titles escaped and the
axes on the plot area's edges."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import pytest

from kvplan.report.plot_frame import AXIS, GRID, PixelBox, PlotFrame, nice_ticks, plot_frame, tick_label

BOX = PixelBox(width=400, height=200, left=50, right=10, top=10, bottom=30)   # plot area 340 x 160
SVG = "{http://www.w3.org/2000/svg}"


def parse(frame: PlotFrame, x_title: str = "time (s)", y_title: str = "KV blocks") -> ET.Element:
    return ET.fromstring(frame.head("a chart", x_title, y_title) + frame.tail())


# ---------------------------------------------------------------------------- ticks


def test_ticks_are_round_and_cover_the_range():
    assert nice_ticks(1799) == [0, 500, 1000, 1500, 2000]
    assert nice_ticks(0.37) == pytest.approx([0, 0.1, 0.2, 0.3, 0.4])
    assert nice_ticks(141.75, 6) == [0, 25, 50, 75, 100, 125, 150]
    assert nice_ticks(3, 5) == pytest.approx([0, 1, 2, 3, 4])


@pytest.mark.parametrize("top", [0.003, 0.9, 1, 7.5, 12, 99.9, 1000, 4096, 123_456, 2.5e9])
@pytest.mark.parametrize("count", [5, 6])
def test_ticks_step_evenly_from_zero_by_one_two_two_and_a_half_or_five(top, count):
    ticks = nice_ticks(top, count)
    step = ticks[1]
    assert ticks[0] == 0 and ticks[-2] <= top < ticks[-1]
    assert ticks == pytest.approx([i * step for i in range(len(ticks))])
    mantissa = step / 10 ** math.floor(math.log10(step))
    assert any(mantissa == pytest.approx(m) for m in (1, 2, 2.5, 5))
    assert 2 <= len(ticks) <= count + 2


@pytest.mark.parametrize("top", [0.0, -3.0, math.nan, math.inf, 5e-324])
def test_nothing_above_zero_to_show_gets_the_unit_range(top):
    assert nice_ticks(top) == [0.0, 1.0]


@pytest.mark.parametrize(("value", "text"), [
    (0, "0"), (0.0, "0"), (0.25, "0.25"), (0.1 * 3, "0.3"), (2.5, "2.5"), (125, "125"), (999, "999"),
    (1000, "1,000"), (1250.0, "1,250"), (2_000_000, "2,000,000"), (-1500, "-1,500"), (-0.5, "-0.5"),
])
def test_tick_labels(value, text):
    assert tick_label(value) == text


# ---------------------------------------------------------------------------- scaling


def test_zero_sits_on_the_axes_and_the_last_ticks_on_the_far_edges():
    frame = plot_frame(BOX, 1799, 0.37)
    assert frame.x_ticks[-1] == 2000 and frame.y_ticks[-1] == pytest.approx(0.4)
    assert (frame.px(0), frame.py(0)) == (50, 170)
    assert frame.px(2000) == 390 and frame.py(frame.y_ticks[-1]) == pytest.approx(10)
    assert frame.px(500) == pytest.approx(50 + 340 / 4) and frame.py(0.1) == pytest.approx(170 - 160 / 4)


def test_one_data_point_lies_inside_the_plot_area():
    frame = plot_frame(BOX, 40.0 * 1.05, 2.5 * 1.1)   # the fit page's headroom over its only point
    assert BOX.left < frame.px(40.0) < BOX.right_edge
    assert BOX.top < frame.py(2.5) < BOX.bottom_edge


def test_a_zero_width_range_is_drawn_on_zero_to_one():
    frame = plot_frame(BOX, 0.0, 0.0)
    assert frame.x_ticks == frame.y_ticks == (0.0, 1.0)
    assert (frame.px(0), frame.py(0)) == (BOX.left, BOX.bottom_edge)
    assert frame.points([(0, 0), (0, 0)]) == "50.0,170.0 50.0,170.0"


def test_values_beyond_the_ticks_are_scaled_linearly_outside_the_area():
    # no page charts a negative figure; were one given, it lies beyond the axis, not on it
    frame = plot_frame(BOX, 9, 9)   # ticks 0..10
    assert frame.px(-5) == pytest.approx(50 - 340 / 2) and frame.py(-5) == pytest.approx(170 + 160 / 2)
    assert frame.py(20) < BOX.top


def test_points_are_pixel_pairs_to_a_tenth():
    frame = PlotFrame(BOX, (0, 1, 2, 3, 4), (0, 1, 2, 3, 4))
    assert frame.points([(0, 0), (1, 2), (3, 4)]) == "50.0,170.0 135.0,90.0 305.0,10.0"
    assert frame.points(iter([(2, 1)])) == "220.0,130.0"
    assert frame.points([]) == ""


# ---------------------------------------------------------------------------- the SVG


def test_the_frame_is_svg_with_a_grid_line_and_label_per_tick():
    frame = plot_frame(BOX, 1799, 0.37)
    root = parse(frame)
    assert root.tag == f"{SVG}svg"
    assert (root.get("width"), root.get("height"), root.get("viewBox")) == ("400", "200", "0 0 400 200")
    assert root.get("role") == "img" and root.get("aria-label") == "a chart"
    grid = [line for line in root.iter(f"{SVG}line") if line.get("stroke") == GRID]
    assert [float(line.get("y1", "")) for line in grid] == pytest.approx([frame.py(t) for t in frame.y_ticks], abs=0.05)
    assert all((line.get("x1"), line.get("x2")) == ("50", "390") for line in grid)
    labels = [text.text for text in root.iter(f"{SVG}text")]
    assert labels == ["0", "0.1", "0.2", "0.3", "0.4", "0", "500", "1,000", "1,500", "2,000", "time (s)", "KV blocks"]


def test_the_axes_are_on_the_edges_of_the_plot_area_and_come_last():
    root = parse(plot_frame(BOX, 10, 10))
    *_, y_axis, x_axis = root
    assert y_axis.get("stroke") == x_axis.get("stroke") == AXIS
    assert [y_axis.get(k) for k in ("x1", "x2", "y1", "y2")] == ["50", "50", "10", "170"]
    assert [x_axis.get(k) for k in ("x1", "x2", "y1", "y2")] == ["50", "390", "170", "170"]


def test_titles_are_centred_and_escaped():
    root = parse(plot_frame(BOX, 10, 10), x_title="<b>rate</b> & more", y_title="cost\x07")
    *_, x_title, y_title, _, _ = root
    assert (x_title.text, x_title.get("x"), x_title.get("y")) == ("<b>rate</b> & more", "220", "194")
    assert (y_title.text, y_title.get("y"), y_title.get("transform")) == ("cost\\x07", "90", "rotate(-90 14 90)")
