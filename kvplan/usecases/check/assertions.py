"""The assertion kinds `kvplan check` knows, what one requirement looks like, and its verdict.

Every kind is a spec key (``min_kv_tokens``) and a flag (``--assert-min-kv-tokens``). A kind
reads one metric: ``capacity`` kinds read the plan record of the target (a plan made on the spot
or a saved profile), ``workload`` kinds read the result of simulating a workload on the target.
``min_*`` kinds hold when the measured value is at least the required one, ``max_*`` kinds when
it is at most, ``fits`` when it is equal. ``docs/check.md`` holds the table generated from
``KINDS``; the meaning of each metric is the one in ``docs/metrics.md`` and ``kvplan plan``."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from kvplan.units import format_duration, human_bytes

Scope = Literal["capacity", "workload"]
SECONDS = "s (estimate)"               # the unit of a latency kind: it takes a duration ("500ms") too
Bound = Literal["min", "max", "is"]
ValueType = Literal["bool", "count", "tokens", "bytes", "fraction", "number", "concurrency"]


@dataclass(frozen=True)
class AssertionKind:
    key: str
    scope: Scope
    bound: Bound
    value: ValueType
    unit: str                            # how the measured figure reads: "tokens", "s (estimate)"
    meaning: str                         # one sentence: what is measured
    path: tuple[str, ...] = ()           # workload kinds: the attributes that lead to the figure in a
                                         # simulation (`workload_checks.Figures`: metrics, capacity)
    per_usable_block: bool = False       # workload kinds: a block count turned into a share of the pool
    pool_bound: bool = True              # workload kinds: a larger KV pool can change the metric

    @property
    def flag(self) -> str:
        return "--assert-" + self.key.replace("_", "-")


@dataclass(frozen=True)
class Concurrency:
    """``min_concurrency``: this many requests of ``tokens_per_request`` tokens at once (vLLM's
    "Maximum concurrency" figure). None: at the target's max_model_len."""

    at_least: float
    tokens_per_request: int | None = None


@dataclass(frozen=True)
class Assertion:
    """One requirement, as written in a spec block or given as a flag."""

    kind: AssertionKind
    required: Any                        # bool, int, float or Concurrency, validated for the kind
    where: str                           # the field that set it: "assert[1].min_kv_tokens" or a flag

    @property
    def name(self) -> str:
        if isinstance(self.required, Concurrency) and self.required.tokens_per_request is not None:
            return f"{self.kind.key}@{self.required.tokens_per_request}"
        return self.kind.key


@dataclass(frozen=True)
class AssertionResult:
    """The verdict on one assertion. ``margin`` is the headroom in the kind's unit (measured -
    required for ``min_*``, required - measured for ``max_*``): negative when it failed. ``hint``
    is the one line that says what to change, set when it failed."""

    name: str
    group: str                           # "capacity", or the workload file the figure came from
    kind: AssertionKind
    required: Any
    measured: Any
    passed: bool
    margin: float | None
    hint: str | None = None
    detail: str = ""                     # how the figure was obtained, when it is not obvious


def verdict(kind: AssertionKind, required: Any, measured: Any) -> tuple[bool, float | None]:
    """(passed, margin). A metric that could not be measured (the configuration does not fit,
    nothing was scheduled) fails."""
    if measured is None:
        return False, None
    if kind.bound == "is":
        return bool(measured) == bool(required), None
    bound = required.at_least if isinstance(required, Concurrency) else required
    margin = measured - bound if kind.bound == "min" else bound - measured
    return margin >= 0, margin


# ---------------------------------------------------------------------------- the kinds

_CAPACITY = (
    AssertionKind("fits", "capacity", "is", "bool", "",
                  "vLLM starts: one request of max_model_len fits in the KV cache (no \"To serve at least one "
                  "request\" or \"No available memory\" error)."),
    AssertionKind("max_model_len_fits", "capacity", "min", "tokens", "tokens",
                  "The largest max_model_len whose one request fits in the KV memory (vLLM's auto-fit, "
                  "`--max-model-len -1`; never above the model's own limit)."),
    AssertionKind("min_kv_tokens", "capacity", "min", "tokens", "tokens",
                  "vLLM's \"GPU KV cache size: N tokens\": blocks per KV cache group times the block size."),
    AssertionKind("min_num_blocks", "capacity", "min", "count", "blocks",
                  "`num_gpu_blocks`: blocks in the pool, the null block included."),
    AssertionKind("min_usable_blocks", "capacity", "min", "count", "blocks",
                  "Blocks requests can hold: num_blocks - 1 (block 0 is the null block)."),
    AssertionKind("min_concurrency", "capacity", "min", "concurrency", "x",
                  "vLLM's \"Maximum concurrency for L tokens per request\": at the target's max_model_len "
                  "(a number) or at `tokens_per_request` (`{ tokens_per_request = L, at_least = X }`)."),
    AssertionKind("min_kv_cache_memory", "capacity", "min", "bytes", "bytes",
                  "KV-cache memory per GPU: the profile's available KV memory, or the plan's --kv-cache-memory."),
    AssertionKind("max_kv_bytes_per_token", "capacity", "max", "bytes", "bytes",
                  "KV bytes one token costs on one GPU (sum over layers of page size / block size)."),
    AssertionKind("max_weights_bytes", "capacity", "max", "bytes", "bytes",
                  "Weight memory per GPU: measured by the profile, else computed from the model."),
    AssertionKind("max_activation_peak_bytes", "capacity", "max", "bytes", "bytes",
                  "The profile run's peak activation memory (profile targets only)."),
    AssertionKind("max_non_torch_bytes", "capacity", "max", "bytes", "bytes",
                  "Memory outside torch's allocator during profiling (profile targets only)."),
)


def _workload_kinds() -> tuple[AssertionKind, ...]:
    kinds = [
        AssertionKind("max_preemptions", "workload", "max", "count", "preemptions",
                      "Preemptions (recompute) over the whole run.", ("metrics", "preemptions", "total")),
        AssertionKind("max_preempted_requests", "workload", "max", "count", "requests",
                      "Requests preempted at least once.", ("metrics", "preemptions", "requests_preempted")),
        AssertionKind("max_recomputed_tokens", "workload", "max", "count", "tokens",
                      "Tokens computed again after preemptions.", ("metrics", "preemptions", "recomputed_tokens")),
        AssertionKind("max_peak_kv_usage", "workload", "max", "fraction", "of the pool",
                      "Peak share of usable blocks held by requests (vLLM's KV cache usage).",
                      ("metrics", "kv", "peak_usage")),
        AssertionKind("max_mean_kv_usage", "workload", "max", "fraction", "of the pool",
                      "Time-weighted mean KV cache usage.", ("metrics", "kv", "mean_usage")),
    ]
    for q in ("p50", "p95", "p99"):
        kinds.append(AssertionKind(
            f"max_{q}_kv_usage", "workload", "max", "fraction", "of the pool",
            f"{q} (time-weighted) of the KV cache usage.", ("metrics", "kv", f"{q}_used_blocks"),
            per_usable_block=True))
    kinds += [
        AssertionKind("max_time_at_full_kv", "workload", "max", "fraction", "of the time",
                      "Share of the run with every usable block held.", ("metrics", "kv", "time_at_full_fraction")),
        AssertionKind("min_prefix_cache_hit_rate", "workload", "min", "fraction", "",
                      "vLLM's prefix-cache hit rate: hit tokens over queried tokens, every lookup.",
                      ("metrics", "prefix_cache", "prefix_cache_hit_rate")),
        AssertionKind("min_first_admission_hit_rate", "workload", "min", "fraction", "",
                      "Hit tokens over prompt tokens at each request's first admission (recompute excluded).",
                      ("metrics", "prefix_cache", "first_admission_hit_rate")),
        AssertionKind("max_waiting", "workload", "max", "count", "requests",
                      "Most requests waiting at once.", ("metrics", "queues", "max_waiting")),
    ]
    for metric, what in (("queueing", "queueing delay"), ("ttft", "time to first token"),
                         ("tpot", "time per output token"), ("e2e", "end-to-end latency")):
        for q in ("p50", "p95", "p99"):
            kinds.append(AssertionKind(
                f"max_{q}_{metric}_s", "workload", "max", "number", SECONDS,
                f"{q} {what} in seconds, estimated by the step-time model.",
                ("metrics", "latency", f"{metric}_s_estimate", q)))
            kinds.append(AssertionKind(
                f"max_{q}_{metric}_steps", "workload", "max", "number", "steps",
                f"{q} {what} in scheduler steps.", ("metrics", "latency", f"{metric}_steps", q)))
    kinds += [
        AssertionKind("min_output_tokens_per_s", "workload", "min", "number", "tokens/s (estimate)",
                      "Output tokens per second over the run (estimate).",
                      ("metrics", "throughput", "output_tokens_per_s_estimate")),
        AssertionKind("min_requests_per_s", "workload", "min", "number", "requests/s (estimate)",
                      "Finished requests per second over the run (estimate).",
                      ("metrics", "throughput", "requests_per_s_estimate")),
        AssertionKind("min_sustained_rate_rps", "workload", "min", "number", "requests/s (estimate)",
                      "The highest arrival rate sustained without queues growing (`simulate --find-max-rate`; "
                      "many runs).", ("capacity", "max_rate", "max_sustained_rate_rps_estimate"),
                      pool_bound=False),
    ]
    return tuple(kinds)


KINDS: dict[str, AssertionKind] = {kind.key: kind for kind in (*_CAPACITY, *_workload_kinds())}
# one spelling of an objective for `fit --slo` and a check spec: fit's names (`ttft_p95`, `preemptions`)
# are spec keys too, and fit takes the spec's (`max_p95_ttft_s`); a latency takes a duration in both
OBJECTIVE_NAMES: dict[str, str] = {
    **{f"{metric}_{q}": f"max_{q}_{metric}_s" for metric in ("queueing", "ttft", "tpot", "e2e")
       for q in ("p50", "p95", "p99")},
    "preemptions": "max_preemptions",
}
assert set(OBJECTIVE_NAMES.values()) <= set(KINDS)
PROFILE_ONLY = ("max_activation_peak_bytes", "max_non_torch_bytes")
# the one implicit assertion of every workload: the run finishes (a stall means a request can never fit)
COMPLETES = AssertionKind("completes", "workload", "is", "bool", "",
                          "The simulation finishes every request (it does not stall).")


# ---------------------------------------------------------------------------- rendering values


def format_value(kind: AssertionKind, value: Any) -> str:
    """A figure as people read it: thousands separators, bytes in GiB too, shares as percent."""
    if value is None:
        return "-"
    if isinstance(value, Concurrency):
        at = "max_model_len" if value.tokens_per_request is None else f"{value.tokens_per_request:,} tokens"
        return f"{value.at_least:g}x at {at}"
    if kind.value == "bool":
        return "true" if value else "false"
    if kind.value == "bytes":
        return f"{int(value):,} B ({human_bytes(value)})"
    if kind.value == "fraction":
        return f"{value:.4g} ({value * 100:.1f}%)"
    if kind.value == "concurrency":
        return f"{value:.2f}x"
    if kind.unit == SECONDS:
        return format_duration(value)
    if isinstance(value, int):
        return f"{value:,}"
    return f"{value:,.6g}" if abs(value) >= 1 else f"{value:.4g}"


def format_margin(result: AssertionResult) -> str:
    if result.margin is None:
        return "-"
    kind, margin = result.kind, result.margin
    sign = "+" if margin >= 0 else "-"
    if kind.value == "bytes":
        text = f"{sign}{human_bytes(abs(margin))}"
    elif kind.value == "fraction":
        text = f"{sign}{abs(margin) * 100:.1f} pt"
    elif kind.value == "concurrency":
        text = f"{sign}{abs(margin):.2f}x"
    elif isinstance(margin, int):
        text = f"{sign}{abs(margin):,}"
    else:
        text = f"{sign}{abs(margin):.4g}"
    bound = result.required.at_least if isinstance(result.required, Concurrency) else result.required
    # a percentage helps next to a bound of the same size, not beside a 6-figure miss of a tiny one
    relative = isinstance(bound, int | float) and bound and abs(margin) <= 10 * bound
    if kind.value not in ("fraction", "bool") and relative:
        text += f" ({margin / bound * 100:+.1f}%)"
    return text
