"""Declarative descriptions of kvplan's input formats: one description validates a document and
publishes its JSON Schema.

A format is described with a few kinds: `Integer`, `Number`, `Boolean`, `Text`, `ByteSize`,
`ListOf`, `Record` (keys with their kinds), `Tagged` (variants chosen by one key) and `Either`.
Every kind carries the range a real deployment can have (`kvplan.limits`), so that

    WORKLOAD.check(document, "")          # FieldError naming the field and what is allowed
    json_schema(WORKLOAD, title=...)      # the same rules for editors (docs/schemas/input/)

agree by construction. `check` runs before any arithmetic: a value that passes is an integer or a
finite number inside its range, or a text that any output can carry (valid Unicode, no control
characters where a name is expected). Cross-field rules (one pool source, min <= max) stay with
the parsers that need them.
"""

from __future__ import annotations

import difflib
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from kvplan import limits
from kvplan.errors import KvplanError
from kvplan.parsing import FieldError, child
from kvplan.units import parse_size, shown_text

JsonSchema = dict[str, Any]
JSON_SCHEMA_DIALECT = "https://json-schema.org/draft/2020-12/schema"
SIZE_PATTERN = r"^\s*[0-9]+(_[0-9]+)*(\.[0-9]+)? ?([kmgtpKMGTP]|[kKmMgGtTpP]?[iI]?[bB])?\s*$"


def preview(value: Any) -> str:
    """A value as an error message shows it: short, and safe whatever the value holds."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int):
        if value.bit_length() > 96:
            return f"an integer of about {int(value.bit_length() * math.log10(2)) + 1} digits"
        return str(value)
    if isinstance(value, float):
        return repr(value)
    if isinstance(value, str):
        return shown_text(value)
    if isinstance(value, list):
        return f"a list of {len(value)} items"
    if isinstance(value, dict):
        return "an object"
    return type(value).__name__


def json_type(value: Any) -> str:
    """The JSON type of a parsed value ("integer" for whole floats too, as JSON Schema counts them)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    if isinstance(value, dict):
        return "object"
    return type(value).__name__


class Kind:
    """One kind of value: what it accepts (`check`), says (`expected`) and publishes (`schema`)."""

    description: str = ""
    json_types: tuple[str, ...] = ()

    def check(self, value: Any, path: str) -> None:
        raise NotImplementedError

    def expected(self) -> str:
        raise NotImplementedError

    def schema(self) -> JsonSchema:
        raise NotImplementedError

    def normal(self, value: Any) -> Any:
        """A checked value as kvplan holds it: the same value, except where a kind has two spellings of
        one value (JSON and TOML write 12.0 for the integer 12), so that every reader of a setting holds it
        alike and whatever is hashed or shown from it does not depend on the file's spelling."""
        return value

    def fail(self, value: Any, path: str) -> FieldError:
        return FieldError(path, f"expected {self.expected()}, got {preview(value)}")

    def _described(self, schema: JsonSchema) -> JsonSchema:
        return {"description": self.description, **schema} if self.description else schema


def _count(value: int | float) -> str:
    if isinstance(value, float) and not value.is_integer():
        return f"{value:g}"
    number = int(value)
    if number >= 2**32 and (number + 1).bit_length() > number.bit_length():
        return f"2**{number.bit_length()} - 1"
    if number >= 10**6 and number == 10 ** (len(str(number)) - 1):
        return f"10**{len(str(number)) - 1}"
    return f"{number:,}"


@dataclass(frozen=True)
class Integer(Kind):
    minimum: int
    maximum: int
    description: str = ""
    json_types: tuple[str, ...] = ("integer",)

    def check(self, value: Any, path: str) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(value, path)
        if isinstance(value, float) and not value.is_integer():
            raise self.fail(value, path)
        if not self.minimum <= value <= self.maximum:
            raise FieldError(path, f"{preview(value)} is out of range: expected {self.expected()}")

    def normal(self, value: Any) -> Any:
        return int(value) if isinstance(value, float) else value

    def expected(self) -> str:
        if self.minimum == self.maximum:
            return f"the integer {self.minimum}"
        return f"an integer from {_count(self.minimum)} to {_count(self.maximum)}"

    def schema(self) -> JsonSchema:
        return self._described({"type": "integer", "minimum": self.minimum, "maximum": self.maximum})


@dataclass(frozen=True)
class Number(Kind):
    minimum: float
    maximum: float
    exclusive_minimum: bool = False
    description: str = ""
    json_types: tuple[str, ...] = ("integer", "number")

    def check(self, value: Any, path: str) -> None:
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.fail(value, path)
        if isinstance(value, float) and not math.isfinite(value):
            raise FieldError(path, f"{preview(value)} is not a finite number: expected {self.expected()}")
        low_ok = value > self.minimum if self.exclusive_minimum else value >= self.minimum
        if not (low_ok and value <= self.maximum):
            raise FieldError(path, f"{preview(value)} is out of range: expected {self.expected()}")

    def expected(self) -> str:
        low = f"above {_count(self.minimum)}" if self.exclusive_minimum else f"from {_count(self.minimum)}"
        joint = " and at most " if self.exclusive_minimum else " to "
        return f"a number {low}{joint}{_count(self.maximum)}"

    def schema(self) -> JsonSchema:
        bound = "exclusiveMinimum" if self.exclusive_minimum else "minimum"
        return self._described({"type": "number", bound: self.minimum, "maximum": self.maximum})


@dataclass(frozen=True)
class Boolean(Kind):
    description: str = ""
    json_types: tuple[str, ...] = ("boolean",)

    def check(self, value: Any, path: str) -> None:
        if not isinstance(value, bool):
            raise self.fail(value, path)

    def expected(self) -> str:
        return "true or false"

    def schema(self) -> JsonSchema:
        return self._described({"type": "boolean"})


def text_problem(value: str, *, controls: bool = False) -> str | None:
    """Why a text cannot be carried by every output kvplan writes (None when it can): it must be
    valid Unicode; without `controls`, also free of control characters (paths, ids kvplan passes on)."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as error:
        return f"holds {error.object[error.start:error.end]!a}, which is not valid Unicode (a lone surrogate)"
    if not controls:
        for ch in value:
            if ord(ch) < 0x20 or 0x7F <= ord(ch) < 0xA0:
                return f"holds the control character {ch!a}"
    return None


@dataclass(frozen=True)
class Text(Kind):
    max_length: int = limits.MAX_TEXT
    min_length: int = 1
    choices: tuple[str, ...] = ()
    controls: bool = True          # names and descriptions may hold any character (the writers escape
    description: str = ""          # them); paths, ids and settings kvplan passes on may not
    json_types: tuple[str, ...] = ("string",)

    def check(self, value: Any, path: str) -> None:
        if not isinstance(value, str):
            raise self.fail(value, path)
        problem = text_problem(value, controls=self.controls)
        if problem is not None:
            raise FieldError(path, f"{shown_text(value)} {problem}")
        if not self.min_length <= len(value) <= self.max_length:
            raise FieldError(path, f"expected {self.expected()}, got {len(value):,} characters")
        if self.choices and value not in self.choices:
            close = difflib.get_close_matches(value, self.choices, n=1)
            hint = f"; did you mean {close[0]}?" if close else ""
            raise FieldError(path, f"expected {self.expected()}, got {preview(value)}{hint}")

    def expected(self) -> str:
        if self.choices:
            return "one of: " + ", ".join(self.choices)
        if self.min_length:
            return f"a non-empty string of at most {self.max_length:,} characters"
        return f"a string of at most {self.max_length:,} characters"

    def schema(self) -> JsonSchema:
        if self.choices:
            return self._described({"type": "string", "enum": list(self.choices)})
        return self._described({"type": "string", "minLength": self.min_length, "maxLength": self.max_length})


@dataclass(frozen=True)
class ByteSize(Kind):
    """A byte count: an integer, or one number and one unit ("24GiB", "900MiB", "80GB", "24G")."""

    minimum: int = 1
    maximum: int = limits.MAX_BYTES
    description: str = ""
    json_types: tuple[str, ...] = ("integer", "string")

    def read(self, value: Any, path: str) -> int:
        """The byte count, checked."""
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise self.fail(value, path)
        if isinstance(value, str):
            try:
                value = parse_size(value, path)
            except KvplanError as error:
                raise FieldError("", str(error)) from None
        if not self.minimum <= value <= self.maximum:
            raise FieldError(path, f"{preview(value)} bytes is out of range: expected {self.expected()}")
        return value

    def check(self, value: Any, path: str) -> None:
        self.read(value, path)

    def normal(self, value: Any) -> Any:
        return self.read(value, "")       # "24GiB" and 25769803776 are one size

    def expected(self) -> str:
        top = f"{self.maximum >> 50} PiB" if self.maximum % (1 << 50) == 0 else f"{self.maximum:,} bytes"
        return f"a byte count from {self.minimum:,} to {top}: an integer, or a size such as \"24GiB\""

    def schema(self) -> JsonSchema:
        return self._described({"anyOf": [
            {"type": "integer", "minimum": self.minimum, "maximum": self.maximum},
            {"type": "string", "pattern": SIZE_PATTERN},
        ]})


@dataclass(frozen=True)
class ListOf(Kind):
    item: Kind
    min_items: int = 1
    max_items: int = limits.MAX_REQUESTS
    description: str = ""
    json_types: tuple[str, ...] = ("array",)

    def check(self, value: Any, path: str) -> None:
        if not isinstance(value, list):
            raise self.fail(value, path)
        if not self.min_items <= len(value) <= self.max_items:
            raise FieldError(path, f"expected {self.expected()}, got {len(value):,} items")
        item_kind = self.item
        if isinstance(item_kind, Integer):
            # token-id lists hold millions of integers: test them in one pass, explain the first bad one
            low, high = item_kind.minimum, item_kind.maximum
            for index, item in enumerate(value):
                if type(item) is not int or not low <= item <= high:
                    item_kind.check(item, child(path, index))
            return
        for index, item in enumerate(value):
            item_kind.check(item, child(path, index))

    def expected(self) -> str:
        if self.min_items:
            return f"a list of {self.min_items:,} to {_count(self.max_items)} items"
        return f"a list of at most {_count(self.max_items)} items"

    def described(self) -> str:
        """What the list holds, for the documentation: its length and its items."""
        return f"{self.expected()}, each {self.item.expected()}"

    def schema(self) -> JsonSchema:
        return self._described({"type": "array", "items": self.item.schema(), "minItems": self.min_items,
                                "maxItems": self.max_items})


@dataclass(frozen=True)
class Field:
    """One key of a record."""

    kind: Kind
    required: bool = False
    nullable: bool = False          # null stands for "not given"
    description: str = ""

    def schema(self) -> JsonSchema:
        schema = self.kind.schema()
        if self.nullable:
            schema = {"anyOf": [schema, {"type": "null"}]}
        if self.description:
            schema = {"description": self.description, **schema}
        return schema


def unknown_key_message(key: str, allowed: tuple[str, ...]) -> str:
    close = difflib.get_close_matches(key, allowed, n=1)
    if close:
        return f"unknown key; did you mean {close[0]}?"
    return f"unknown key; expected one of: {', '.join(allowed)}"


@dataclass(frozen=True)
class Record(Kind):
    """An object with known keys. `open` records (a model's config.json) let other keys through
    unchecked; closed ones name an unknown key with the closest known one."""

    fields: Mapping[str, Field]
    description: str = ""
    open: bool = False
    title: str = ""
    # keys a file must never set, with the line that says where the setting belongs instead
    refused: Mapping[str, str] = field(default_factory=dict)
    json_types: tuple[str, ...] = ("object",)

    def check(self, value: Any, path: str) -> None:
        if not isinstance(value, dict):
            raise self.fail(value, path)
        for key, why in self.refused.items():
            if key in value:
                raise FieldError(child(path, key), why)
        if not self.open:
            allowed = tuple(self.fields)
            for key in value:
                if key not in self.fields:
                    shown = key if isinstance(key, str) and text_problem(key) is None else ascii(key)
                    raise FieldError(child(path, shown), unknown_key_message(shown, allowed))
        for key, spec in self.fields.items():
            if key not in value:
                if spec.required:
                    hint = f" ({spec.description})" if spec.description else ""
                    raise FieldError(child(path, key), f"required key is missing{hint}")
                continue
            item = value[key]
            if item is None and spec.nullable:
                continue
            spec.kind.check(item, child(path, key))

    def expected(self) -> str:
        return f"an object ({self.title})" if self.title else "an object"

    def schema(self) -> JsonSchema:
        schema: JsonSchema = {
            "type": "object",
            "properties": {key: spec.schema() for key, spec in self.fields.items()},
            "additionalProperties": self.open,
        }
        required = [key for key, spec in self.fields.items() if spec.required]
        if required:
            schema["required"] = required
        if self.title:
            schema = {"title": self.title, **schema}
        return self._described(schema)


@dataclass(frozen=True)
class Tagged(Kind):
    """Variants told apart by one key (`"dist": "lognormal"`), and optionally a shorthand for a
    value that is not an object (a bare number for a constant)."""

    tag: str
    variants: Mapping[str, Record]
    shorthand: Kind | None = None
    description: str = ""

    @property
    def json_types(self) -> tuple[str, ...]:  # type: ignore[override]
        return ("object", *(self.shorthand.json_types if self.shorthand else ()))

    def check(self, value: Any, path: str) -> None:
        if self.shorthand is not None and not isinstance(value, dict):
            if json_type(value) in self.shorthand.json_types:
                self.shorthand.check(value, path)
                return
            raise self.fail(value, path)
        if not isinstance(value, dict):
            raise self.fail(value, path)
        if self.tag not in value:
            raise FieldError(child(path, self.tag), f"required key is missing (one of: {', '.join(self.variants)})")
        name = value[self.tag]
        if not isinstance(name, str) or name not in self.variants:
            close = difflib.get_close_matches(name, self.variants, n=1) if isinstance(name, str) else []
            hint = f"; did you mean {close[0]}?" if close else ""
            raise FieldError(child(path, self.tag),
                             f"expected one of: {', '.join(self.variants)}, got {preview(name)}{hint}")
        self.variants[name].check(value, path)

    def expected(self) -> str:
        base = f"an object with {self.tag} one of: {', '.join(self.variants)}"
        return f"{self.shorthand.expected()}, or {base}" if self.shorthand else base

    def schema(self) -> JsonSchema:
        options = []
        if self.shorthand is not None:
            options.append(self.shorthand.schema())
        for name, record in self.variants.items():
            variant = record.schema()
            variant["properties"] = {**variant["properties"], self.tag: {"const": name}}
            variant["required"] = sorted({self.tag, *variant.get("required", [])})
            options.append(variant)
        return self._described({"oneOf": options})


@dataclass(frozen=True)
class Either(Kind):
    """One of several kinds; the value's JSON type picks the candidates."""

    options: tuple[Kind, ...]
    description: str = ""

    @property
    def json_types(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(dict.fromkeys(t for option in self.options for t in option.json_types))

    def check(self, value: Any, path: str) -> None:
        kind = json_type(value)
        candidates = [option for option in self.options
                      if kind in option.json_types or (kind == "integer" and "number" in option.json_types)]
        problems = []
        for option in candidates:
            try:
                option.check(value, path)
                return
            except FieldError as error:
                problems.append(error)
        if len(problems) == 1:
            raise problems[0]
        raise self.fail(value, path)

    def normal(self, value: Any) -> Any:
        for option in self.options:
            try:
                option.check(value, "")
            except FieldError:
                continue
            return option.normal(value)
        return value

    def expected(self) -> str:
        return ", or ".join(option.expected() for option in self.options)

    def schema(self) -> JsonSchema:
        return self._described({"anyOf": [option.schema() for option in self.options]})


@dataclass(frozen=True)
class Checked(Kind):
    """A kind with one more rule that a schema cannot say (a GPU key that the catalog knows)."""

    kind: Kind
    rule: Callable[[Any], str | None] = field(compare=False)
    description: str = ""
    schema_extra: Mapping[str, Any] = field(default_factory=dict)   # what the schema can say of the rule
    says: str = ""                                                  # what is allowed, when the kind says less

    @property
    def json_types(self) -> tuple[str, ...]:  # type: ignore[override]
        return self.kind.json_types

    def check(self, value: Any, path: str) -> None:
        self.kind.check(value, path)
        problem = self.rule(value)
        if problem is not None:
            raise FieldError(path, problem)

    def normal(self, value: Any) -> Any:
        return self.kind.normal(value)

    def expected(self) -> str:
        return self.says or self.kind.expected()

    def schema(self) -> JsonSchema:
        return self._described({**self.kind.schema(), **self.schema_extra})


def schema_version(supported: int) -> Checked:
    """The `schema_version` key of a format this kvplan reads in version `supported`."""
    def unsupported(value: int) -> str | None:
        return None if value == supported else f"unsupported version {value} (this kvplan reads {supported})"
    return Checked(Integer(1, 10**6), unsupported, "the format's version", {"const": supported},
                   says=f"the integer {supported}")


def check_document(kind: Kind, document: Any, shown: str) -> None:
    """Validate a whole document; exit 2 with one line naming the file, the field and what is allowed."""
    try:
        kind.check(document, "")
    except FieldError as error:
        raise KvplanError(f"{shown}: {error}") from None


def json_schema(kind: Kind, *, title: str, schema_id: str) -> JsonSchema:
    """The published JSON Schema of a format (draft 2020-12)."""
    return {"$schema": JSON_SCHEMA_DIALECT, "$id": schema_id, "title": title, **kind.schema()}
