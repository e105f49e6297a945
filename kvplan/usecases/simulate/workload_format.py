"""The workload file (schema_version 1, `docs/workload.md`), described once: every key with its
type and range. `load_workload` checks a workload against `WORKLOAD` (and a request list against
`REQUEST_LIST`) before reading it; docs/schemas/input/workload.json is `WORKLOAD` published."""

from __future__ import annotations

from kvplan import limits
from kvplan.schema import Either, Field, Integer, ListOf, Number, Record, Tagged, Text, schema_version
from kvplan.semantics.engine.args import WORKLOADS, named, setting
from kvplan.semantics.engine.trace_format import REQUEST_FIELDS, SCHEDULER_SETTINGS, SCHEMA_KEY, TOKENS_PER_ID
from kvplan.usecases.plan_settings import CALIBRATION, GPU, MEMORY, MODEL, STEP_MS

SCHEMA_VERSION = 1
NO_REMOTE_CODE = ("trust_remote_code is never read from a file (a spec, profile or workload cannot enable code "
                  "execution): pass --trust-remote-code on the command line")
PATH = Text(max_length=limits.MAX_PATH, controls=False, description="a path, relative to the workload file")
MAX_CLASSES = 1000
MAX_TABLE = 10**6          # values of an empirical distribution, bins of a histogram, calibration points
MAX_TURNS = 1000
MIN_LOGNORMAL_MEAN = 1e-3  # below it, (std / mean)**2 leaves the floating-point range


def distribution(value: Integer | Number, what: str) -> Tagged:
    """A distribution of `value`s: a bare number (a constant) or `{"dist": ..., ...}`."""
    top = value.maximum
    bound = Number(0, top)
    spread = {"mean": Field(bound, required=True), "std": Field(bound, required=True),
              "min": Field(value), "max": Field(value)}
    return Tagged("dist", {
        "constant": Record({"dist": Field(Text()), "value": Field(value, required=True)}),
        "uniform": Record({"dist": Field(Text()), "min": Field(value, required=True),
                           "max": Field(value, required=True)}),
        "normal": Record({"dist": Field(Text()), **spread}),
        "lognormal": Record({"dist": Field(Text()), **spread,
                             "mean": Field(Number(MIN_LOGNORMAL_MEAN, top), required=True)}),
        "empirical": Record({"dist": Field(Text()), "values": Field(ListOf(value, 1, MAX_TABLE), required=True),
                             "min": Field(value), "max": Field(value)}),
        "histogram": Record({"dist": Field(Text()),
                             "bins": Field(ListOf(ListOf(bound, 3, 3, "[low, high, weight]"), 1, MAX_TABLE),
                                           required=True),
                             "min": Field(value), "max": Field(value)}),
    }, shorthand=value, description=f"{what}: a number, or {{\"dist\": ...}} (docs/workload.md)")


TOKENS = distribution(Integer(1, limits.MAX_TOKENS), "tokens")
SECONDS = distribution(Number(0, limits.MAX_SECONDS), "seconds")
TURN_COUNT = distribution(Integer(1, MAX_TURNS), "turns of a conversation")

COUNT = Integer(1, limits.MAX_REQUESTS, "arrivals")
DURATION = Number(0, limits.MAX_SECONDS, exclusive_minimum=True, description="seconds")
RATE = Number(1e-6, limits.MAX_RATE, description="arrivals per second")
CLIENTS = Integer(1, limits.MAX_REQUESTS, "clients of a closed loop (vllm bench serve --max-concurrency)")
BURSTINESS = Number(1e-3, 1e3, description="the gamma shape of the gaps (vllm bench serve --burstiness)")
_LOOP = {"max_concurrency": Field(CLIENTS)}
ARRIVAL = Tagged("process", {
    "poisson": Record({"process": Field(Text()), "rate": Field(RATE, required=True), "count": Field(COUNT),
                       "duration_s": Field(DURATION), **_LOOP}),
    "constant": Record({"process": Field(Text()), "rate": Field(RATE, required=True), "count": Field(COUNT),
                        "duration_s": Field(DURATION), **_LOOP}),
    "gamma": Record({"process": Field(Text()), "rate": Field(RATE, required=True),
                     "burstiness": Field(BURSTINESS, required=True), "count": Field(COUNT),
                     "duration_s": Field(DURATION), **_LOOP}),
    "bursts": Record({"process": Field(Text()), "burst_size": Field(COUNT, required=True),
                      "interval_s": Field(DURATION, required=True), "count": Field(COUNT),
                      "duration_s": Field(DURATION), **_LOOP}),
    "all_at_once": Record({"process": Field(Text()), "count": Field(COUNT, required=True), **_LOOP}),
    "timestamps": Record({"process": Field(Text()),
                          "times_s": Field(ListOf(Number(0, limits.MAX_SECONDS), 1, limits.MAX_REQUESTS),
                                           required=True), **_LOOP}),
}, description="when requests (or conversations) arrive")

REQUEST_CLASS = Record({
    "name": Field(Text()),
    "weight": Field(Number(0, 10**9, exclusive_minimum=True, description="share of arrivals, relative")),
    "prompt_tokens": Field(TOKENS, required=True),
    "output_tokens": Field(TOKENS, required=True),
    "shared_prefix": Field(Record({"name": Field(Text(), required=True),
                                   "tokens": Field(Integer(1, TOKENS_PER_ID), required=True)},
                                  "a system prompt shared by every request naming it")),
    "turns": Field(Record({"count": Field(TURN_COUNT, required=True), "user_tokens": Field(TOKENS, required=True),
                           "think_time_s": Field(SECONDS)}, "multi-turn conversations")),
})

FRONTEND_MS = Number(0, limits.MAX_STEP_MS, description="milliseconds")
FRONTEND = Record({
    "request_ms": Field(FRONTEND_MS, description="serial API-server work per request"),
    "token_ms": Field(FRONTEND_MS, description="serial API-server work per output token"),
    "latency_ms": Field(FRONTEND_MS, description="from the API server to the client, per token"),
    "stream_wait_ms": Field(FRONTEND_MS, description="added to each admission per stream in flight"),
}, "the serving front end (docs/workload.md): client-observed latency")

TIMING = Record({
    "step_time_ms": Field(STEP_MS),
    "calibration": Field(CALIBRATION),
    "gpu": Field(GPU),
    "weights_bytes": Field(Integer(1, limits.MAX_BYTES)),
    "kv_bytes_per_token": Field(Integer(1, limits.MAX_BYTES)),
    "overhead_ms": Field(Number(0, limits.MAX_STEP_MS)),
    "frontend": Field(FRONTEND),
}, "the step-time model")

ENGINE = Record({
    **SCHEDULER_SETTINGS,
    "profile": Field(PATH, description="a profile saved by `kvplan profile --save`"),
    "model": Field(MODEL),
    "gpu": Field(GPU),
    "gpu_memory": Field(MEMORY),
    # the engine arguments that plan engine.model's pool (`EngineArgs`'s WORKLOADS role), under their file keys
    **{setting(name).key or name: Field(setting(name).kind) for name in named(WORKLOADS)},
}, "the engine: one pool source (num_gpu_blocks, profile or model) and vLLM's settings",
    refused={"trust_remote_code": NO_REMOTE_CODE})

# an explicit request: the trace format's, its id optional, timed in steps or in seconds
WORKLOAD_REQUEST = Record({
    **REQUEST_FIELDS,
    "request_id": Field(Text(), description="unique; r0, r1, ... when left out"),
    "arrival_time": Field(Number(0, limits.MAX_SECONDS, description="seconds (instead of arrival_step)")),
})
REQUEST_LIST = ListOf(WORKLOAD_REQUEST, 1, limits.MAX_REQUESTS)

WORKLOAD = Record({
    **SCHEMA_KEY,
    "schema_version": Field(schema_version(SCHEMA_VERSION), required=True),
    "description": Field(Text(max_length=100_000, min_length=0)),
    "seed": Field(Integer(0, limits.MAX_SEED)),
    "engine": Field(ENGINE),
    "timing": Field(TIMING),
    "classes": Field(ListOf(REQUEST_CLASS, 1, MAX_CLASSES)),
    "arrival": Field(ARRIVAL),
    "requests": Field(Either((PATH, REQUEST_LIST)),
                      description="a request list: inline, or a trace-replay or JSON Lines file"),
}, title="a kvplan workload: schema_version, engine, classes + arrival or requests")
