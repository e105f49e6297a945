"""Typed reads of parsed input, and the one unknown-key rule of every input format."""

from __future__ import annotations

import pytest

from kvplan.parsing import FieldError, as_int, first_unknown_key, get, get_optional, reject_unknown


def test_the_first_unknown_key_and_the_one_it_is_closest_to():
    allowed = ("max_tokens", "arrival_step", "request_id")
    assert first_unknown_key({"max_tokens": 1, "request_id": "a"}, allowed) is None
    assert first_unknown_key(["max_token"], allowed) == ("max_token", "max_tokens")
    assert first_unknown_key(["banana", "max_token"], allowed) == ("banana", None)


def test_fields_are_named_in_the_error():
    with pytest.raises(FieldError, match=r"^engine\.max_num_seq: unknown key \(expected one of: "):
        reject_unknown({"max_num_seq": 4}, "engine", ("max_num_seqs", "block_size"))
    with pytest.raises(FieldError, match=r"^plan\.num_blocks: expected an integer, got a string$"):
        get({"num_blocks": "many"}, "num_blocks", "plan", as_int)
    with pytest.raises(FieldError, match=r"^plan\.block_size: required key is missing$"):
        get({}, "block_size", "plan", as_int)
    assert get_optional({"num_blocks": None}, "num_blocks", "plan", as_int) is None
    assert as_int(12.0, "x") == 12
