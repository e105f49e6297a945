"""The check spec (TOML, or JSON; `docs/check.md`), described once: the [target] and every
[[assert]] key with its type and range. `load_spec` checks a spec against `SPEC` before reading
it; docs/schemas/input/check-spec.json is `SPEC` published.

`trust_remote_code` is refused in a spec: a file kvplan reads never enables code execution; the
flag `kvplan check --trust-remote-code` does."""

from __future__ import annotations

from kvplan import limits
from kvplan.errors import KvplanError
from kvplan.schema import (
    Boolean,
    ByteSize,
    Checked,
    Either,
    Field,
    Integer,
    Kind,
    ListOf,
    Number,
    Record,
    Text,
    schema_version,
)
from kvplan.semantics.engine.trace_format import SCHEMA_KEY, VLLM_VERSION
from kvplan.units import DURATION_EXAMPLES, parse_duration
from kvplan.usecases.check.assertions import KINDS, OBJECTIVE_NAMES, SECONDS, AssertionKind
from kvplan.usecases.plan_settings import MODEL, PLANNING_SETTINGS
from kvplan.usecases.simulate.workload_format import NO_REMOTE_CODE

SPEC_SCHEMA_VERSION = 1
PATH = Text(max_length=limits.MAX_PATH, controls=False, description="a path, relative to the spec file")

MAX_THRESHOLD = 10**12
MAX_BLOCKS_PER_SPEC = 1000

CONCURRENCY = Either((
    Number(0, limits.MAX_SEQS * 1000, exclusive_minimum=True, description="requests at once, at max_model_len"),
    Text(max_length=64, description="X or X@TOKENS (16@8192: 16 requests of 8192 tokens)"),
    Record({"at_least": Field(Number(0, limits.MAX_SEQS * 1000, exclusive_minimum=True), required=True),
            "tokens_per_request": Field(Integer(1, limits.MAX_TOKENS))}),
))


def _duration_problem(text: str) -> str | None:
    try:
        parse_duration(text, "duration")
    except KvplanError as error:
        return str(error).removeprefix("duration: ")
    return None


# a latency as `fit --slo` writes it ("500ms", "0.5s"); a bare number is seconds
DURATION = Checked(Text(max_length=64, controls=False), _duration_problem, "a duration: 500ms, 0.5s",
                   says=f"a duration ({DURATION_EXAMPLES})")


def threshold(kind: AssertionKind) -> Kind:
    """What the required value of an assertion kind may be."""
    text = f"{kind.meaning} ({kind.bound} {kind.unit})".replace(" ()", "").strip()
    if kind.unit == SECONDS:
        return Either((Number(0, MAX_THRESHOLD), DURATION), description=text)
    if kind.value == "bool":
        return Boolean(text)
    if kind.value == "bytes":
        return ByteSize(0, limits.MAX_BYTES, text)
    if kind.value == "concurrency":
        return CONCURRENCY
    if kind.value == "tokens":
        return Integer(1, MAX_THRESHOLD, text)
    if kind.value == "count":
        return Integer(0, MAX_THRESHOLD, text)
    if kind.value == "fraction":
        return Number(0, 1, description=text)
    return Number(0, MAX_THRESHOLD, description=text)


TARGET = Record({
    "profile": Field(PATH, description="a profile saved by `kvplan profile --save`"),
    "model": Field(MODEL),
    "config_sha256": Field(Text(max_length=64, description="sha256 of the model's config.json")),
    **PLANNING_SETTINGS,
}, "what the assertions are evaluated on: a saved profile, or a plan made on the spot", title="a [target] table",
    refused={"trust_remote_code": NO_REMOTE_CODE})

ASSERT_BLOCK = Record({
    "name": Field(Text()),
    "workload": Field(PATH, description="a workload file; needed by workload assertions"),
    "seed": Field(Integer(0, limits.MAX_SEED)),
    "step_time_ms": Field(Number(0, limits.MAX_STEP_MS, exclusive_minimum=True)),
    **{key: Field(threshold(kind)) for key, kind in KINDS.items()},
    **{name: Field(threshold(KINDS[key]), description=f"{key}, as `kvplan fit --slo` names it")
       for name, key in OBJECTIVE_NAMES.items()},
}, "requirements: capacity assertions, and workload assertions with a workload", title="an [[assert]] table")

SPEC = Record({
    **SCHEMA_KEY,
    "schema_version": Field(schema_version(SPEC_SCHEMA_VERSION)),
    "name": Field(Text()),
    "description": Field(Text(max_length=100_000, min_length=0)),
    "vllm_version": Field(VLLM_VERSION),
    "target": Field(TARGET),
    "assert": Field(ListOf(ASSERT_BLOCK, 1, MAX_BLOCKS_PER_SPEC), required=True,
                    description="give at least one [[assert]] block of requirements"),
}, title="a kvplan check spec: [target] and [[assert]] blocks")
