import random

import pytest

from kvplan.errors import KvplanError
from kvplan.usecases.simulate.arrivals import arrival_times, parse_arrival


def times(raw, seed=0, factor=1.0):
    return arrival_times(parse_arrival(raw, "arrival"), random.Random(seed), factor)


def test_poisson_count_and_mean_gap():
    values = times({"process": "poisson", "rate": 4.0, "count": 20000})
    assert len(values) == 20000
    assert values == sorted(values)
    assert values[-1] / len(values) == pytest.approx(0.25, rel=0.03)


def test_poisson_duration_stops_before_the_end():
    values = times({"process": "poisson", "rate": 10, "duration_s": 30})
    assert values[-1] < 30
    assert len(values) == pytest.approx(300, rel=0.15)


def test_constant_rate_is_evenly_spaced_from_zero():
    assert times({"process": "constant", "rate": 2, "count": 4}) == [0.0, 0.5, 1.0, 1.5]
    assert times({"process": "constant", "rate": 2, "duration_s": 2}) == [0.0, 0.5, 1.0, 1.5]


def test_bursts_and_all_at_once():
    assert times({"process": "bursts", "burst_size": 3, "interval_s": 10, "count": 7}) == [0, 0, 0, 10, 10, 10, 20]
    assert times({"process": "bursts", "burst_size": 2, "interval_s": 5, "duration_s": 10}) == [0, 0, 5, 5]
    assert times({"process": "all_at_once", "count": 3}) == [0.0, 0.0, 0.0]


def test_timestamps_are_sorted():
    assert times({"process": "timestamps", "times_s": [3, 1, 2.5]}) == [1, 2.5, 3]


def test_rate_factor_compresses_the_same_arrivals():
    base = times({"process": "poisson", "rate": 1, "count": 50}, seed=3)
    doubled = times({"process": "poisson", "rate": 1, "count": 50}, seed=3, factor=2.0)
    assert doubled == pytest.approx([t / 2 for t in base])
    assert times({"process": "timestamps", "times_s": [0, 4]}, factor=4) == [0, 1]


def test_nominal_rates():
    assert parse_arrival({"process": "bursts", "burst_size": 10, "interval_s": 5, "count": 20}, "a").nominal_rate == 2
    assert parse_arrival({"process": "timestamps", "times_s": [0, 1, 2, 4]}, "a").nominal_rate == 0.75
    assert parse_arrival({"process": "all_at_once", "count": 5}, "a").nominal_rate is None


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"process": "poisson", "rate": -1, "count": 3}, "arrival.rate: must be > 0"),
        ({"process": "poisson", "rate": 0, "count": 3}, "arrival.rate: must be > 0"),
        ({"process": "poisson", "rate": 1}, "arrival.count: give exactly one of count and duration_s"),
        ({"process": "poisson", "rate": 1, "count": 2, "duration_s": 3}, "arrival.count: give exactly one"),
        ({"process": "weibull", "rate": 1, "count": 2}, "arrival.process: unknown arrival process 'weibull'"),
        ({"process": "gamma", "rate": 1, "count": 2}, "arrival.burstiness: required key is missing"),
        ({"process": "poisson", "rate": "fast", "count": 2}, "arrival.rate: expected a number, got a string"),
        ({"process": "constant", "rate": 1, "count": 0}, "arrival.count: must be >= 1"),
        ({"process": "all_at_once", "count": 2, "rate": 3}, "arrival.rate: unknown key"),
        ({"process": "poisson", "rate": 1e9, "duration_s": 100}, "arrival: about"),
    ],
)
def test_bad_arrivals_name_the_field(raw, message):
    with pytest.raises(KvplanError) as error:
        parse_arrival(raw, "arrival")
    assert str(error.value).startswith(message)
