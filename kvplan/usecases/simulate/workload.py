"""The workload file (schema_version 1): reading, validation, and the plan of what arrives when.

A workload is either a request mix (``classes`` + ``arrival``) or an explicit request list
(``requests``: inline, or a path to a trace-replay JSON file or a JSON Lines file), plus the
engine it runs on (``engine``), an optional step-time model (``timing``) and a ``seed``. Every
mistake is one line naming the field (exit code 2). ``docs/workload.md`` is the reference.
"""

from __future__ import annotations

import bisect
import random
from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from kvplan.errors import KvplanError
from kvplan.files import parse_json, read_input_text
from kvplan.limits import MAX_REQUESTS
from kvplan.parsing import (
    FieldError,
    as_int,
    as_list,
    as_number,
    as_object,
    as_str,
    child,
    get,
    parse_calibration,
    reject_unknown,
)
from kvplan.schema import check_document
from kvplan.semantics.engine.args import MEMORY, SCHEDULES, WORKLOADS, EngineArgs, named, setting
from kvplan.semantics.engine.groups import KVCacheGroup
from kvplan.semantics.engine.trace import GROUPS_KEY, parse_groups
from kvplan.semantics.engine.trace_format import TRACE
from kvplan.semantics.releases import Scheduling
from kvplan.sources.models import local_model_path, model_named_in_file
from kvplan.usecases.simulate.arrivals import ArrivalProcess, arrival_times, parse_arrival
from kvplan.usecases.simulate.distributions import Distribution, parse_distribution
from kvplan.usecases.simulate.frontend import (
    DEFAULT_LATENCY_MS,
    DEFAULT_REQUEST_MS,
    DEFAULT_STREAM_WAIT_MS,
    DEFAULT_TOKEN_MS,
    FrontEnd,
)
from kvplan.usecases.simulate.workload_format import REQUEST_LIST, WORKLOAD, WORKLOAD_REQUEST

SCHEMA_VERSION = 1
TOP_KEYS = ("schema_version", "description", "seed", "engine", "timing", "classes", "arrival", "requests")
ENGINE_SOURCES = ("num_gpu_blocks", "profile", "model")
# vLLM's engine arguments the section takes (`EngineArgs`; a file names kv_cache_memory_bytes kv_cache_memory)
SCHEDULER_ARGS = named(SCHEDULES)
# and those that plan the pool of engine.model (`EngineArgs`'s WORKLOADS role), beside gpu and gpu_memory
PLANNING_ARGS = named(WORKLOADS)
# the trace format's own settings beside them (docs/vllm/replay-contract.md §1)
TRACE_SETTINGS = ("hash_algo", "hash_seed", "vllm_version", "scheduling")
ENGINE_SETTINGS = (*SCHEDULER_ARGS, *TRACE_SETTINGS)
PLANNING_KEYS = ("gpu_memory", *(setting(name).key or name for name in PLANNING_ARGS))
ENGINE_KEYS = (*ENGINE_SOURCES, "gpu", *PLANNING_KEYS, *ENGINE_SETTINGS)
TIMING_KEYS = ("step_time_ms", "calibration", "gpu", "weights_bytes", "kv_bytes_per_token", "overhead_ms", "frontend")
FRONTEND_KEYS = ("request_ms", "token_ms", "latency_ms", "stream_wait_ms")
CLASS_KEYS = ("name", "weight", "prompt_tokens", "output_tokens", "shared_prefix", "turns")


@dataclass(frozen=True)
class EngineSpec:
    """The ``engine`` section as written: at most one pool source, planning inputs, vLLM's engine
    arguments (`args`) and the trace format's own settings."""

    num_gpu_blocks: int | None = None
    profile: Path | None = None
    model: str | None = None
    gpu: str | None = None
    gpu_memory: int | None = None
    args: EngineArgs = field(default_factory=EngineArgs)
    hash_algo: str | None = None
    hash_seed: str | None = None
    vllm_version: str | None = None
    scheduling: Scheduling | None = None
    # the KV cache groups of a pool given by its size (a check target's plan); None: one full-attention group
    kv_cache_groups: tuple[KVCacheGroup, ...] | None = None

    def settings_alone(self) -> EngineSpec:
        """The section's engine settings without its pool source and the inputs that size a planned
        pool: what a run on another pool keeps of it."""
        return EngineSpec(args=EngineArgs(**{name: getattr(self.args, name) for name in SCHEDULER_ARGS}),
                          hash_algo=self.hash_algo, hash_seed=self.hash_seed, vllm_version=self.vllm_version,
                          scheduling=self.scheduling)


@dataclass(frozen=True)
class TimingSpec:
    step_time_ms: float | None = None
    calibration: tuple[tuple[int, float], ...] = ()
    gpu: str | None = None
    weights_bytes: int | None = None
    kv_bytes_per_token: int | None = None
    overhead_ms: float | None = None
    frontend: FrontEnd | None = None    # the serving front end: client-observed latency (None: engine only)


@dataclass(frozen=True)
class SharedPrefix:
    """A system prompt of ``tokens`` tokens, identical for every request naming it."""

    name: str
    tokens: int


@dataclass(frozen=True)
class Turns:
    """Multi-turn conversations: turn k+1's prompt is turn k's prompt and output plus new user tokens."""

    count: Distribution
    user_tokens: Distribution
    think_time_s: Distribution


@dataclass(frozen=True)
class RequestClass:
    name: str
    weight: float
    prompt_tokens: Distribution  # user tokens of the first turn, after the shared prefix
    output_tokens: Distribution
    shared_prefix: SharedPrefix | None
    turns: Turns | None


@dataclass(frozen=True)
class Workload:
    name: str
    seed: int
    engine: EngineSpec
    timing: TimingSpec
    classes: tuple[RequestClass, ...] = ()
    arrival: ArrivalProcess | None = None
    # an explicit request list: trace-replay request objects, validated against the engine later
    requests: tuple[dict[str, Any], ...] = ()
    requests_source: str = ""
    inputs: tuple[Path, ...] = ()  # every file the workload was read from, never to be overwritten

    @property
    def is_explicit(self) -> bool:
        return not self.classes

    @property
    def arrivals_in_steps(self) -> bool:
        """True for explicit lists timed by ``arrival_step`` (the trace-replay format)."""
        return self.is_explicit and not any("arrival_time" in r for r in self.requests)


# ---------------------------------------------------------------------------- reading files


def load_workload(path: Path) -> Workload:
    """Read a workload file, a trace-replay file or a JSON Lines request list; every value is checked
    against the workload's description (`workload_format`) before it is used."""
    if path.suffix == ".jsonl":
        requests = _read_jsonl(path, path.name)
        workload = Workload(path.name, 0, EngineSpec(), TimingSpec(), requests=requests, requests_source=path.name)
    else:
        # a file that cannot be read is named as given: its name alone would hide a folder ("[/].json")
        document = parse_json(read_input_text(path, str(path)), path.name)
        if isinstance(document, dict) and "schema_version" not in document and "config" in document:
            check_document(TRACE, document, path.name)
            workload = _from_trace(document, path.name)
        else:
            check_document(WORKLOAD, document, path.name)
            try:
                workload = parse_workload(document, path.parent, path.name)
            except FieldError as error:
                raise KvplanError(f"{path.name}: {error}") from None
    inputs = [path, *([workload.engine.profile] if workload.engine.profile else [])]
    if workload.requests_source not in ("", path.name):
        inputs.append(path.parent / workload.requests_source)
    model = local_model_path(workload.engine.model) if workload.engine.model else None
    if model is not None:
        inputs.append(model)
    return replace(workload, inputs=tuple(inputs))


def _read_jsonl(path: Path, shown: str) -> tuple[dict[str, Any], ...]:
    rows = []
    for number, line in enumerate(read_input_text(path, shown).splitlines(), start=1):
        if not line.strip():
            continue
        row = parse_json(line, f"{shown}: line {number}")
        check_document(WORKLOAD_REQUEST, row, f"{shown}: line {number}")
        rows.append(row)
    if not rows:
        raise KvplanError(f"{shown}: no requests in the file")
    if len(rows) > MAX_REQUESTS:
        raise KvplanError(f"{shown}: {len(rows):,} requests, more than the {MAX_REQUESTS:,} kvplan simulates")
    return _with_ids(rows)


def _from_trace(document: dict[str, Any], name: str) -> Workload:
    """A trace-replay file: its ``config`` is the engine, its ``requests`` the explicit list."""
    config = document.get("config", {})
    if not isinstance(config, dict):
        raise KvplanError(f"{name}: config: expected an object")
    requests = document.get("requests")
    if not isinstance(requests, list) or not requests:
        raise KvplanError(f"{name}: requests: expected a non-empty list of request objects")
    try:
        engine = _parse_engine({k: v for k, v in config.items() if k != GROUPS_KEY}, "config", Path("."))
    except FieldError as error:
        raise KvplanError(f"{name}: {error}") from None
    if config.get(GROUPS_KEY) is not None:
        # a hybrid trace's KV cache groups, as `kvplan replay` reads them (checked against TRACE)
        engine = replace(engine, kv_cache_groups=parse_groups(config[GROUPS_KEY], name))
    return Workload(name, 0, engine, TimingSpec(), requests=_with_ids(requests), requests_source=name)


def _with_ids(rows: list[Any]) -> tuple[dict[str, Any], ...]:
    # A user's log rarely names its requests; the ordinal does, as in the trace format's token ids.
    return tuple(
        {"request_id": f"r{i}", **row} if isinstance(row, dict) and "request_id" not in row else row
        for i, row in enumerate(rows)
    )


# ---------------------------------------------------------------------------- parsing


def parse_workload(document: Any, base_dir: Path, name: str = "workload") -> Workload:
    top = as_object(document, "")
    reject_unknown(top, "", TOP_KEYS)
    version = get(top, "schema_version", "", as_int)
    if version != SCHEMA_VERSION:
        raise FieldError("schema_version", f"unsupported version {version} (this kvplan reads {SCHEMA_VERSION})")
    get(top, "description", "", as_str, "")
    seed = get(top, "seed", "", as_int, 0, minimum=0)
    engine = _parse_engine(top.get("engine", {}), "engine", base_dir)
    timing = _parse_timing(top.get("timing", {}), "timing")
    has_mix = "classes" in top or "arrival" in top
    if has_mix == ("requests" in top):
        raise FieldError("requests", "give either classes + arrival (a request mix) or requests (a list), not both")
    if "requests" in top:
        requests, source = _parse_request_list(top["requests"], "requests", base_dir, name)
        return Workload(name, seed, engine, timing, requests=requests, requests_source=source)
    classes = _parse_classes(top.get("classes"), "classes")
    arrival = parse_arrival(top.get("arrival"), "arrival")
    return Workload(name, seed, engine, timing, classes=classes, arrival=arrival)


def _parse_engine(raw: Any, path: str, base_dir: Path) -> EngineSpec:
    obj = as_object(raw, path)
    reject_unknown(obj, path, ENGINE_KEYS)
    sources = [key for key in ENGINE_SOURCES if key in obj]
    if len(sources) > 1:
        raise FieldError(child(path, sources[1]), f"give one pool source, not both {sources[0]} and {sources[1]}")
    profile = get(obj, "profile", path, as_str, None)
    model = get(obj, "model", path, as_str, None)
    if model is not None:
        try:
            model = model_named_in_file(model, base_dir)  # a model directory or config.json beside the workload
        except KvplanError as error:
            raise FieldError(child(path, "model"), str(error)) from None
    planning = [key for key in PLANNING_KEYS if key in obj]
    if planning and model is None:
        raise FieldError(child(path, planning[0]), "only applies when the engine is planned from engine.model")
    if "gpu" in obj and "gpu_memory" in obj:
        raise FieldError(child(path, "gpu_memory"), "give either gpu or gpu_memory, not both")
    gpu_memory = MEMORY.normal(obj["gpu_memory"]) if "gpu_memory" in obj else None    # checked by ENGINE
    args = {name: _engine_arg(name, obj[key], child(path, key))
            for name in (*SCHEDULER_ARGS, *PLANNING_ARGS) if (key := setting(name).key or name) in obj}
    trace: dict[str, Any] = {key: as_str(obj[key], child(path, key)) for key in TRACE_SETTINGS if key in obj}
    return EngineSpec(
        num_gpu_blocks=get(obj, "num_gpu_blocks", path, as_int, None, minimum=2),
        profile=(base_dir / profile) if profile is not None else None,
        model=model,
        gpu=get(obj, "gpu", path, as_str, None),
        gpu_memory=gpu_memory,
        args=EngineArgs(**args),
        **trace,
    )


def _engine_arg(name: str, value: Any, path: str) -> Any:
    """One engine argument as `EngineArgs` reads it (the command line's reader)."""
    try:
        return setting(name).read(value, path)
    except KvplanError as error:
        raise FieldError("", str(error)) from None


def _parse_timing(raw: Any, path: str) -> TimingSpec:
    obj = as_object(raw, path)
    reject_unknown(obj, path, TIMING_KEYS)
    if "step_time_ms" in obj and "calibration" in obj:
        raise FieldError(child(path, "calibration"), "give either step_time_ms or calibration, not both")
    calibration: tuple[tuple[int, float], ...] = ()
    if "calibration" in obj:
        calibration = parse_calibration(obj["calibration"], child(path, "calibration"))
    return TimingSpec(
        step_time_ms=get(obj, "step_time_ms", path, as_number, None, positive=True),
        calibration=calibration,
        gpu=get(obj, "gpu", path, as_str, None),
        weights_bytes=get(obj, "weights_bytes", path, as_int, None, minimum=1),
        kv_bytes_per_token=get(obj, "kv_bytes_per_token", path, as_int, None, minimum=1),
        overhead_ms=get(obj, "overhead_ms", path, as_number, None, minimum=0),
        frontend=_parse_frontend(obj["frontend"], child(path, "frontend")) if "frontend" in obj else None,
    )


def _parse_frontend(raw: Any, path: str) -> FrontEnd:
    """The front end's costs; each one left out takes its default (docs/accuracy.md)."""
    obj = as_object(raw, path)
    reject_unknown(obj, path, FRONTEND_KEYS)
    ms = {key: get(obj, key, path, as_number, None, minimum=0) for key in FRONTEND_KEYS}
    return FrontEnd(
        request_s=(DEFAULT_REQUEST_MS if ms["request_ms"] is None else ms["request_ms"]) / 1e3,
        token_s=(DEFAULT_TOKEN_MS if ms["token_ms"] is None else ms["token_ms"]) / 1e3,
        latency_s=(DEFAULT_LATENCY_MS if ms["latency_ms"] is None else ms["latency_ms"]) / 1e3,
        stream_wait_s=(DEFAULT_STREAM_WAIT_MS if ms["stream_wait_ms"] is None else ms["stream_wait_ms"]) / 1e3,
        source="timing.frontend" if any(v is not None for v in ms.values()) else FrontEnd().source,
    )


def _parse_classes(raw: Any, path: str) -> tuple[RequestClass, ...]:
    classes = []
    names: set[str] = set()
    for i, item in enumerate(as_list(raw, path)):
        class_path = child(path, i)
        obj = as_object(item, class_path)
        reject_unknown(obj, class_path, CLASS_KEYS)
        name = get(obj, "name", class_path, as_str, f"class{i}")
        if name in names:
            raise FieldError(child(class_path, "name"), f"class name {name!r} is used twice")
        names.add(name)
        classes.append(RequestClass(
            name=name,
            weight=get(obj, "weight", class_path, as_number, 1.0, positive=True),
            prompt_tokens=parse_distribution(_required(obj, "prompt_tokens", class_path),
                                             child(class_path, "prompt_tokens"), minimum=1),
            output_tokens=parse_distribution(_required(obj, "output_tokens", class_path),
                                             child(class_path, "output_tokens"), minimum=1),
            shared_prefix=_parse_prefix(obj["shared_prefix"], child(class_path, "shared_prefix"))
            if "shared_prefix" in obj else None,
            turns=_parse_turns(obj["turns"], child(class_path, "turns")) if "turns" in obj else None,
        ))
    return tuple(classes)


def _required(obj: Mapping[str, Any], key: str, path: str) -> Any:
    if key not in obj:
        raise FieldError(child(path, key), "required key is missing")
    return obj[key]


def _parse_prefix(raw: Any, path: str) -> SharedPrefix:
    obj = as_object(raw, path)
    reject_unknown(obj, path, ("name", "tokens"))
    return SharedPrefix(get(obj, "name", path, as_str), get(obj, "tokens", path, as_int, minimum=1))


def _parse_turns(raw: Any, path: str) -> Turns:
    obj = as_object(raw, path)
    reject_unknown(obj, path, ("count", "user_tokens", "think_time_s"))
    return Turns(
        count=parse_distribution(_required(obj, "count", path), child(path, "count"), minimum=1),
        user_tokens=parse_distribution(_required(obj, "user_tokens", path), child(path, "user_tokens"), minimum=1),
        think_time_s=parse_distribution(obj.get("think_time_s", 0), child(path, "think_time_s"), integer=False),
    )


def _parse_request_list(raw: Any, path: str, base_dir: Path, name: str) -> tuple[tuple[dict[str, Any], ...], str]:
    if isinstance(raw, str):
        file = base_dir / raw
        if file.suffix == ".jsonl":
            return _read_jsonl(file, raw), raw
        document = parse_json(read_input_text(file, raw), raw)
        if isinstance(document, dict) and "requests" in document:
            document = document["requests"]  # a trace-replay file: its request list
        check_document(REQUEST_LIST, document, f"{raw}: requests")
        return _with_ids(document), raw
    return _with_ids(as_list(raw, path)), name


# ---------------------------------------------------------------------------- the plan of arrivals


# slots: a plan is drawn for every arrival up front (a million for a day of traffic)
@dataclass(frozen=True, slots=True)
class PlannedTurn:
    user_tokens: int
    output_tokens: int
    think_time_s: float  # the gap before this turn, after the previous turn finished (0 for turn 0)


@dataclass(frozen=True, slots=True)
class PlannedConversation:
    """One arrival of a request mix: a single request, or the turns of one conversation."""

    ordinal: int
    class_index: int
    arrival_time: float
    turns: tuple[PlannedTurn, ...]


def plan_conversations(workload: Workload, seed: int, rate_factor: float = 1.0) -> list[PlannedConversation]:
    """Draw the arrivals and lengths of a request mix.

    Independent random streams (arrivals, class choice, one per class) keep a change to one part
    of the file from reshuffling the others; ``rate_factor`` scales the offered rate only."""
    assert workload.arrival is not None
    times = arrival_times(workload.arrival, random.Random(f"kvplan:{seed}:arrivals"), rate_factor)
    choose = random.Random(f"kvplan:{seed}:classes")
    class_rngs = [random.Random(f"kvplan:{seed}:class:{c.name}") for c in workload.classes]
    cumulative = []
    total = 0.0
    for request_class in workload.classes:
        total += request_class.weight
        cumulative.append(total)
    plans = []
    for ordinal, time in enumerate(times):
        draw = choose.random() * total
        # the first class whose cumulative weight exceeds the draw (the last one if none does)
        index = min(bisect.bisect_right(cumulative, draw), len(cumulative) - 1)
        request_class = workload.classes[index]
        rng = class_rngs[index]
        prompt = request_class.prompt_tokens.sample_int(rng)
        turns = [PlannedTurn(prompt, request_class.output_tokens.sample_int(rng), 0.0)]
        if request_class.turns is not None:
            spec = request_class.turns
            for _ in range(spec.count.sample_int(rng) - 1):
                turns.append(PlannedTurn(spec.user_tokens.sample_int(rng), request_class.output_tokens.sample_int(rng),
                                         spec.think_time_s.sample(rng)))
        plans.append(PlannedConversation(ordinal, index, time, tuple(turns)))
    return plans
