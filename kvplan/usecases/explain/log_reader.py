"""A vLLM start-up log read back into what it says: the release and its wording, the settings vLLM
ran with, the memory figures of its start-up and the error it ended in, each with the line it came
from. The lines are `kvplan.semantics.memory.startup_log`'s patterns.

    read_startup_log(text, where) -> StartupLog     (exit 2 for text that is no vLLM start-up log)

What a log looks like as people paste it: timestamps or not, ANSI colours, the `(EngineCore_DP0
pid=...)` / `(Worker_TP1 pid=...)` prefixes, several workers' lines interleaved, progress bars that
run into the next record, truncated lines (a line cut inside a figure is not read at all)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from kvplan.errors import KvplanError
from kvplan.semantics.memory.startup_log import (
    ANSI_ESCAPE,
    COLLECTOR_PREFIX,
    ERRORS,
    LINES,
    PROCESS_PREFIX,
    RECORD,
    UNITS,
    LinePattern,
    LogWording,
    count,
    gib_bytes,
)

MAX_LOG_BYTES = 256 << 20
# the engine-level settings the engine's config line names, as `key=value`
_CONFIG_KEYS = ("model", "dtype", "max_seq_len", "tensor_parallel_size", "pipeline_parallel_size",
                "data_parallel_size", "quantization", "enforce_eager", "kv_cache_dtype", "enable_prefix_caching",
                "enable_chunked_prefill")
_CAPTURE_SIZES = re.compile(r"'cudagraph_capture_sizes': \[(?P<sizes>[\d, ]*)\]")
_ARG = re.compile(r"'(?P<key>\w+)': (?P<value>'[^']*'|\"[^\"]*\"|[\w.+-]+)")
# non-default args of `vllm serve` -> the setting it gives
_ARG_SETTINGS = {
    "model": "model", "dtype": "dtype", "quantization": "quantization", "max_model_len": "max_model_len",
    "tensor_parallel_size": "tensor_parallel_size", "pipeline_parallel_size": "pipeline_parallel_size",
    "data_parallel_size": "data_parallel_size", "gpu_memory_utilization": "gpu_memory_utilization",
    "block_size": "block_size", "kv_cache_dtype": "kv_cache_dtype", "enable_prefix_caching": "enable_prefix_caching",
    "enable_chunked_prefill": "enable_chunked_prefill", "max_num_batched_tokens": "max_num_batched_tokens",
    "max_num_seqs": "max_num_seqs", "enforce_eager": "enforce_eager",
    "kv_cache_memory_bytes": "kv_cache_memory_bytes", "num_gpu_blocks_override": "num_gpu_blocks_override",
    "async_scheduling": "async_scheduling", "cpu_offload_gb": "cpu_offload_gb",
}


@dataclass(frozen=True)
class Record:
    """One logged line: its number in the text (from 1), the process that logged it, its level and message."""

    line: int
    process: str | None
    level: str | None
    message: str


@dataclass(frozen=True)
class Found:
    """A value the log states, and where."""

    value: Any
    line: int
    process: str | None = None


@dataclass(frozen=True)
class LoggedError:
    """The error a start-up ended in: its kind (`startup_log.ERRORS`' names), the line, vLLM's
    message and the figures it names (bytes, tokens)."""

    kind: str
    line: int
    message: str
    figures: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class StartupLog:
    """What one start-up log says. `settings` and `figures` hold only what the log states; a figure in
    bytes is vLLM's GiB figure times 2**30 (known to +-0.005 GiB)."""

    lines: int
    records: int
    wording: LogWording | None                  # the release wording the lines are in
    wording_line: int | None                    # the line that told it
    vllm_version: Found | None
    settings: dict[str, Found]
    figures: dict[str, Found]
    error: LoggedError | None
    workers: tuple[str, ...]                    # the processes whose lines carry a worker's figures
    per_worker: dict[str, tuple[Found, ...]]    # a figure several workers logged: every value
    engine_ready: bool                          # "init engine (profile, create kv cache, warmup model) took"
    non_default_args: tuple[str, ...] = ()      # the settings `vllm serve` was given (its non-default args)

    def setting(self, name: str) -> Any:
        found = self.settings.get(name)
        return None if found is None else found.value

    def figure(self, name: str) -> Any:
        found = self.figures.get(name)
        return None if found is None else found.value


def decode_log(data: bytes) -> str:
    """Log bytes as text: a log may carry stray bytes (cut multi-byte characters, binary noise)."""
    if b"\x00" in data[:1 << 16]:
        raise KvplanError("not a vLLM log: the input holds NUL bytes (a binary file); give the text vLLM printed")
    return data.decode("utf-8", errors="replace")


def records(text: str) -> Iterator[Record]:
    """Every record of the text, in order: a physical line may hold several (a progress bar that a
    record runs into), or none (a traceback line, still prefixed by its process)."""
    for number, raw in enumerate(text.replace("\r\n", "\n").replace("\r", "\n").split("\n"), start=1):
        line = COLLECTOR_PREFIX.sub("", ANSI_ESCAPE.sub("", raw), count=1).rstrip()
        if not line.strip():
            continue
        headers = list(RECORD.finditer(line))
        if not headers:
            prefix = PROCESS_PREFIX.match(line)
            process = prefix.group("process") if prefix else None
            yield Record(number, process, None, line[prefix.end():] if prefix else line)
            continue
        for index, header in enumerate(headers):
            end = headers[index + 1].start() if index + 1 < len(headers) else len(line)
            yield Record(number, header.group("process"), header.group("level"), line[header.end():end].rstrip())


class _Collector:
    """The first statement of each setting, every statement of each figure."""

    def __init__(self) -> None:
        self.settings: dict[str, Found] = {}
        self.figures: dict[str, list[Found]] = {}
        self.wording: tuple[LogWording, int] | None = None
        self.given: list[str] = []

    def setting(self, name: str, value: Any, record: Record, *, replace: bool = False) -> None:
        if value is not None and (replace or name not in self.settings):
            self.settings[name] = Found(value, record.line, record.process)

    def figure(self, name: str, value: Any, record: Record) -> None:
        self.figures.setdefault(name, []).append(Found(value, record.line, record.process))

    def worded(self, pattern: LinePattern, record: Record) -> None:
        if self.wording is None and pattern.wordings is not None and len(pattern.wordings) == 1:
            self.wording = (pattern.wordings[0], record.line)


def read_startup_log(text: str, where: str) -> StartupLog:
    """The start-up `text` describes; exit 2 (one line) for text that is not a vLLM log, or a vLLM log
    without a start-up (no engine, no memory figure, no start-up error)."""
    collected = _Collector()
    error: LoggedError | None = None
    total_records = headed = 0
    engine_ready = False
    merged_seen = False
    processes: list[str] = []
    lines = text.count("\n") + 1
    for record in records(text):
        total_records += 1
        headed += record.level is not None
        for pattern in ERRORS:
            match = pattern.pattern.search(record.message)
            if match is not None:
                error = _error(pattern.name, match, record, error)
        for pattern in LINES:
            match = pattern.pattern.search(record.message)
            if match is None:
                continue
            engine_ready |= pattern.name == "engine_ready"
            merged_seen |= pattern.name == "capacity_merged"
            collected.worded(pattern, record)
            _READERS[pattern.name](collected, match, record)
            if record.process and record.process.startswith(("Worker", "EngineCore")) \
                    and pattern.name in _WORKER_LINES and record.process not in processes:
                processes.append(record.process)
    figures, per_worker = _resolve(collected.figures)
    wording = collected.wording
    if wording is None and merged_seen:
        wording = ("merged_capacity_line", collected.figures["kv_cache_tokens"][0].line)
    version = collected.settings.pop("vllm_version", None)
    if not headed and error is None:
        raise KvplanError(f"{where}: not a vLLM log: no line has vLLM's header (LEVEL MM-DD HH:MM:SS [file.py:N]); "
                          "give the text `vllm serve` printed")
    if not figures and error is None and "engine_config" not in collected.settings:
        raise KvplanError(f"{where}: a vLLM log without a start-up: no engine configuration, memory figure or "
                          "start-up error in it; give the log from `vllm serve` to the first request")
    collected.settings.pop("engine_config", None)
    return StartupLog(
        lines=lines, records=total_records, wording=None if wording is None else wording[0],
        wording_line=None if wording is None else wording[1], vllm_version=version,
        settings=collected.settings, figures=figures, error=error, workers=tuple(processes),
        per_worker=per_worker, engine_ready=engine_ready, non_default_args=tuple(collected.given),
    )


# the figures each worker logs for itself (under TP/PP several workers log them)
_WORKER_LINES = ("model_loading", "graph_pool", "suggestion_start", "init_snapshot")
# a figure several workers logged: the binding worker's (least KV memory) where the figure is that
# worker's, else the first statement
_PER_WORKER_FIGURES = ("weights", "available_kv", "graph_pool", "graph_estimate", "peak_activation", "non_torch",
                       "consumed", "free_at_start", "non_kv")


def _resolve(found: dict[str, list[Found]]) -> tuple[dict[str, Found], dict[str, tuple[Found, ...]]]:
    per_worker = {name: tuple(values) for name, values in found.items()
                  if name in _PER_WORKER_FIGURES and len({value.process for value in values}) > 1}
    binding = None
    if "available_kv" in found:
        binding = min(found["available_kv"], key=lambda value: value.value).process
    figures = {}
    for name, values in found.items():
        chosen = values[0]
        if name in per_worker and binding is not None:
            chosen = next((value for value in values if value.process == binding), values[0])
        figures[name] = chosen
    return figures, per_worker


def _error(kind: str, match: re.Match[str], record: Record, previous: LoggedError | None) -> LoggedError:
    """The start-up's error; the first line of a kind is kept, and a phase line adds to an OOM."""
    figures: dict[str, Any] = {}
    groups = match.groupdict()
    if kind == "out_of_memory_phase":
        if previous is not None and previous.kind == "out_of_memory":
            return LoggedError(previous.kind, previous.line, previous.message,
                               {**previous.figures, "phase": groups["phase"]})
        return previous or LoggedError("out_of_memory", record.line, record.message.strip(),
                                       {"phase": groups["phase"]})
    if previous is not None and (previous.kind == kind or previous.kind == "startup_refusal"):
        return previous
    if kind == "startup_refusal":
        figures = {"device": groups["device"], "free_bytes": gib_bytes(groups["free"]),
                   "total_bytes": gib_bytes(groups["total"]), "utilization": float(groups["utilization"]),
                   "requested_bytes": gib_bytes(groups["requested"])}
    elif kind == "max_model_len_too_large":
        figures = {"max_model_len": int(groups["length"]), "needed_bytes": gib_bytes(groups["needed"]),
                   "available_bytes": gib_bytes(groups["available"]),
                   "estimated_max_model_len": None if groups["estimated"] is None else int(groups["estimated"])}
    elif kind == "max_model_len_over_derived":
        figures = {"max_model_len": int(groups["length"]), "derived_max_model_len": int(float(groups["derived"])),
                   "derived_from": groups["key"]}
    elif kind == "out_of_memory":
        figures = {"tried_bytes": round(float(groups["tried"]) * UNITS[groups["tried_unit"]]),
                   "total_bytes": gib_bytes(groups["total"]),
                   "free_bytes": round(float(groups["free"]) * UNITS[groups["free_unit"]])}
        if previous is not None and previous.kind == "out_of_memory":
            figures = {**previous.figures, **figures}
    return LoggedError(kind, record.line, _message(record.message), figures)


def _message(message: str) -> str:
    """vLLM's error text without the exception class in front."""
    text = message.strip()
    head, sep, rest = text.partition(": ")
    return rest if sep and re.fullmatch(r"[\w.]*(Error|Exception)", head) else text


# --- what each line tells ------------------------------------------------------------------------

def _version(c: _Collector, m: re.Match[str], r: Record) -> None:
    c.setting("vllm_version", m.group("version"), r)


def _model(c: _Collector, m: re.Match[str], r: Record) -> None:
    c.setting("model", m.group("model"), r)


def _config_value(text: str, key: str) -> str | None:
    match = re.search(rf"(?:^|[ ,]){key}=('(?P<quoted>[^']*)'|(?P<bare>[^,\s]+))", text)
    if match is None:
        return None
    return match.group("quoted") if match.group("quoted") is not None else match.group("bare")


def _engine_config(c: _Collector, m: re.Match[str], r: Record) -> None:
    c.setting("vllm_version", m.group("version"), r)
    c.setting("engine_config", True, r)
    config = m.group("config")
    values = {key: _config_value(config, key) for key in _CONFIG_KEYS}
    if values["model"]:
        c.setting("model", values["model"], r, replace=True)
    if values["dtype"]:
        c.setting("dtype", values["dtype"].removeprefix("torch."), r, replace=True)
    if values["max_seq_len"] and values["max_seq_len"].isdigit():
        c.setting("max_model_len", int(values["max_seq_len"]), r, replace=True)
    for key in ("tensor_parallel_size", "pipeline_parallel_size", "data_parallel_size"):
        number = values[key]
        if number is not None and number.isdigit():
            c.setting(key, int(number), r, replace=True)
    if values["quantization"] is not None:
        c.setting("quantization", None if values["quantization"] == "None" else values["quantization"], r,
                  replace=True)
    if values["kv_cache_dtype"]:
        c.setting("kv_cache_dtype", values["kv_cache_dtype"], r, replace=True)
    for key in ("enforce_eager", "enable_prefix_caching", "enable_chunked_prefill"):
        if values[key] in ("True", "False"):
            c.setting(key, values[key] == "True", r, replace=True)
    sizes = _CAPTURE_SIZES.search(config)
    if sizes is not None:
        c.setting("cudagraph_capture_sizes",
                  tuple(int(size) for size in sizes.group("sizes").split(",") if size.strip()), r, replace=True)


def _literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, MemoryError, RecursionError):
        return None


def _non_default_args(c: _Collector, m: re.Match[str], r: Record) -> None:
    args = _literal(m.group("args"))
    if not isinstance(args, dict):
        args = {match.group("key"): _literal(match.group("value")) if match.group("value")[0] in "'\"" or
                match.group("value") in ("True", "False", "None") or match.group("value")[0].isdigit()
                else match.group("value") for match in _ARG.finditer(m.group("args"))}
    if "model" not in args and isinstance(args.get("model_tag"), str):
        args["model"] = args["model_tag"]
    for key, setting in _ARG_SETTINGS.items():
        value = args.get(key)
        if isinstance(value, str | int | float | bool):
            c.setting(setting, value, r)
            if setting not in c.given:
                c.given.append(setting)


def _int_setting(name: str, group: str) -> Any:
    def read(c: _Collector, m: re.Match[str], r: Record) -> None:
        c.setting(name, int(m.group(group)), r)
    return read


def _async(c: _Collector, m: re.Match[str], r: Record) -> None:
    c.setting("async_scheduling", m.group("state") == "enabled", r)


def _snapshot(c: _Collector, m: re.Match[str], r: Record) -> None:
    c.figure("free_at_start", gib_bytes(m.group("free")), r)
    c.figure("total", gib_bytes(m.group("total")), r)


def _figures(**names: str) -> Any:
    """A reader of GiB figures: figure name -> the pattern's group."""
    def read(c: _Collector, m: re.Match[str], r: Record) -> None:
        for name, group in names.items():
            c.figure(name, gib_bytes(m.group(group)), r)
    return read


def _graph_estimate_applied(c: _Collector, m: re.Match[str], r: Record) -> None:
    c.setting("gpu_memory_utilization", float(m.group("utilization")), r)
    c.figure("graph_estimate_fraction", float(m.group("utilization")) - float(m.group("equivalent")), r)
    c.setting("graph_estimate_in_budget", True, r, replace=True)


def _graph_estimate_pending(c: _Collector, m: re.Match[str], r: Record) -> None:
    c.setting("gpu_memory_utilization", float(m.group("utilization")), r)
    c.figure("graph_estimate_fraction", float(m.group("suggested")) - float(m.group("utilization")), r)
    c.setting("graph_estimate_in_budget", False, r)


def _kv_given(c: _Collector, m: re.Match[str], r: Record) -> None:
    c.figure("free_at_start", gib_bytes(m.group("free")), r)
    c.figure("kv_cache_memory_given", gib_bytes(m.group("given")), r)


def _capacity_tokens(c: _Collector, m: re.Match[str], r: Record) -> None:
    c.figure("kv_cache_tokens", count(m.group("tokens")), r)


def _capacity_concurrency(c: _Collector, m: re.Match[str], r: Record) -> None:
    c.figure("concurrency_length", count(m.group("length")), r)
    c.figure("max_concurrency", float(m.group("concurrency")), r)
    c.setting("max_model_len", count(m.group("length")), r)


def _capacity_merged(c: _Collector, m: re.Match[str], r: Record) -> None:
    _capacity_tokens(c, m, r)
    _capacity_concurrency(c, m, r)


def _suggestion_start(c: _Collector, m: re.Match[str], r: Record) -> None:
    c.figure("free_at_start", gib_bytes(m.group("free")), r)
    c.figure("total", gib_bytes(m.group("total")), r)
    c.figure("requested", gib_bytes(m.group("requested")), r)
    c.setting("gpu_memory_utilization", float(m.group("utilization")), r)


def _suggestion_bytes(c: _Collector, m: re.Match[str], r: Record) -> None:
    c.figure("suggestion_to_requested", int(m.group("to_requested")), r)
    c.figure("suggestion_to_gpu", int(m.group("to_gpu")), r)


def _warmup(c: _Collector, m: re.Match[str], r: Record) -> None:
    _figures(free_after_warmup="free", committed_kv="committed", kept_for_activations="kept",
             warmup_peak="peak", reserve_growth="growth", measured_kv="kv", requested="requested")(c, m, r)
    c.figure("measured_blocks", int(m.group("blocks")), r)


def _extended(c: _Collector, m: re.Match[str], r: Record) -> None:
    c.figure("extended_blocks", int(m.group("blocks")), r)
    c.figure("extended_kv", gib_bytes(m.group("kv")), r)


def _nothing(c: _Collector, m: re.Match[str], r: Record) -> None:
    """A line whose presence is what counts (read by the loop)."""


_READERS = {
    "banner_version": _version,
    "banner_model": _model,
    "server_version": _version,
    "engine_config": _engine_config,
    "non_default_args": _non_default_args,
    "max_model_len": _int_setting("max_model_len", "tokens"),
    "chunked_prefill": _int_setting("max_num_batched_tokens", "tokens"),
    "default_batched_tokens": _int_setting("max_num_batched_tokens", "tokens"),
    "default_num_seqs": _int_setting("max_num_seqs", "seqs"),
    "async_scheduling": _async,
    "attention_block_size": _int_setting("block_size", "tokens"),
    "forced_block_size": _int_setting("block_size", "tokens"),
    "init_snapshot": _snapshot,
    "requested_memory": _figures(requested="requested"),
    "model_loading": _figures(weights="weights"),
    "profile_result_terms": _figures(non_kv="non_kv", peak_activation="peak", non_torch="non_torch",
                                     weights="weights"),
    "profile_result_consumed": _figures(non_kv="non_kv", torch_peak="peak", consumed="consumed", weights="weights"),
    "graph_estimate": _figures(graph_estimate="estimate"),
    "graph_estimate_applied": _graph_estimate_applied,
    "graph_estimate_pending": _graph_estimate_pending,
    "available_kv": _figures(available_kv="available"),
    "kv_cache_memory_given": _kv_given,
    "capacity_tokens": _capacity_tokens,
    "capacity_concurrency": _capacity_concurrency,
    "capacity_merged": _capacity_merged,
    "graph_capture": _figures(graph_pool="pool"),
    "graph_pool": _figures(graph_pool="pool", graph_estimate="estimate"),
    "suggestion_start": _suggestion_start,
    "suggestion_terms": _figures(weights="weights", peak_activation="peak", non_torch="non_torch", graph_pool="graphs"),
    "suggestion_consumed": _figures(consumed="consumed", peak_activation="peak", graph_pool="graphs"),
    "suggestion_bytes": _suggestion_bytes,
    "memory_after_warmup": _warmup,
    "extended_kv_cache": _extended,
    "engine_ready": _nothing,
}
assert set(_READERS) == {pattern.name for pattern in LINES}, "every line pattern has a reader"
