"""What `kvplan fit` is asked: a model, the traffic (a workload, a concurrency goal, or both), a
service-level objective, and the space to search; parsed from the command line's text here, so
that every mistake is one line (exit 2)."""

from __future__ import annotations

import difflib
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Any, TypeVar, get_args, get_type_hints

from kvplan.errors import KvplanError
from kvplan.semantics.engine.args import SEARCHES, EngineArgs, in_order, named, setting
from kvplan.semantics.releases import Release
from kvplan.sources.installed import DEFAULT_RELEASE
from kvplan.units import format_duration, parse_duration
from kvplan.usecases.simulate.metrics import RunMetrics, Summary
from kvplan.usecases.simulate.workload import Workload

LATENCY_METRICS = ("ttft", "tpot", "e2e", "queueing")
STATISTICS = ("mean", "p50", "p95", "p99", "max")
COUNT_METRICS = ("preemptions",)
# the rate search of fit stops when its bracket is within 10% (simulate's --find-max-rate: 2%): the
# step-time model is an estimate, and every step of the bisection is a run of the whole workload
RATE_PRECISION = 1.1
# the search fit runs without being told more (`--max-configurations`, `--max-requests` lift them):
# a plan takes milliseconds and every fitting configuration simulates its workload a dozen times,
# so past these the command would run for many minutes before printing anything (as sweep's
# MAX_CELLS bounds a grid)
MAX_CONFIGURATIONS = 10_000
MAX_WORKLOAD_REQUESTS = 100_000
MAX_LIST_VALUES = 10_000          # values of one list flag, as sweep's MAX_AXIS_VALUES for an axis
T = TypeVar("T")


@dataclass(frozen=True)
class SloBound:
    """One objective: `key` is e.g. ttft_p95 (seconds, an estimate) or preemptions (a count)."""

    key: str
    limit: float

    @property
    def is_latency(self) -> bool:
        return self.key not in COUNT_METRICS

    def value(self, metrics: RunMetrics) -> float | None:
        """The run's figure for this objective (None when the run has none)."""
        if self.key == "preemptions":
            return float(metrics.preemptions.total)
        metric, statistic = self.key.rsplit("_", 1)
        summary: Summary | None = getattr(metrics.latency, f"{metric}_s_estimate")
        return None if summary is None else getattr(summary, statistic)

    def met(self, value: float | None) -> bool:
        return value is not None and value <= self.limit

    @property
    def limit_text(self) -> str:
        return format_seconds(self.limit) if self.is_latency else f"{self.limit:g}"

    def describe(self) -> str:
        return f"{self.key} <= {self.limit_text}"


@dataclass(frozen=True)
class ConcurrencyTarget:
    """`--concurrency 32@8192`: this many requests of this many tokens in the KV cache at once."""

    requests: int
    tokens: int

    def describe(self) -> str:
        return f"{self.requests:,} requests of {self.tokens:,} tokens at once"


# fit's lists (`kvplan fit --tensor-parallel-size 1,2`): the engine arguments it tries several values of
# (`SEARCHES`), in the order it has always taken them (its --help, the order its groups are planned in);
# a setting missing here comes after these
SEARCHED = in_order(named(SEARCHES), (
    "tensor_parallel_size", "pipeline_parallel_size", "kv_cache_dtype", "gpu_memory_utilization",
    "kv_cache_memory_bytes", "max_num_seqs", "max_num_batched_tokens", "max_model_len"))
# the lists whose absence leaves the choice to the search, not to vLLM's default: without KV-cache bytes
# the utilizations size the cache; without max_model_len candidates it tries the model's limit, else the
# shortest length the traffic needs
CHOSEN_BY_SEARCH = ("kv_cache_memory_bytes", "max_model_len")
_ARG_TYPES = get_type_hints(EngineArgs)


def read_list(name: str, text: str | None, flag: str | None = None) -> tuple[Any, ...]:
    """One of fit's lists from its flag's text, () when not given: each comma item read as the flag's own
    value is, by the setting's one reader (`Setting.read`: its parse and its kind's range); `flag` is the
    spelling given, for messages."""
    declared = setting(name)
    shown = flag or declared.flag
    if declared.parse is None:
        # the type typer converts the flag's text to (`int` for -tp 2), so that -tp 2 and -tp 1,2 read alike
        annotation = declared.annotation or _ARG_TYPES[name]
        convert = next(kind for kind in (*get_args(annotation), annotation) if kind is not type(None))
    else:
        convert = str                      # the setting parses its text itself (--max-model-len 8K)
    # the kind's range is said by `Setting.read`; a text that is not a number at all, in plan's words
    what = {int: "an integer", float: "a number"}.get(convert, "a positive number")
    return parse_list(text, shown, lambda item: declared.read(convert(item), shown), what)


@functools.cache
def unlisted(name: str) -> tuple[Any, ...]:
    """The values fit tries of a list it is not given: the setting's list default (`1` for the
    tensor-parallel sizes), else vLLM's default (None), else none where the search chooses
    (`CHOSEN_BY_SEARCH`)."""
    if name not in SEARCHED:
        raise ValueError(f"fit has no list of {name}")
    default = setting(name).list_default
    if default is not None:
        return read_list(name, default)
    return () if name in CHOSEN_BY_SEARCH else (None,)


@dataclass(frozen=True)
class SearchSpace:
    """The axes; every combination is a configuration. For max_model_len the candidates are tried
    from the largest and the largest that fits is kept."""

    gpus: tuple[str, ...]
    lists: tuple[tuple[str, tuple[Any, ...]], ...] = ()      # (EngineArgs name, its values), as given

    def values(self, name: str) -> tuple[Any, ...]:
        """The values tried of one engine argument (`unlisted` where not given)."""
        given = dict(self.lists)
        return given[name] if name in given else unlisted(name)

    def with_values(self, **lists: tuple[Any, ...]) -> SearchSpace:
        """This space with these lists, by EngineArgs name."""
        unknown = sorted(set(lists) - set(SEARCHED))
        if unknown:
            raise ValueError(f"fit has no list of {unknown}")
        return replace(self, lists=tuple({**dict(self.lists), **{name: tuple(v) for name, v in lists.items()}}.items()))

    @property
    def memory_points(self) -> int:
        return len(self.values("kv_cache_memory_bytes")) or len(self.values("gpu_memory_utilization"))


@dataclass(frozen=True)
class FitRequest:
    model: str
    space: SearchSpace
    workload: Workload | None = None
    rate: float | None = None                          # requests/s: the workload's arrivals scaled to it
    concurrency: ConcurrencyTarget | None = None
    slo: tuple[SloBound, ...] = ()
    prices: tuple[tuple[str, float], ...] = ()         # (GPU key, price per GPU-hour), the user's
    release: Release = DEFAULT_RELEASE
    dtype: str = "auto"
    trust_remote_code: bool = False
    # the sizing engine arguments fit searches no list of, as the command line gives them: every
    # configuration takes them (--mamba-ssm-cache-dtype; --dtype is `dtype`)
    fixed: EngineArgs = field(default_factory=EngineArgs)
    step_time: str | None = None      # --step-time: how each configuration's steps are priced (None: auto)
    seed: int | None = None
    rate_precision: float = RATE_PRECISION
    notes: tuple[str, ...] = field(default_factory=tuple)
    max_configurations: int = MAX_CONFIGURATIONS
    max_requests: int = MAX_WORKLOAD_REQUESTS

    def price_of(self, gpu: str) -> float | None:
        return dict(self.prices).get(gpu)


# ---------------------------------------------------------------------------- parsing the text


def format_seconds(value: float) -> str:
    return format_duration(value)


def parse_seconds(text: str, where: str) -> float:
    return parse_duration(text, where)


def parse_slo(text: str | None) -> tuple[SloBound, ...]:
    """`ttft_p95=500ms,tpot_p95=60ms,preemptions=0`."""
    if text is None or not text.strip():
        return ()
    known = [f"{m}_{s}" for m in LATENCY_METRICS for s in STATISTICS] + list(COUNT_METRICS)
    from kvplan.usecases.check.assertions import OBJECTIVE_NAMES

    # a check spec's name of the objective (max_p95_ttft_s) is fit's (ttft_p95) too
    spec_names = {key: name for name, key in OBJECTIVE_NAMES.items()}
    bounds: dict[str, SloBound] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        key = key.strip().lower()
        key = spec_names.get(key, key)
        if not sep or not value.strip():
            raise KvplanError(f"--slo: {part.strip()!r}: write KEY=VALUE, e.g. ttft_p95=500ms")
        if key not in known:
            close = difflib.get_close_matches(key, [*known, *spec_names], n=1)
            hint = f"did you mean {close[0]}? " if close else ""
            raise KvplanError(f"--slo: unknown objective {key!r}; {hint}one of {', '.join(known)} (or a check spec's "
                              "name of it, e.g. max_p95_ttft_s)")
        if key in bounds:
            raise KvplanError(f"--slo: {key} is given twice")
        if key in COUNT_METRICS:
            try:
                limit = float(int(value.strip()))
            except ValueError:
                raise KvplanError(f"--slo: {key} takes a whole number, got {value.strip()!r}") from None
            if limit < 0:
                raise KvplanError(f"--slo: {key} must be 0 or more")
        else:
            limit = parse_seconds(value, f"--slo {key}")
        bounds[key] = SloBound(key, limit)
    return tuple(bounds.values())


def parse_concurrency(text: str | None) -> ConcurrencyTarget | None:
    """`32@8192`: 32 requests of 8,192 tokens each."""
    if text is None:
        return None
    requests, sep, tokens = text.partition("@")
    try:
        target = ConcurrencyTarget(_whole(requests), _whole(tokens))
    except ValueError:
        target = None
    if not sep or target is None or target.requests < 1 or target.tokens < 1:
        raise KvplanError(f"--concurrency: {text!r}: write REQUESTS@TOKENS, e.g. 32@8192")
    return target


def _whole(text: str) -> int:
    return int(text.strip().replace("_", "").replace(",", ""))


def parse_rate(text: str | None) -> float | None:
    """`5/s`, `5` (requests per second) or `300/min`."""
    if text is None:
        return None
    number, _, unit = text.strip().partition("/")
    scale = {"": 1.0, "s": 1.0, "sec": 1.0, "min": 1 / 60, "h": 1 / 3600}.get(unit.strip().lower())
    try:
        value = float(number) * scale if scale is not None else math.nan
    except ValueError:
        value = math.nan
    if not math.isfinite(value) or value <= 0:
        raise KvplanError(f"--rate: {text!r}: write requests per second, e.g. 5/s (or 300/min)")
    return value


def parse_prices(text: str | None) -> tuple[tuple[str, float], ...]:
    """`h100-sxm-80gb=2.5,l4-24gb=0.8`: your price per GPU-hour (kvplan has none of its own)."""
    if text is None or not text.strip():
        return ()
    from kvplan.gpus.catalog import get_gpu

    prices: dict[str, float] = {}
    for part in text.split(","):
        key, sep, value = part.partition("=")
        try:
            price = float(value)
        except ValueError:
            price = math.nan
        if not sep or not math.isfinite(price) or price < 0:
            raise KvplanError(f"--price: {part.strip()!r}: write GPU=PRICE per GPU-hour, e.g. h100-sxm-80gb=2.5")
        prices[get_gpu(key).key] = price
    return tuple(prices.items())


def parse_list(text: str | None, flag: str, read: Callable[[str], T], what: str = "a positive number") -> tuple[T, ...]:
    """A comma-separated list read item by item (`read` raises ValueError on a bad item, or
    KvplanError with its own line); () when not given. At most MAX_LIST_VALUES values."""
    if text is None:
        return ()
    parts = text.split(",")
    if len(parts) > MAX_LIST_VALUES:
        raise KvplanError(f"{flag}: {len(parts):,} values; kvplan fit takes at most {MAX_LIST_VALUES:,} per list")
    values: list[T] = []
    seen: set[T] = set()
    for part in parts:
        item = part.strip()
        if not item:
            raise KvplanError(f"{flag}: an empty item in {_shown(text)}; separate values with commas")
        try:
            value = read(item)
        except ValueError:
            raise KvplanError(f"{flag}: {_shown(item)} is not {what}") from None
        if value in seen:
            raise KvplanError(f"{flag}: {_shown(item)} is given twice")
        seen.add(value)
        values.append(value)
    return tuple(values)


def _shown(text: str) -> str:
    return repr(text) if len(text) <= 60 else repr(text[:56]) + " ..."
