"""The engine settings every command takes, in one model: spelled as vLLM spells them
(`--enable-prefix-caching/--no-enable-prefix-caching`, `--gpu-memory-utilization`, ...), declared
once, and handed to a command as one typed `EngineOptions`.

A command names the settings it takes and receives them parsed:

    @app.command("plan")
    @engine_options(*PLANNING)
    def plan_command(engine: EngineOptions, json_output: bool = JSON) -> None:
        request = engine.plan_request()

The old spellings (`--prefix-caching on|off`, `--chunked-prefill/--no-chunked-prefill`,
`--no-chunked-prefill`) keep working as hidden aliases."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from dataclasses import dataclass, fields
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar, get_args

from kvplan.errors import KvplanError
from kvplan.semantics.config.cache import utilization_problem
from kvplan.semantics.releases import RELEASES, Release, Scheduling, release_named
from kvplan.units import parse_bytes

if TYPE_CHECKING:
    from kvplan.usecases.plan import PlanRequest

DEFAULT_MODEL = "Qwen/Qwen2-0.5B-Instruct"


@dataclass(frozen=True)
class EngineOptions:
    """The engine settings of one command line; None means "not given" (the workload's, the
    trace's or vLLM's default applies)."""

    model: str = DEFAULT_MODEL
    gpu: str | None = None
    gpu_memory: int | None = None                 # bytes
    gpu_memory_utilization: float | None = None
    kv_cache_memory: int | None = None            # bytes per GPU
    num_gpu_blocks: int | None = None
    num_gpu_blocks_override: int | None = None
    block_size: int | None = None
    max_model_len: int | None = None              # -1: auto-fit
    max_num_batched_tokens: int | None = None
    max_num_seqs: int | None = None
    kv_cache_dtype: str | None = None
    dtype: str | None = None
    tensor_parallel_size: int | None = None
    pipeline_parallel_size: int | None = None
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    trust_remote_code: bool = False
    vllm_version: str | None = None
    scheduling: Scheduling | None = None

    def release(self) -> Release | None:
        """The release --vllm-version names; None: the file's, else the default."""
        return None if self.vllm_version is None else release_named(self.vllm_version)

    def plan_request(self) -> PlanRequest:
        """The request `plan` and `profile` size the cache for: vLLM's defaults where unset."""
        from kvplan.usecases.plan import PlanRequest

        defaults = PlanRequest(model=self.model)
        return PlanRequest(
            model=self.model,
            kv_cache_memory_bytes=self.kv_cache_memory,
            gpu=self.gpu,
            gpu_memory_bytes=self.gpu_memory,
            gpu_memory_utilization=_given(self.gpu_memory_utilization, defaults.gpu_memory_utilization),
            block_size=self.block_size,
            max_model_len=self.max_model_len,
            max_num_batched_tokens=self.max_num_batched_tokens,
            max_num_seqs=self.max_num_seqs,
            kv_cache_dtype=_given(self.kv_cache_dtype, defaults.kv_cache_dtype),
            dtype=_given(self.dtype, defaults.dtype),
            tensor_parallel_size=_given(self.tensor_parallel_size, defaults.tensor_parallel_size),
            pipeline_parallel_size=_given(self.pipeline_parallel_size, defaults.pipeline_parallel_size),
            num_gpu_blocks_override=self.num_gpu_blocks_override,
            trust_remote_code=self.trust_remote_code,
            enable_prefix_caching=self.enable_prefix_caching,
            enable_chunked_prefill=_given(self.enable_chunked_prefill, defaults.enable_chunked_prefill),
        )


    def pick(self, settings: type[S]) -> S:
        """The options a use case's settings dataclass names, under the same names."""
        return settings(**{field.name: getattr(self, field.name) for field in fields(settings)})  # type: ignore[arg-type]


T = TypeVar("T")
S = TypeVar("S")


def _given(value: T | None, default: T) -> T:
    return default if value is None else value


# --- the options, as typer declares them -------------------------------------------------------

def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Flag:
    """One option as declared to typer (`typer.Option(default, *decls, ...)`), kept as plain data so
    that `kvplan plan` can read its flags without importing typer (`kvplan.cli.plan_plain`)."""

    annotation: Any
    default: Any
    decls: tuple[str, ...]
    help: str | None = None
    read: Callable[[Any], Any] = _same
    hidden: bool = False
    metavar: str | None = None

    def typer_option(self) -> Any:
        import typer

        return typer.Option(self.default, *self.decls, help=self.help, hidden=self.hidden, metavar=self.metavar)


def _declared(default: Any, *decls: str, help: str | None = None, hidden: bool = False,
              metavar: str | None = None) -> dict[str, Any]:
    """typer.Option's arguments, spelled as typer.Option takes them."""
    return {"default": default, "decls": decls, "help": help, "hidden": hidden, "metavar": metavar}


def _flag(annotation: Any, declared: dict[str, Any], read: Callable[[Any], Any] = _same) -> Flag:
    return Flag(annotation=annotation, read=read, **declared)


def parse_max_model_len(text: str | None) -> int | None:
    """None = the model's default, -1 = auto-fit, else a positive length."""
    if text is None:
        return None
    if text.strip().lower() in ("auto", "-1"):
        return -1
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise KvplanError(f"--max-model-len: {text!r} is not a number; give e.g. 32768, or auto") from None
    if value <= 0:
        raise KvplanError(f"--max-model-len must be positive (or auto / -1), got {value}")
    return value


def parse_optional_bytes(text: str | None, flag: str) -> int | None:
    return None if text is None else parse_bytes(text, flag)


def _utilization(value: float | None) -> float | None:
    problem = None if value is None else utilization_problem(value)
    if problem is not None:
        raise KvplanError(f"--gpu-memory-utilization: {problem}")
    return value


def _vllm_version(value: str | None) -> str | None:
    if value is not None and value not in RELEASES:
        raise KvplanError(f"--vllm-version takes {' or '.join(RELEASES)}, got {value!r}")
    return value


def _scheduling(value: str | None) -> str | None:
    if value is not None and value not in get_args(Scheduling):
        raise KvplanError(f"--scheduling takes {' or '.join(get_args(Scheduling))}, got {value!r}")
    return value


def on_off(value: str | None, flag: str = "--prefix-caching") -> bool | None:
    if value is None:
        return None
    if value.lower() in ("on", "true", "1", "yes"):
        return True
    if value.lower() in ("off", "false", "0", "no"):
        return False
    raise KvplanError(f"{flag} takes on or off, got {value!r}")


_OPTIONS: dict[str, Flag] = {
    "model": _flag(str, _declared(
        DEFAULT_MODEL, "--model", "-m",
        help="Hub id (resolved from the bundled catalog, then the local HF cache), a local directory "
        "holding config.json, or a path to a config.json.")),
    "gpu": _flag(str | None, _declared(
        None, "--gpu", help="GPU from `kvplan gpus`: its memory, batch defaults and MLA block size, and the "
        "step-time estimate of simulate.")),
    "gpu_memory": _flag(str | None, _declared(
        None, "--gpu-memory", help="Device memory total instead of --gpu, e.g. 80GiB."),
        lambda text: parse_optional_bytes(text, "--gpu-memory")),
    "gpu_memory_utilization": _flag(float | None, _declared(
        None, "--gpu-memory-utilization",
        help="vLLM's gpu_memory_utilization in (0, 1]; default 0.9, vLLM's."), _utilization),
    "kv_cache_memory": _flag(str | None, _declared(
        None, "--kv-cache-memory",
        help="KV-cache bytes per GPU, as vLLM's --kv-cache-memory: 25938100224, 24.16GiB, 900MiB."),
        lambda text: parse_optional_bytes(text, "--kv-cache-memory")),
    "num_gpu_blocks": _flag(int | None, _declared(
        None, "--num-gpu-blocks", help="Pool size, null block included (replaces the workload's or trace's).")),
    "num_gpu_blocks_override": _flag(int | None, _declared(
        None, "--num-gpu-blocks-override", help="Replace the computed block count (vLLM's flag).")),
    "block_size": _flag(int | None, _declared(
        None, "--block-size", help="Tokens per block (default 16; MLA on some GPUs and hybrids force it).")),
    "max_model_len": _flag(str | None, _declared(
        None, "--max-model-len",
        help="Longest prompt + output. Default: the model's limit as vLLM derives it; `auto` or -1 fits the "
        "largest."), parse_max_model_len),
    "max_num_batched_tokens": _flag(int | None, _declared(
        None, "--max-num-batched-tokens",
        help="Token budget per step. Default: what `vllm serve` picks for the GPU (2048 without --gpu).")),
    "max_num_seqs": _flag(int | None, _declared(
        None, "--max-num-seqs", help="Most running requests. Default: what `vllm serve` picks (256 without --gpu).")),
    "kv_cache_dtype": _flag(str | None, _declared(
        None, "--kv-cache-dtype", help="auto (the default), fp8, fp8_e4m3 or fp8_e5m2.")),
    "dtype": _flag(str | None, _declared(
        None, "--dtype", help="auto (the default), bfloat16, float16 or float32 (as vLLM's --dtype).")),
    "tensor_parallel_size": _flag(int | None, _declared(
        None, "--tensor-parallel-size", "-tp", help="Tensor-parallel size (default 1); every figure is per GPU.")),
    "pipeline_parallel_size": _flag(int | None, _declared(
        None, "--pipeline-parallel-size", "-pp", help="Pipeline-parallel size (default 1).")),
    "enable_prefix_caching": _flag(bool | None, _declared(
        None, "--enable-prefix-caching/--no-enable-prefix-caching",
        help="vLLM's prefix caching. Default: on, except for Mamba hybrids (as vLLM 0.17.1).")),
    "enable_chunked_prefill": _flag(bool | None, _declared(
        None, "--enable-chunked-prefill/--no-enable-chunked-prefill", help="vLLM's chunked prefill (default on).")),
    "trust_remote_code": _flag(bool, _declared(
        False, "--trust-remote-code", help="Allow transformers to run the model's code.")),
    "vllm_version": _flag(str | None, _declared(
        None, "--vllm-version", metavar="|".join(RELEASES),
        help="The vLLM release whose rules to follow (default: the file's, else the default release)."),
        _vllm_version),
    "scheduling": _flag(str | None, _declared(
        None, "--scheduling", metavar="|".join(get_args(Scheduling)),
        help="The engine loop: async, what `vllm serve` does (the default), or sync, as with vLLM's "
        "--no-async-scheduling."), _scheduling),
}
# the spellings kvplan used before it followed vLLM's, kept working but not shown
_ALIASES: dict[str, tuple[str, Flag]] = {
    "prefix_caching_alias": ("enable_prefix_caching", _flag(str | None, _declared(
        None, "--prefix-caching", metavar="on|off", hidden=True), on_off)),
    "chunked_prefill_alias": ("enable_chunked_prefill", _flag(bool | None, _declared(
        None, "--chunked-prefill/--no-chunked-prefill", hidden=True))),
}
_FLAG_OF = {"enable_prefix_caching": "--enable-prefix-caching", "enable_chunked_prefill": "--enable-chunked-prefill"}

PLANNING = (
    "model", "kv_cache_memory", "gpu", "gpu_memory", "gpu_memory_utilization", "block_size", "max_model_len",
    "max_num_batched_tokens", "max_num_seqs", "kv_cache_dtype", "dtype", "tensor_parallel_size",
    "pipeline_parallel_size", "num_gpu_blocks_override", "enable_prefix_caching", "enable_chunked_prefill",
    "trust_remote_code",
)
SCHEDULING = (
    "num_gpu_blocks", "block_size", "enable_prefix_caching", "max_num_batched_tokens", "max_num_seqs",
    "max_model_len", "enable_chunked_prefill", "vllm_version", "scheduling",
)
SIMULATING = (
    *SCHEDULING, "gpu", "gpu_memory_utilization", "gpu_memory", "kv_cache_memory", "kv_cache_dtype", "dtype",
    "tensor_parallel_size", "pipeline_parallel_size",
)
assert {field.name for field in fields(EngineOptions)} == set(_OPTIONS)


def engine_flags(names: tuple[str, ...]) -> dict[str, Flag]:
    """The flags of the named engine settings, then the hidden old spellings of any of them."""
    unknown = [name for name in names if name not in _OPTIONS]
    if unknown:
        raise ValueError(f"no engine option {unknown}")
    flags = {name: _OPTIONS[name] for name in names}
    flags.update({alias: flag for alias, (target, flag) in _ALIASES.items() if target in names})
    return flags


def read_engine_options(values: dict[str, Any]) -> EngineOptions:
    """The settings from the raw values of `engine_flags(...)`, each read (sizes, on/off, limits)
    and each old spelling folded into its setting."""
    settings = {name: _OPTIONS[name].read(value) for name, value in values.items() if name in _OPTIONS}
    for alias, (target, flag) in _ALIASES.items():
        if alias not in values:
            continue
        given = flag.read(values[alias])
        if given is not None and settings[target] is not None and given != settings[target]:
            raise KvplanError(f"{_FLAG_OF[target]} and its old spelling disagree: give one of them")
        if settings[target] is None:
            settings[target] = given
    return EngineOptions(**settings)


def engine_options(*names: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command the named engine settings as options, and call it with them parsed into
    `engine: EngineOptions` (aliases of the old spellings included, hidden)."""
    import typer
    from typer.models import ArgumentInfo

    flags = engine_flags(names)

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(command, eval_str=True)
        own = [p for p in signature.parameters.values() if p.name != "engine"]
        # the context and the arguments first, the engine settings, then the command's own options
        leading = [p for p in own if p.annotation is typer.Context or isinstance(p.default, ArgumentInfo)]
        trailing = [p for p in own if p not in leading]
        added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=flag.typer_option(),
                                   annotation=flag.annotation) for name, flag in flags.items()]
        parameters = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in (*leading, *added, *trailing)]

        @functools.wraps(command)
        def run(**values: Any) -> Any:
            engine = read_engine_options({name: values.pop(name) for name in flags})
            return command(engine=engine, **values)

        run.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in parameters}
        return run

    return decorate


def check_output(flag: str, path: Path, inputs: tuple[Path, ...], what: str) -> None:
    """Refuse to write over a directory or over a file the command reads (nothing the user gave is lost)."""
    if path.is_dir():
        raise KvplanError(f"{flag} {path}: is a directory; give a file path")
    for given in inputs:
        if path.resolve() == given.resolve() or (path.exists() and given.exists() and path.samefile(given)):
            raise KvplanError(f"{flag} {path}: that is {what} ({given.name}); choose another output file")
