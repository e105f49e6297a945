import pytest

from kvplan.usecases.simulate.metrics import percentile, summarize, weighted_percentile


def test_percentile_interpolates_like_numpy():
    values = [1.0, 2.0, 3.0, 4.0, 10.0]
    # numpy.percentile(values, [50, 95, 99]) -> 3.0, 8.8, 9.76
    assert percentile(values, 0.5) == 3.0
    assert percentile(values, 0.95) == pytest.approx(8.8)
    assert percentile(values, 0.99) == pytest.approx(9.76)
    assert percentile([7.0], 0.99) == 7.0


def test_summary_of_nothing_is_empty():
    assert summarize([]).count == 0 and summarize([]).p50 is None
    assert summarize([2.0, 4.0]).mean == 3.0


def test_weighted_percentile_uses_time_weights():
    # 90% of the time at 10 blocks, 10% at 100 blocks
    histogram = {10: 9.0, 100: 1.0}
    assert weighted_percentile(histogram, 0.5) == 10
    assert weighted_percentile(histogram, 0.9) == 10
    assert weighted_percentile(histogram, 0.95) == 100
