"""Byte sizes as people write them, vLLM's GiB, and the integer arithmetic sizes use."""

from __future__ import annotations

import re

import pytest

from kvplan.errors import KvplanError
from kvplan.units import cdiv, format_gib, human_bytes, parse_bytes, parse_count, parse_size, round_up, significant


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


@pytest.mark.parametrize(("text", "value"), [
    ("24G", 24 * 2**30), ("24g", 24 * 10**9), ("24GiB", 24 * 2**30), ("24gb", 24 * 10**9), ("1P", 2**50),
    ("25.6k", 25_600), ("1.5gib", int(1.5 * 2**30)), ("24 GiB", 24 * 2**30), ("0012", 12), ("7B", 7),
])
def test_units_mean_what_vllm_and_people_mean(text, value):
    """One letter as vLLM's human_readable_int: lower case powers of 1000, upper case of 1024."""
    assert parse_bytes(text) == value


@pytest.mark.parametrize(("text", "says"), [
    ("1,5GiB", "write one number and one unit"), ("1e9", "one number and one unit"), ("1e400", "one number"),
    ("24.5G", "G (vLLM's binary unit) takes a whole number; write 24.5g"), ("9" * 5000, "cannot read"),
    ("9" * 30, "more than 24 digits"), ("24 G B", "one number"), ("24XB", "unknown unit 'XB'"),
    ("1.5", "not a whole number of bytes"), ("\ud800", "cannot read '\\ud800'"), ("--5", "cannot"),
])
def test_sizes_are_read_strictly(text, says):
    with pytest.raises(KvplanError, match=re.escape(says)) as error:
        parse_size(text, "--kv-cache-memory")
    assert str(error.value).startswith("--kv-cache-memory: ") and "\n" not in str(error.value)


@pytest.mark.parametrize(("text", "value"), [("8192", 8192), ("8k", 8000), ("8K", 8192), ("25.6k", 25_600),
                                             ("1_000", 1000)])
def test_counts_as_vllm_reads_them(text, value):
    assert parse_count(text, "--max-num-batched-tokens") == value


@pytest.mark.parametrize("text", ["8KiB", "1.5", "-1", "8 k", "1e3", "8,192"])
def test_a_count_that_is_not_one_is_bad_input(text):
    with pytest.raises(KvplanError):
        parse_count(text, "--max-num-batched-tokens")
