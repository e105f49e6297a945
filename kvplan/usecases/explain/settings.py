"""The settings a logged start-up ran with, each with where it came from: the log (the line), a flag
the user gave, the GPU catalog entry nearest the logged memory, or vLLM's default (assumed: the log
does not say it); and the release whose rules predict it.

    resolve_settings(log, given, release_flag) -> ResolvedSettings"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from kvplan.errors import KvplanError
from kvplan.gpus.catalog import GpuSpec, get_gpu, list_gpus
from kvplan.semantics.engine.args import EngineArgs
from kvplan.semantics.memory.startup_log import GIB, LogWording
from kvplan.semantics.releases import NEWEST_RELEASE, RELEASES, Release, release_named
from kvplan.units import format_gib
from kvplan.usecases.explain.log_reader import StartupLog
from kvplan.usecases.plan import PlanRequest

Source = Literal["log", "flag", "catalog", "assumed"]
# the catalog GPUs whose memory lies this near a logged total are candidates for the logged GPU
_GPU_MATCH_BYTES = GIB // 10
# the engine arguments a log can state, under the log's setting names (vLLM's)
LOGGED_FIELDS = (
    "model", "dtype", "max_model_len", "tensor_parallel_size", "pipeline_parallel_size", "gpu_memory_utilization",
    "block_size", "kv_cache_dtype", "enable_prefix_caching", "enable_chunked_prefill", "max_num_batched_tokens",
    "max_num_seqs", "kv_cache_memory_bytes", "num_gpu_blocks_override", "enable_extensible_kv_cache",
)
# settings of the log kvplan reports but does not plan with
REPORTED_ONLY = ("quantization", "data_parallel_size", "async_scheduling", "enforce_eager", "cudagraph_capture_sizes")


@dataclass(frozen=True)
class Setting:
    """One setting of the start-up: its value (None: vLLM's default, resolved by the plan), where
    it came from and the log line that states it."""

    name: str
    value: Any
    source: Source
    line: int | None = None
    note: str | None = None


@dataclass(frozen=True)
class ResolvedSettings:
    request: PlanRequest | None          # None: the log does not name a model, and no --model was given
    settings: tuple[Setting, ...]
    release: Release
    release_reason: str
    gpu: GpuSpec | None
    total_bytes: int | None              # the device's memory: logged, else the GPU's

    def source(self, name: str) -> Setting | None:
        return next((setting for setting in self.settings if setting.name == name), None)


def observed_policies(log: StartupLog) -> dict[str, Any]:
    """The release policies the log's lines show (`Release` field -> value): its wording, whether the
    CUDA-graph estimate came out of the KV budget, and how non-KV memory was added up (the
    --kv-cache-memory suggestion names consumed memory, or non-torch memory)."""
    seen: dict[str, Any] = {}
    if log.wording is not None:
        seen["log_format"] = log.wording
    if log.setting("graph_estimate_in_budget") is not None:
        seen["cuda_graphs_in_budget"] = log.setting("graph_estimate_in_budget")
    if log.figure("consumed") is not None:
        seen["non_kv_memory"] = "consumed_plus_transient_peak"
    elif log.figure("non_torch") is not None:
        seen["non_kv_memory"] = "weights_peak_non_torch"
    return seen


def release_for(log: StartupLog, release_flag: str | None) -> tuple[Release, str]:
    """--vllm-version, else the logged version when kvplan reproduces it, else the release that
    shares most of the policies the log shows (`observed_policies`; its wording first), the nearest
    version among those that share as many, else the newest."""
    version = None if log.vllm_version is None else str(log.vllm_version.value)
    if release_flag is not None:
        return release_named(release_flag), f"--vllm-version {release_flag}"
    public = None if version is None else version.split("+", 1)[0]
    if public in RELEASES:
        return RELEASES[public], f"the log is vLLM {version}"
    said = f"the log is vLLM {version}, which kvplan does not reproduce" if version else \
        "the log does not name its release"
    seen = observed_policies(log)
    if not seen and _version_key(public or "") is None:
        return NEWEST_RELEASE, f"{said}: predicting with the newest release kvplan reproduces"

    def score(release: Release) -> tuple[int, int, int]:
        shared = [name for name, value in seen.items() if getattr(release, name) == value]
        return len(shared), int("log_format" in shared), -_distance(public, release)
    chosen = max(reversed(list(RELEASES.values())), key=score)
    shared = [name for name, value in seen.items() if getattr(chosen, name) == value]
    if not shared:
        return chosen, (f"{said}; its lines show none of the policies that tell releases apart: predicting with "
                        f"the nearest release, {chosen.version}")
    words = {"log_format": f"its wording ({_WORDING_WORDS[chosen.log_format]})",
             "cuda_graphs_in_budget": "the CUDA-graph estimate " + ("taken from" if chosen.cuda_graphs_in_budget
                                                                    else "left out of") + " the KV budget",
             "non_kv_memory": "non-KV memory as " + ("consumed + transient peak"
                                                     if chosen.non_kv_memory == "consumed_plus_transient_peak"
                                                     else "weights + peak + non-torch")}
    others = [name for name in seen if name not in shared]
    unlike = f"; unlike {chosen.version}, its lines show {', '.join(others)}" if others else ""
    return chosen, f"{said}; as in {chosen.version}: {', '.join(words[name] for name in shared)}{unlike}"


def _distance(version: str | None, release: Release) -> int:
    key, other = _version_key(version or ""), _version_key(release.version)
    if key is None or other is None:
        return 0
    def number(parts: tuple[int, ...]) -> int:
        return sum(part * 1000 ** (2 - index) for index, part in enumerate(parts))
    return abs(number(key) - number(other))


def _version_key(version: str) -> tuple[int, ...] | None:
    parts = version.split(".")[:3]
    return tuple(int(part) for part in parts) if len(parts) == 3 and all(part.isdigit() for part in parts) else None


_WORDING_WORDS: dict[str, str] = {
    "separate_capacity_lines": "two capacity lines, GPU KV cache size then Maximum concurrency",
    "merged_capacity_line": "one merged capacity line",
    "merged_capacity_line_after_warmup": "the capacity line after warmup, Memory after warmup, Extended KV cache",
}


def wording_words(wording: LogWording | None) -> str:
    return "not recognised" if wording is None else _WORDING_WORDS[wording]


def nearest_gpus(total_bytes: int) -> list[GpuSpec]:
    """The catalog GPUs whose memory lies within 0.1 GiB of a logged total, nearest first."""
    close = [gpu for gpu in list_gpus() if abs(gpu.total_bytes - total_bytes) <= _GPU_MATCH_BYTES]
    return sorted(close, key=lambda gpu: abs(gpu.total_bytes - total_bytes))


def nearest_gpus_within(total_bytes: int, share: float) -> list[GpuSpec]:
    """The catalog GPUs whose memory lies within `share` of a total, nearest first."""
    close = [gpu for gpu in list_gpus() if abs(gpu.total_bytes - total_bytes) <= share * total_bytes]
    return sorted(close, key=lambda gpu: abs(gpu.total_bytes - total_bytes))


def _logged_total(log: StartupLog) -> int | None:
    if log.figure("total") is not None:
        return int(log.figure("total"))
    if log.error is not None and "total_bytes" in log.error.figures:
        return int(log.error.figures["total_bytes"])
    return None


# a device total inferred from the CUDA-graph lines names the catalog GPU within this share of it
_INFERRED_MATCH = 0.03


def _total_from_graph_lines(log: StartupLog) -> int | None:
    """The device total the CUDA-graph lines imply: vLLM prints the estimate in GiB and the share of
    the total it is (the utilization it equals, to 4 decimals), so estimate / share, roughly."""
    estimate, share = log.figure("graph_estimate"), log.figure("graph_estimate_fraction")
    if not estimate or not share or share <= 0:
        return None
    return round(estimate / share)


def resolve_settings(log: StartupLog, given: Mapping[str, Any], release_flag: str | None) -> ResolvedSettings:
    """The settings to predict the logged start-up with. `given` holds the flags the user gave
    (vLLM's engine argument names, plus `gpu` and `gpu_memory_bytes`): a flag replaces what the log says."""
    release, reason = release_for(log, release_flag)
    settings: list[Setting] = []
    values: dict[str, Any] = {}
    for name in LOGGED_FIELDS:
        found = log.settings.get(name)
        if name in given and given[name] is not None:
            note = None
            if found is not None and found.value != given[name]:
                note = f"the log says {found.value!r} (line {found.line})"
            settings.append(Setting(name, given[name], "flag", None, note))
            values[name] = given[name]
        elif found is not None:
            settings.append(Setting(name, found.value, "log", found.line))
            values[name] = found.value
        else:
            settings.append(Setting(name, None, "assumed", None, "not in the log: vLLM's default"))
    for name in REPORTED_ONLY:
        found = log.settings.get(name)
        if found is not None:
            settings.append(Setting(name, found.value, "log", found.line, "read, not used to predict"))
    gpu, total, gpu_settings = _device(log, given)
    settings.extend(gpu_settings)
    model = values.get("model")
    request = None
    if isinstance(model, str):
        fields = {key: value for key, value in values.items() if key != "model"}
        fields = {key: value for key, value in fields.items() if value is not None}
        if isinstance(fields.get("gpu_memory_utilization"), int | float):
            fields["gpu_memory_utilization"] = float(fields["gpu_memory_utilization"])
        args = EngineArgs(model=model, trust_remote_code=bool(given.get("trust_remote_code", False)),
                          **_typed(fields))
        # the utilization is resolved for the logged KV memory's sizing path, then the memory is left to predict
        request = PlanRequest(args=args, gpu=None if gpu is None else gpu.key, gpu_memory_bytes=total,
                              release=release).with_args(kv_cache_memory_bytes=None)
    return ResolvedSettings(request, tuple(settings), release, reason, gpu, total)


def _typed(fields: dict[str, Any]) -> dict[str, Any]:
    """The logged values as EngineArgs takes them (vLLM prints `max_model_len` as an int, a dtype
    name, `None` for unset)."""
    typed = dict(fields)
    for key in ("max_model_len", "tensor_parallel_size", "pipeline_parallel_size", "block_size",
                "max_num_batched_tokens", "max_num_seqs", "kv_cache_memory_bytes", "num_gpu_blocks_override"):
        value = typed.get(key)
        if value is not None and (not isinstance(value, int) or isinstance(value, bool)):
            raise KvplanError(f"the log's {key} is {typed[key]!r}, not a whole number; give --{key.replace('_', '-')}")
    return typed


def _device(log: StartupLog, given: Mapping[str, Any]) -> tuple[GpuSpec | None, int | None, list[Setting]]:
    """The GPU (for its compute capability, SM count and vLLM's batch tiers) and its memory: --gpu
    and --gpu-memory first, the logged total second (nearest catalog GPU within 0.1 GiB)."""
    settings: list[Setting] = []
    total: int | None
    logged = _logged_total(log)
    total_line = log.figures["total"].line if "total" in log.figures else (
        log.error.line if log.error is not None and logged is not None else None)
    gpu = get_gpu(given["gpu"]) if given.get("gpu") else None
    if gpu is not None:
        settings.append(Setting("gpu", gpu.key, "flag"))
    if given.get("gpu_memory_bytes") is not None:
        total = int(given["gpu_memory_bytes"])
        settings.append(Setting("gpu_memory", total, "flag", None,
                                None if logged is None else f"the log says {format_gib(logged)} GiB"))
    elif logged is not None:
        total = logged
        settings.append(Setting("gpu_memory", total, "log", total_line,
                                f"{format_gib(logged)} GiB as logged (known to 0.01 GiB)"))
    else:
        inferred = None if gpu is not None else _total_from_graph_lines(log)
        close = [] if inferred is None else [
            candidate for candidate in nearest_gpus_within(inferred, _INFERRED_MATCH)]
        if gpu is None and close:
            gpu = close[0]
            others = f" (as near, to their precision: {', '.join(other.key for other in close[1:])})" \
                if close[1:] else ""
            settings.append(Setting("gpu", gpu.key, "catalog", log.figures["graph_estimate"].line,
                                    f"the CUDA-graph lines put the total near {format_gib(inferred or 0)} GiB (the "
                                    f"estimate over the share of memory it is){others}; give --gpu if it was "
                                    "another"))
        total = None if gpu is None else gpu.total_bytes
        settings.append(Setting("gpu_memory", total, "catalog" if gpu else "assumed", None,
                                "not in the log" + (f": {gpu.key}'s" if gpu else ": give --gpu or --gpu-memory")))
    if gpu is None and total is not None:
        close = nearest_gpus(total)
        if close:
            gpu = close[0]
            others = f"; also within 0.1 GiB: {', '.join(other.key for other in close[1:])}" if close[1:] else ""
            settings.append(Setting("gpu", gpu.key, "catalog", None,
                                    f"the catalog GPU nearest {format_gib(total)} GiB ({format_gib(gpu.total_bytes)} "
                                    f"GiB){others}; give --gpu if it was another"))
        else:
            settings.append(Setting("gpu", None, "assumed", None,
                                    f"no catalog GPU has {format_gib(total)} GiB: planned for that memory alone"))
    return gpu, total, settings
