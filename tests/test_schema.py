"""The description kinds: each refuses what is outside its range with one line naming the field and
what is allowed, and publishes the same rule as JSON Schema."""

from __future__ import annotations

import jsonschema
import pytest

from kvplan.errors import KvplanError
from kvplan.parsing import FieldError
from kvplan.schema import (
    Boolean,
    ByteSize,
    Checked,
    Either,
    Field,
    Integer,
    ListOf,
    Number,
    Record,
    Tagged,
    Text,
    check_document,
    json_schema,
    preview,
    schema_version,
)

RECORD = Record({
    "blocks": Field(Integer(2, 10**8), required=True),
    "rate": Field(Number(0, 10, exclusive_minimum=True)),
    "on": Field(Boolean()),
    "name": Field(Text(max_length=8)),
    "path": Field(Text(controls=False)),
    "memory": Field(ByteSize(1, 1 << 52)),
    "ids": Field(ListOf(Integer(0, 9), 1, 3)),
    "length": Field(Either((Integer(2, 100), Text(choices=("auto",))))),
    "dist": Field(Tagged("dist", {"constant": Record({"dist": Field(Text()), "value": Field(Integer(1, 5))})},
                         shorthand=Integer(1, 5))),
    "even": Field(Checked(Integer(0, 10), lambda v: None if v % 2 == 0 else f"{v} is odd", says="an even integer")),
    "maybe": Field(Integer(0, 1), nullable=True),
}, refused={"secret": "never from a file"})


@pytest.mark.parametrize(("document", "says"), [
    ({}, "blocks: required key is missing"),
    ({"blocks": 2**70}, "blocks: 1180591620717411303424 is out of range: expected an integer from 2 to 10**8"),
    ({"blocks": 10**5000}, "blocks: an integer of about 5001 digits is out of range"),
    ({"blocks": 1.5}, "blocks: expected an integer from 2 to 10**8, got 1.5"),
    ({"blocks": True}, "blocks: expected an integer from 2 to 10**8, got true"),
    ({"blocks": float("inf")}, "blocks: expected an integer from 2 to 10**8, got inf"),
    ({"blocks": 4, "rate": float("nan")}, "rate: nan is not a finite number: expected a number above 0 and at most 10"),
    ({"blocks": 4, "rate": 0}, "rate: 0 is out of range: expected a number above 0 and at most 10"),
    ({"blocks": 4, "on": "yes"}, "on: expected true or false, got 'yes'"),
    ({"blocks": 4, "name": "\ud800"}, "name: '\\ud800' holds '\\ud800', which is not valid Unicode"),
    ({"blocks": 4, "name": "x" * 9}, "name: expected a non-empty string of at most 8 characters, got 9 characters"),
    ({"blocks": 4, "path": "a\x00b"}, "path: 'a\\x00b' holds the control character '\\x00'"),
    ({"blocks": 4, "memory": "1,5GiB"}, "memory: cannot read '1,5GiB' as a byte count"),
    ({"blocks": 4, "memory": 2**53}, "memory: 9007199254740992 bytes is out of range"),
    ({"blocks": 4, "ids": [1, 10]}, "ids[1]: 10 is out of range: expected an integer from 0 to 9"),
    ({"blocks": 4, "ids": []}, "ids: expected a list of 1 to 3 items, got 0 items"),
    ({"blocks": 4, "length": "autoo"}, "length: expected one of: auto, got 'autoo'; did you mean auto?"),
    ({"blocks": 4, "length": [1]}, "length: expected an integer from 2 to 100, or one of: auto, got a list of 1 items"),
    ({"blocks": 4, "dist": {"dist": "constnt"}}, "dist.dist: expected one of: constant, got 'constnt'; did you mean"),
    ({"blocks": 4, "dist": 9}, "dist: 9 is out of range: expected an integer from 1 to 5"),
    ({"blocks": 4, "even": 3}, "even: 3 is odd"),
    ({"blocks": 4, "blokcs": 4}, "blokcs: unknown key; did you mean blocks?"),
    ({"blocks": 4, "zzz": 4}, "zzz: unknown key; expected one of: blocks, rate,"),
    ({"blocks": 4, "secret": True}, "secret: never from a file"),
    ([1], "expected an object, got a list of 1 items"),
])
def test_a_bad_value_is_one_line_naming_the_field_and_what_is_allowed(document, says):
    with pytest.raises(KvplanError) as error:
        check_document(RECORD, document, "f.json")
    message = str(error.value)
    assert message.startswith("f.json: ") and says in message and "\n" not in message, message


def test_what_is_fine_passes_and_the_schema_agrees():
    good = {"blocks": 12.0, "rate": 1e-9, "on": False, "name": "a\x07[/]", "memory": "24G", "ids": [0, 9],
            "length": "auto", "dist": 3, "even": 4, "maybe": None}
    check_document(RECORD, good, "f.json")
    schema = json_schema(RECORD, title="t", schema_id="https://example.invalid/t.json")
    jsonschema.Draft202012Validator.check_schema(schema)
    validator = jsonschema.Draft202012Validator(schema)
    validator.validate(good)
    for bad in ({"blocks": 1}, {"blocks": 4, "rate": 0}, {"blocks": 4, "ids": []}, {"blocks": 4, "extra": 1},
                {"blocks": 4, "memory": "1,5GiB"}, {"blocks": 4, "length": 1}, {"blocks": 4, "dist": {"dist": "x"}}):
        assert not validator.is_valid(bad), bad


def test_a_version_this_kvplan_does_not_read():
    with pytest.raises(FieldError, match=r"unsupported version 2 \(this kvplan reads 1\)"):
        schema_version(1).check(2, "schema_version")
    assert schema_version(1).schema()["const"] == 1


def test_previews_are_short_and_safe():
    assert preview(2**400).startswith("an integer of about 121 digits")
    assert preview("x" * 100) == repr("x" * 40 + "...")
    assert preview({"a": [[[]]]}) == "an object" and preview(None) == "null"
