import pytest

from kvplan.usecases.simulate.series import Downsampler


def test_weights_and_means_survive_merging():
    series = Downsampler(("value",), first_width=1.0, capacity=4)
    for step in range(20):
        series.add(step, step + 1, (float(step),))
    points = series.points()
    assert series.width == 8.0
    assert len(points) == 3
    assert sum(p.weight for p in points) == pytest.approx(20)
    assert points[0].means == (3.5,) and points[0].maxima == (7.0,)
    assert points[2].means == (17.5,) and points[2].end == 20


def test_an_interval_spanning_buckets_is_split_by_overlap():
    series = Downsampler(("value",), first_width=1.0, capacity=8)
    series.add(0.5, 2.5, (4.0,))
    weights = [p.weight for p in series.points()]
    assert weights == pytest.approx([0.5, 1.0, 0.5])


def test_memory_is_bounded_by_capacity():
    series = Downsampler(("a", "b"), first_width=1e-3, capacity=16)
    for step in range(100_000):
        series.add(step * 0.01, (step + 1) * 0.01, (1.0, 2.0))
    assert len(series.points()) <= 16
    assert sum(p.weight for p in series.points()) == pytest.approx(1000)
