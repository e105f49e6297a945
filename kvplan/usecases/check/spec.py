"""The check spec file (TOML, or JSON): what to evaluate and what must hold.

    [target]                                   # a saved profile, or a plan made on the spot
    profile = "profiles/qwen2-0.5b-l4.json"
    [[assert]]
    min_kv_tokens = 500000
    [[assert]]
    workload = "workloads/chat.json"
    max_preemptions = 0

Paths are relative to the spec file. Every mistake is a ``KvplanError`` (exit 2) whose one line
names the file and the field. ``docs/check.md`` is the reference."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvplan.errors import KvplanError
from kvplan.files import parse_json, parse_toml, read_input_text
from kvplan.parsing import first_unknown_key
from kvplan.schema import check_document
from kvplan.semantics.engine.args import check_value, setting
from kvplan.semantics.releases import Release, release_named
from kvplan.sources.installed import default_release
from kvplan.sources.models import model_named_in_file
from kvplan.units import parse_bytes, parse_duration
from kvplan.usecases.check.assertions import KINDS, OBJECTIVE_NAMES, SECONDS, Assertion, AssertionKind, Concurrency
from kvplan.usecases.check.spec_format import SPEC
from kvplan.usecases.plan_settings import PLANNED_IN_FILES, PLANNING_SETTINGS

TOP_KEYS = ("schema_version", "name", "description", "vllm_version", "target", "assert")
BLOCK_KEYS = ("name", "workload", "seed", "step_time_ms")
# [target] keys that plan on the spot, as every planning file takes them (`PLANNING_SETTINGS`): kvplan's own
# (gpu, gpu_memory), then vLLM's engine arguments under their file keys, each read by its `Setting`
PLAN_SETTINGS = tuple(PLANNING_SETTINGS)
_ENGINE_ARG = {setting(name).key or name: name for name in PLANNED_IN_FILES}
TARGET_KEYS = ("profile", "model", "config_sha256", *PLAN_SETTINGS)


@dataclass(frozen=True)
class TargetSpec:
    """``profile`` names a saved profile: ``model``, ``config_sha256`` and the settings are then what
    its provenance must match. Without it, ``model`` and the settings are planned on the spot."""

    profile: Path | None = None
    model: str | None = None
    config_sha256: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class AssertBlock:
    index: int
    name: str | None
    workload: Path | None
    seed: int | None
    step_time_ms: float | None
    assertions: tuple[Assertion, ...]


@dataclass(frozen=True)
class CheckSpec:
    path: Path
    name: str
    target: TargetSpec | None
    blocks: tuple[AssertBlock, ...]
    release: Release = field(default_factory=default_release)   # whose numbers the check asserts

    @property
    def needs_target(self) -> bool:
        return any(a.kind.scope == "capacity" for block in self.blocks for a in block.assertions)


def load_spec(path: Path) -> CheckSpec:
    """Read and validate a spec file; TOML unless its name ends in .json."""
    shown = path.name
    text = read_input_text(path, shown)
    document = parse_json(text, shown) if path.suffix.lower() == ".json" else parse_toml(text, shown)
    return parse_spec(document, path)


def parse_spec(document: Any, path: Path) -> CheckSpec:
    """A spec document: every key checked against `SPEC` (types, ranges), then the rules between keys."""
    shown = path.name

    def fail(where: str, message: str) -> KvplanError:
        return KvplanError(f"{shown}: {where}: {message}")

    check_document(SPEC, document, shown)
    base = path.parent
    target = _parse_target(document["target"], base, shown) if "target" in document else None
    raw_blocks = document.get("assert")
    if not isinstance(raw_blocks, list) or not raw_blocks:
        raise fail("assert", "give at least one [[assert]] block of requirements")
    blocks = tuple(_parse_block(raw, index, base, shown) for index, raw in enumerate(raw_blocks))
    # checked against SPEC above: a release kvplan reproduces
    release = release_named(document["vllm_version"]) if "vllm_version" in document else default_release()
    spec = CheckSpec(path, str(document.get("name") or path.stem), target, blocks, release)
    if target is None and spec.needs_target:
        raise fail("target", "capacity assertions need a [target]: profile = \"profile.json\", or model "
                             "and kv_cache_memory to plan on the spot")
    return spec


def _reject_unknown(table: dict[str, Any], allowed: tuple[str, ...], where: str) -> None:
    """`where` names the table, ending where the key's name goes: "spec.toml: target."."""
    unknown = first_unknown_key(table, allowed)
    if unknown is not None:
        key, close = unknown
        hint = f"; did you mean {close}?" if close else f"; known keys: {', '.join(allowed)}"
        raise KvplanError(f"{where}{key}: unknown key{hint}")


def _relative(base: Path, value: str) -> Path:
    path = Path(value).expanduser()
    return path if path.is_absolute() else base / path


def _parse_target(raw: Any, base: Path, shown: str) -> TargetSpec:
    if not isinstance(raw, dict):
        raise KvplanError(f"{shown}: target: expected a table ([target])")
    _reject_unknown(raw, TARGET_KEYS, f"{shown}: target.")
    profile = raw.get("profile")
    model = raw.get("model")
    for key in ("profile", "model", "config_sha256"):
        if key in raw and (not isinstance(raw[key], str) or not raw[key]):
            raise KvplanError(f"{shown}: target.{key}: expected a non-empty string, got {raw[key]!r}")
    if profile is None and model is None:
        raise KvplanError(f"{shown}: target: give profile = \"profile.json\" (saved by `kvplan profile --save`) "
                          "or model = \"...\" to plan on the spot")
    if model is not None:
        try:
            model = model_named_in_file(model, base)  # a config.json or model directory next to the spec
        except KvplanError as error:
            raise KvplanError(f"{shown}: target.model: {error}") from None
    settings = {key: parse_setting(key, raw[key], f"{shown}: target.{key}") for key in PLAN_SETTINGS if key in raw}
    return TargetSpec(
        profile=_relative(base, profile) if profile is not None else None,
        model=model,
        config_sha256=raw.get("config_sha256"),
        settings=settings,
    )


def parse_setting(key: str, value: Any, where: str) -> Any:
    """One planning setting, typed as `kvplan plan` takes it (sizes as bytes): an engine argument as
    `EngineArgs` reads it (the command line's reader), kvplan's gpu and gpu_memory by their kinds."""
    if key in _ENGINE_ARG:
        return setting(_ENGINE_ARG[key]).read(value, where)
    kind = PLANNING_SETTINGS[key].kind
    return kind.normal(check_value(kind, value, where))


def _parse_block(raw: Any, index: int, base: Path, shown: str) -> AssertBlock:
    where = f"assert[{index}]"
    if not isinstance(raw, dict):
        raise KvplanError(f"{shown}: {where}: expected a table ([[assert]])")
    _reject_unknown(raw, (*BLOCK_KEYS, *KINDS, *OBJECTIVE_NAMES), f"{shown}: {where}.")
    for alias, key in OBJECTIVE_NAMES.items():
        if alias in raw and key in raw:
            raise KvplanError(f"{shown}: {where}: {alias} and {key} are the same objective: give one of them")
    workload = raw.get("workload")
    if workload is not None and (not isinstance(workload, str) or not workload):
        raise KvplanError(f"{shown}: {where}.workload: expected a path to a workload file, got {workload!r}")
    seed = raw.get("seed")
    if seed is not None and (isinstance(seed, bool) or not isinstance(seed, int) or seed < 0):
        raise KvplanError(f"{shown}: {where}.seed: expected a whole number >= 0, got {seed!r}")
    step = raw.get("step_time_ms")
    if step is not None and (isinstance(step, bool) or not isinstance(step, int | float) or step <= 0):
        raise KvplanError(f"{shown}: {where}.step_time_ms: expected a number > 0, got {step!r}")
    name = raw.get("name")
    if name is not None and not isinstance(name, str):
        raise KvplanError(f"{shown}: {where}.name: expected a string, got {name!r}")
    assertions = []
    for key, value in raw.items():
        if key in BLOCK_KEYS:
            continue
        kind = KINDS[OBJECTIVE_NAMES.get(str(key), str(key))]
        field_where = f"{shown}: {where}.{key}"
        if kind.scope == "workload" and workload is None:
            raise KvplanError(f"{field_where}: a workload assertion needs workload = \"workload.json\" "
                              "in the same [[assert]] block")
        assertions.append(Assertion(kind, parse_required(kind, value, field_where), f"{where}.{key}"))
    if not assertions:
        raise KvplanError(f"{shown}: {where}: no assertion in this block; see docs/check.md for the keys")
    if (seed is not None or step is not None) and workload is None:
        raise KvplanError(f"{shown}: {where}: seed and step_time_ms apply to a workload; add workload = \"...\"")
    return AssertBlock(index, name, _relative(base, workload) if workload else None,
                       seed, float(step) if step is not None else None, tuple(assertions))


# ---------------------------------------------------------------------------- required values


def parse_required(kind: AssertionKind, value: Any, where: str) -> Any:
    """The required value of one assertion, from a spec value or a flag's text."""
    if isinstance(value, str) and kind.unit == SECONDS:
        value = parse_duration(value, where)        # "500ms", as `fit --slo` takes it
    elif isinstance(value, str) and kind.value not in ("bytes", "concurrency"):
        value = _from_text(kind, value, where)
    if kind.value == "bool":
        if not isinstance(value, bool):
            raise KvplanError(f"{where}: expected true or false, got {value!r}")
        return value
    if kind.value == "bytes":
        if isinstance(value, bool) or not isinstance(value, int | str):
            raise KvplanError(f"{where}: expected a byte count or a size such as \"24GiB\", got {value!r}")
        return parse_bytes(value, where)
    if kind.value == "concurrency":
        return _concurrency(value, where)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise KvplanError(f"{where}: expected a number, got {value!r}")
    if kind.value in ("count", "tokens"):
        if not float(value).is_integer():
            raise KvplanError(f"{where}: expected a whole number of {kind.unit}, got {value!r}")
        value = int(value)
        if value < (1 if kind.value == "tokens" else 0):
            raise KvplanError(f"{where}: must be {'positive' if kind.value == 'tokens' else '0 or more'}, got {value}")
        return value
    if kind.value == "fraction" and not 0 <= value <= 1:
        raise KvplanError(f"{where}: expected a share between 0 and 1 (0.9 = 90%), got {value!r}")
    if value < 0:
        raise KvplanError(f"{where}: must be 0 or more, got {value!r}")
    return float(value)


def _from_text(kind: AssertionKind, text: str, where: str) -> Any:
    cleaned = text.strip().lower().replace("_", "").replace(",", "")
    if kind.value == "bool":
        if cleaned in ("true", "yes", "on", "1"):
            return True
        if cleaned in ("false", "no", "off", "0"):
            return False
        raise KvplanError(f"{where}: expected true or false, got {text!r}")
    try:
        number = float(cleaned)
    except ValueError:
        raise KvplanError(f"{where}: expected a number, got {text!r}") from None
    return int(number) if number.is_integer() and kind.value in ("count", "tokens") else number


def _concurrency(value: Any, where: str) -> Concurrency:
    if isinstance(value, str):
        # the flag's form: "16" (at max_model_len) or "16@8192" (16 requests of 8192 tokens)
        count_text, _, tokens_text = value.partition("@")
        try:
            table: dict[str, Any] = {"at_least": float(count_text)}
            if tokens_text:
                table["tokens_per_request"] = int(tokens_text.replace("_", "").replace(",", ""))
        except ValueError:
            raise KvplanError(f"{where}: expected X or X@TOKENS (e.g. 16@8192), got {value!r}") from None
        value = table
    if isinstance(value, dict):
        _reject_unknown(value, ("tokens_per_request", "at_least"), f"{where}.")
        if "at_least" not in value:
            raise KvplanError(f"{where}.at_least: required key is missing (how many requests at once)")
        tokens = value.get("tokens_per_request")
        if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1):
            raise KvplanError(f"{where}.tokens_per_request: expected a positive whole number, got {tokens!r}")
        at_least = value["at_least"]
    else:
        tokens, at_least = None, value
    if isinstance(at_least, bool) or not isinstance(at_least, int | float) or not at_least > 0:
        raise KvplanError(f"{where}: expected a concurrency > 0 (requests at once), got {at_least!r}")
    return Concurrency(float(at_least), tokens)
