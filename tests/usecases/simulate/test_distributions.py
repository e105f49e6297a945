import math
import random

import pytest

from kvplan.errors import KvplanError
from kvplan.usecases.simulate.distributions import parse_distribution


def draws(raw, n=4000, seed=0, **kwargs):
    dist = parse_distribution(raw, "x", **kwargs)
    rng = random.Random(seed)
    return [dist.sample_int(rng) if dist.integer else dist.sample(rng) for _ in range(n)]


def test_bare_number_is_a_constant():
    assert set(draws(128, n=10)) == {128}


def test_uniform_integers_cover_both_ends_with_equal_odds():
    values = draws({"dist": "uniform", "min": 3, "max": 6}, n=8000)
    assert set(values) == {3, 4, 5, 6}
    for v in (3, 4, 5, 6):
        assert values.count(v) == pytest.approx(2000, rel=0.1)


def test_uniform_floats_are_continuous():
    values = draws({"dist": "uniform", "min": 0.5, "max": 3}, integer=False)
    assert min(values) >= 0.5 and max(values) <= 3
    assert len({round(v, 6) for v in values}) > 3000


@pytest.mark.parametrize("kind", ["normal", "lognormal"])
def test_mean_and_std_are_those_of_the_values(kind):
    values = draws({"dist": kind, "mean": 600, "std": 300}, n=20000, integer=False)
    mean = sum(values) / len(values)
    std = math.sqrt(sum((v - mean) ** 2 for v in values) / len(values))
    assert mean == pytest.approx(600, rel=0.03)
    assert std == pytest.approx(300, rel=0.06)


def test_clipping_applies_after_rounding():
    values = draws({"dist": "normal", "mean": 100, "std": 400, "min": 16, "max": 200})
    assert min(values) == 16 and max(values) == 200


def test_lognormal_is_right_skewed():
    values = sorted(draws({"dist": "lognormal", "mean": 500, "std": 500}))
    assert values[len(values) // 2] < 500 < values[int(0.9 * len(values))]


def test_empirical_draws_only_listed_values():
    assert set(draws({"dist": "empirical", "values": [10, 20, 20, 50]})) == {10, 20, 50}


def test_histogram_respects_bin_weights():
    values = draws({"dist": "histogram", "bins": [[1, 10, 3], [100, 100, 1]]}, n=8000)
    small = sum(1 for v in values if v <= 10)
    assert set(v for v in values if v > 10) == {100}
    assert small / len(values) == pytest.approx(0.75, abs=0.02)


def test_same_seed_same_values_other_seed_other_values():
    raw = {"dist": "lognormal", "mean": 300, "std": 200}
    assert draws(raw, seed=5) == draws(raw, seed=5)
    assert draws(raw, seed=5) != draws(raw, seed=6)


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        ({"dist": "gaussian", "mean": 1}, "x.dist: unknown distribution 'gaussian'"),
        ({"dist": "uniform", "min": 5}, "x.max: required key is missing"),
        ({"dist": "uniform", "min": 5, "max": 2}, "x.max: must be >= min"),
        ({"dist": "normal", "mean": 5, "std": 1, "sd": 2}, "x.sd: unknown key"),
        ({"dist": "constant", "value": -3}, "x.value: must be >= 1"),
        ({"dist": "constant", "value": 2.5}, "x.value: expected an integer"),
        ({"dist": "lognormal", "mean": 0, "std": 1}, "x.mean: must be > 0"),
        ({"dist": "histogram", "bins": [[1, 2]]}, "x.bins[0]: expected [low, high, weight]"),
        ({"dist": "histogram", "bins": [[1, 2, 0]]}, "x.bins: the bin weights must not all be zero"),
        ({"dist": "empirical", "values": []}, "x.values: expected a non-empty list"),
        ("long", "x: expected an object, got a string"),
    ],
)
def test_bad_distributions_name_the_field(raw, message):
    with pytest.raises(KvplanError) as error:
        parse_distribution(raw, "x", minimum=1)
    assert str(error.value).startswith(message)
