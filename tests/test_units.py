"""Byte sizes as people write them, vLLM's GiB, and the integer arithmetic sizes use."""

from __future__ import annotations

import pytest

from kvplan.errors import KvplanError
from kvplan.units import cdiv, format_gib, human_bytes, parse_bytes, round_up, significant


@pytest.mark.parametrize(("text", "value"), [
    ("25938100224", 25_938_100_224), ("24.16GiB", int(24.16 * 2**30)), ("900MiB", 900 * 2**20),
    ("80GB", 80 * 1000**3), ("1_000", 1000), (4096, 4096), (" 2 kib ", 2048),
])
def test_sizes_as_people_write_them(text, value):
    assert parse_bytes(text) == value


@pytest.mark.parametrize("text", ["lots", "12 parsecs", "-1GiB", ""])
def test_a_size_that_is_not_one_is_bad_input(text):
    with pytest.raises(KvplanError):
        parse_bytes(text, "--kv-cache-memory")


def test_vllms_gib_and_the_tables_binary_units():
    assert format_gib(25_938_100_224) == "24.16"
    assert human_bytes(512) == "512 B" and human_bytes(3 * 2**30) == "3.00 GiB"


def test_ceil_division_and_rounding_up():
    assert [cdiv(n, 16) for n in (0, 1, 16, 17)] == [0, 1, 1, 2]
    assert round_up(513, 512) == 1024 and round_up(512, 512) == 512 and round_up(50257, 64) == 50304


def test_six_significant_digits_and_no_infinities():
    assert significant(0.123456789) == 0.123457 and significant(123456789.0) == 123457000.0
    assert significant(float("inf")) is None and significant(float("nan")) is None
