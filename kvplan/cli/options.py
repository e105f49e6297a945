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
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING, Any, TypeVar, get_args

from kvplan.errors import KvplanError
from kvplan.hub import HubAccess, hub_access
from kvplan.parsing import FieldError
from kvplan.schema import ByteSize, Integer, Kind, Text
from kvplan.semantics.engine.trace_format import (
    BATCHED_TOKENS,
    BLOCK_SIZE,
    MODEL_LEN,
    NUM_SEQS,
    POOL_BLOCKS,
    SCHEDULING_MODE,
    VLLM_VERSION,
)
from kvplan.semantics.releases import NEWEST_RELEASE, RELEASES, Release, Scheduling, default_release, release_named
from kvplan.units import parse_count
from kvplan.usecases.plan_settings import DTYPE, GPU, KV_CACHE_DTYPE, MEMORY, MODEL, PARALLEL, UTILIZATION
from kvplan.usecases.step_time_methods import STEP_TIME_METHODS

if TYPE_CHECKING:
    from kvplan.usecases.plan import PlanRequest

STEP_TIME = Text(choices=STEP_TIME_METHODS, description="how a step's time is estimated")
REVISION = Text(max_length=256, controls=False, description="a hub revision: branch, tag or commit")


@dataclass(frozen=True)
class EngineOptions:
    """The engine settings of one command line; None means "not given" (the workload's, the
    trace's or vLLM's default applies)."""

    model: str | None = None                      # None: not given (a command that plans refuses that)
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
    offline: bool = False                         # never ask the Hugging Face hub
    revision: str | None = None                   # the hub revision of --model
    vllm_version: str | None = None
    scheduling: Scheduling | None = None
    enable_extensible_kv_cache: bool | None = None
    enforce_eager: bool | None = None             # no CUDA graphs: no graph pool, and eager step times
    quantization: str | None = None               # vLLM's --quantization: None, the checkpoint's method
    step_time: str | None = None                  # how steps are priced: auto, kernels or roofline
    prompt_len: tuple[int, ...] | None = None     # --prompt-len: lengths to give the concurrency at

    def release(self) -> Release | None:
        """The release --vllm-version names; None: the file's, else the default."""
        return None if self.vllm_version is None else release_named(self.vllm_version)

    def release_or_default(self) -> Release:
        """The release --vllm-version names, else the default (`semantics.releases.default_release`)."""
        return self.release() or default_release()

    def plan_request(self, command: str = "plan") -> PlanRequest:
        """The request `plan` and `profile` size the cache for: vLLM's defaults where unset; no model
        is bad input (exit 2) with the command's usage, never a model chosen for the user."""
        from kvplan.usecases.plan import PlanRequest

        model = self.model
        if model is None:
            raise KvplanError(f"no model given; usage: kvplan {command} MODEL [OPTIONS], as `vllm serve MODEL` "
                              "(or --model MODEL): a hub id, a model directory or a config.json")
        defaults = PlanRequest(model=model)
        return PlanRequest(
            model=model,
            kv_cache_memory_bytes=self.kv_cache_memory,
            gpu=self.gpu,
            gpu_memory_bytes=self.gpu_memory,
            gpu_memory_utilization=self.gpu_memory_utilization,   # None: the release's default
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
            release=self.release_or_default(),
            enable_extensible_kv_cache=self.enable_extensible_kv_cache,
            enforce_eager=bool(self.enforce_eager),
            quantization=self.quantization,
            prompt_lens=_given(self.prompt_len, defaults.prompt_lens),
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


def token_lengths(text: str | None) -> tuple[int, ...] | None:
    """--prompt-len 1024,4096: positive token counts, each once."""
    if text is None:
        return None
    words = [word.strip() for word in text.split(",")]
    if not all(word.isdigit() and 0 < len(word) <= 9 and int(word) > 0 for word in words):
        raise KvplanError(f"--prompt-len {text!r}: give positive token counts separated by commas, e.g. 1024,4096")
    lengths = tuple(int(word) for word in words)
    if len(set(lengths)) != len(lengths):
        raise KvplanError(f"--prompt-len {text!r}: a length is given twice")
    return lengths


def _flag(annotation: Any, declared: dict[str, Any], read: Callable[[Any], Any] = _same) -> Flag:
    return Flag(annotation=annotation, read=read, **declared)


def checked(kind: Kind, flag: str) -> Callable[[Any], Any]:
    """A reader that checks an option's value against its kind (None: not given)."""
    def read(value: Any) -> Any:
        if value is not None:
            try:
                kind.check(value, flag)
            except FieldError as error:
                raise KvplanError(str(error)) from None
        return value
    return read


def parse_max_model_len(text: str | None) -> int | None:
    """None = the model's default, -1 = auto-fit, else a length as vLLM's human_readable_int_or_auto reads it."""
    if text is None:
        return None
    if text.strip().lower() in ("auto", "-1"):
        return -1
    return checked(MODEL_LEN, "--max-model-len")(parse_count(text, "--max-model-len"))


def parse_optional_bytes(text: str | None, flag: str, kind: ByteSize = MEMORY) -> int | None:
    """A size flag: one number and one unit (`24GiB`, `24G` as vLLM reads it), within the kind's range."""
    if text is None:
        return None
    try:
        return kind.read(text, flag)
    except FieldError as error:
        raise KvplanError(str(error)) from None


def parse_optional_count(text: str | None, flag: str, kind: Integer) -> int | None:
    return None if text is None else checked(kind, flag)(parse_count(text, flag))


def on_off(value: str | None, flag: str = "--prefix-caching") -> bool | None:
    if value is None:
        return None
    if value.lower() in ("on", "true", "1", "yes"):
        return True
    if value.lower() in ("off", "false", "0", "no"):
        return False
    raise KvplanError(f"{flag} takes on or off, got {value!r}")


# vLLM's spellings (EngineArgs: --tensor-parallel-size/-tp, --pipeline-parallel-size/-pp,
# --kv-cache-memory-bytes), with kvplan's earlier ones (--tp, --pp, --kv-cache-memory); `fit`, whose
# flags take lists, declares them with the same spellings
TENSOR_PARALLEL_DECLS = ("--tensor-parallel-size", "-tp", "--tp")
PIPELINE_PARALLEL_DECLS = ("--pipeline-parallel-size", "-pp", "--pp")
KV_CACHE_MEMORY_DECLS = ("--kv-cache-memory", "--kv-cache-memory-bytes")
QUANTIZATION = Text(max_length=64, controls=False, description="a quantization method, as vLLM's --quantization")

_OPTIONS: dict[str, Flag] = {
    "model": _flag(str | None, _declared(
        None, "--model", "-m",
        help="The model, also given as the first word after the command (as `vllm serve MODEL`): a hub id "
        "(resolved from the bundled catalog, then the local HF cache), a local directory holding config.json, or "
        "a path to a config.json. A hub id that is neither is fetched from the Hugging Face hub (HF_TOKEN or the "
        "saved login; never with --offline)."), checked(MODEL, "--model")),
    "gpu": _flag(str | None, _declared(
        None, "--gpu", help="GPU from `kvplan gpus`: its memory, batch defaults and MLA block size, and the "
        "step-time estimate of simulate."), checked(GPU, "--gpu")),
    "gpu_memory": _flag(str | None, _declared(
        None, "--gpu-memory", help="Device memory total instead of --gpu, e.g. 80GiB (units: docs/inputs.md)."),
        lambda text: parse_optional_bytes(text, "--gpu-memory")),
    "gpu_memory_utilization": _flag(float | None, _declared(
        None, "--gpu-memory-utilization",
        help="vLLM's gpu_memory_utilization in (0, 1]; default the release's (0.9 in 0.17.1, 0.92 in 0.33.0; "
        "0.34.0: 1.0 with the extensible KV cache, 0.92 without)."),
        checked(UTILIZATION, "--gpu-memory-utilization")),
    "kv_cache_memory": _flag(str | None, _declared(
        None, *KV_CACHE_MEMORY_DECLS,
        help="KV-cache bytes per GPU (vLLM's --kv-cache-memory-bytes, either spelling): 25938100224, 24.16GiB, "
        "900MiB, or vLLM's 24G (GiB) and 24g (GB)."),
        lambda text: parse_optional_bytes(text, "--kv-cache-memory")),
    "num_gpu_blocks": _flag(int | None, _declared(
        None, "--num-gpu-blocks", help="Pool size, null block included (replaces the workload's or trace's)."),
        checked(POOL_BLOCKS, "--num-gpu-blocks")),
    "num_gpu_blocks_override": _flag(int | None, _declared(
        None, "--num-gpu-blocks-override", help="Replace the computed block count (vLLM's flag)."),
        checked(POOL_BLOCKS, "--num-gpu-blocks-override")),
    "block_size": _flag(int | None, _declared(
        None, "--block-size", help="Tokens per block (default the release's: 16, 64 in 0.34.0; MLA backends and "
        "hybrids change it)."),
        checked(BLOCK_SIZE, "--block-size")),
    "max_model_len": _flag(str | None, _declared(
        None, "--max-model-len",
        help="Longest prompt + output. Default: the model's limit as vLLM derives it; `auto` or -1 fits the "
        "largest."), parse_max_model_len),
    "max_num_batched_tokens": _flag(str | None, _declared(
        None, "--max-num-batched-tokens",
        help="Token budget per step, e.g. 8192 or 8K (as vLLM reads it). Default: what `vllm serve` picks for the "
        "GPU (2048 for one outside the catalog, given by --gpu-memory alone)."),
        lambda text: parse_optional_count(text, "--max-num-batched-tokens", BATCHED_TOKENS)),
    "max_num_seqs": _flag(int | None, _declared(
        None, "--max-num-seqs",
        help="Most running requests. Default: what `vllm serve` picks for the GPU (256 for one outside the catalog)."),
        checked(NUM_SEQS, "--max-num-seqs")),
    "kv_cache_dtype": _flag(str | None, _declared(
        None, "--kv-cache-dtype", help="auto (the default), fp8, fp8_e4m3 or fp8_e5m2."),
        checked(KV_CACHE_DTYPE, "--kv-cache-dtype")),
    "dtype": _flag(str | None, _declared(
        None, "--dtype", help="auto (the default), bfloat16, float16 or float32 (as vLLM's --dtype)."),
        checked(DTYPE, "--dtype")),
    "tensor_parallel_size": _flag(int | None, _declared(
        None, *TENSOR_PARALLEL_DECLS, help="Tensor-parallel size (default 1); every figure is per GPU."),
        checked(PARALLEL, "--tensor-parallel-size")),
    "pipeline_parallel_size": _flag(int | None, _declared(
        None, *PIPELINE_PARALLEL_DECLS, help="Pipeline-parallel size (default 1)."),
        checked(PARALLEL, "--pipeline-parallel-size")),
    "enable_prefix_caching": _flag(bool | None, _declared(
        None, "--enable-prefix-caching/--no-enable-prefix-caching",
        help="vLLM's prefix caching. Default: on" + "".join(
            f", except for Mamba hybrids in vLLM {' and '.join(off)}" for off in
            [[r.version for r in RELEASES.values() if not r.prefix_caching_for_hybrids]] if off) + ".")),
    "enable_chunked_prefill": _flag(bool | None, _declared(
        None, "--enable-chunked-prefill/--no-enable-chunked-prefill", help="vLLM's chunked prefill (default on).")),
    "trust_remote_code": _flag(bool, _declared(
        False, "--trust-remote-code",
        help="Allow transformers to run the model's own code (only this flag does: never a file kvplan reads).")),
    "offline": _flag(bool, _declared(
        False, "--offline", help="Never use the network (as HF_HUB_OFFLINE=1): a model must be local, bundled or "
        "cached.")),
    "revision": _flag(str | None, _declared(
        None, "--revision", help="Hub revision (branch, tag or commit) of --model when it is fetched or cached."),
        checked(REVISION, "--revision")),
    "vllm_version": _flag(str | None, _declared(
        None, "--vllm-version", metavar="|".join(RELEASES),
        help="The vLLM release whose rules to follow. Default: the input file's vllm_version, else the "
        f"installed vllm's version when kvplan reproduces it, else {NEWEST_RELEASE.version} "
        "(`kvplan version` says which)."),
        checked(VLLM_VERSION, "--vllm-version")),
    "enable_extensible_kv_cache": _flag(bool | None, _declared(
        None, "--enable-extensible-kv-cache/--no-enable-extensible-kv-cache",
        help="vLLM 0.34.0's extensible KV cache: sized from the memory measured after warmup and CUDA-graph capture. "
        "Default: on unless --kv-cache-memory or --num-gpu-blocks-override is given; off: 0.33.0's estimate decides."
    )),
    "scheduling": _flag(str | None, _declared(
        None, "--scheduling", metavar="|".join(get_args(Scheduling)),
        help="The engine loop: async, what `vllm serve` does (the default), or sync, as with vLLM's "
        "--no-async-scheduling."), checked(SCHEDULING_MODE, "--scheduling")),
    "enforce_eager": _flag(bool | None, _declared(
        None, "--enforce-eager/--no-enforce-eager",
        help="vLLM's --enforce-eager: no CUDA graphs, so no graph pool is taken from the KV memory and every "
        "kernel is launched one by one (the step-time estimate).")),
    "quantization": _flag(str | None, _declared(
        None, "--quantization", "-q", metavar="METHOD",
        help="vLLM's --quantization: the checkpoint's own method (the default), or fp8 on an unquantized "
        "checkpoint (vLLM quantizes its linear layers at load: fp8 weights)."),
        checked(QUANTIZATION, "--quantization")),
    "step_time": _flag(str | None, _declared(
        None, "--step-time", metavar="|".join(STEP_TIME_METHODS),
        help="How a step's time is estimated: kernels (kernel times measured on the GPU, from the `perf` "
        "extra's aiconfigurator-core database), roofline (the roofline with efficiency factors), or auto "
        "(the default: measured kernels where they are the more accurate on the public results, "
        "docs/accuracy.md, else the roofline). Where the kernels cannot price the setup, kvplan says so "
        "and uses the roofline."), checked(STEP_TIME, "--step-time")),
    "prompt_len": _flag(str | None, _declared(
        None, "--prompt-len", metavar="TOKENS[,TOKENS...]",
        help="Request lengths (prompt + output tokens) to say how many requests fit at once for, beside vLLM's "
        "concurrency at max_model_len. Default: 1024,4096,16384 (those below max_model_len)."), token_lengths),
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
    "trust_remote_code", "offline", "revision", "vllm_version", "enable_extensible_kv_cache", "enforce_eager",
    "quantization", "prompt_len",
)
SCHEDULING = (
    "num_gpu_blocks", "block_size", "enable_prefix_caching", "max_num_batched_tokens", "max_num_seqs",
    "max_model_len", "enable_chunked_prefill", "vllm_version", "scheduling",
)
SIMULATING = (
    *SCHEDULING, "gpu", "gpu_memory_utilization", "gpu_memory", "kv_cache_memory", "kv_cache_dtype", "dtype",
    "tensor_parallel_size", "pipeline_parallel_size", "trust_remote_code", "offline", "revision", "enforce_eager",
    "step_time",
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


def network_access(*, may_fetch: bool, offline: bool, revision: str | None, refusal: str) -> HubAccess:
    """What the command may do with the hub: `may_fetch` as its documentation says, never with
    --offline; `refusal` says why not when it may not."""
    if offline:
        return HubAccess(allowed=False, reason="--offline is given", revision=revision)
    return HubAccess(allowed=may_fetch, reason=refusal, revision=revision)


def engine_access(engine: EngineOptions, may_fetch: bool = True) -> HubAccess:
    """The hub access of a command that takes these engine settings (--offline, --revision)."""
    return network_access(may_fetch=may_fetch, offline=engine.offline, revision=engine.revision,
                          refusal="this command uses no network")


MODEL_ARGUMENT_HELP = "The model, as `vllm serve MODEL` takes it (or --model MODEL)."


def split_model_word(first: str | None, extra: list[str]) -> tuple[str | None, list[str]]:
    """The model word among a command's extra words (`--assert-*` flags, each with its value).

    Click hands the first word it does not know, flag or not, to the MODEL argument and the rest to
    the extra words in order, so `[first, *extra]` is the command line's own order: the model is
    its first word that is neither a flag nor the value of the flag before it."""
    words = ([] if first is None else [first]) + list(extra)
    model, rest, index = None, [], 0
    while index < len(words):
        word = words[index]
        index += 1
        if word.startswith("-"):
            rest.append(word)
            if "=" not in word and index < len(words):
                rest.append(words[index])
                index += 1
        elif model is None:
            model = word
        else:
            rest.append(word)
    return model, rest


def fold_model_argument(engine: EngineOptions, positional: str | None) -> EngineOptions:
    """The model given as the command's first word, as `vllm serve MODEL`, folded into --model."""
    if positional is None:
        return engine
    checked(MODEL, "MODEL")(positional)
    if engine.model is not None and engine.model != positional:
        raise KvplanError(f"the model is given twice ({positional} and --model {engine.model}): give one of them")
    return replace(engine, model=positional)


def engine_options(*names: str, may_fetch: bool = True,
                   positional_model: bool = False) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command the named engine settings as options, and call it with them parsed into
    `engine: EngineOptions` (aliases of the old spellings included, hidden). The command runs with
    the hub access its documentation states (`may_fetch`), which --offline withdraws. With
    `positional_model`, the model may also be the first word after the command (`vllm serve MODEL`)."""
    import typer
    from typer.models import ArgumentInfo

    flags = engine_flags(names)

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(command, eval_str=True)
        own = [p for p in signature.parameters.values() if p.name != "engine"]
        # the context and the arguments first, the engine settings, then the command's own options
        leading = [p for p in own if p.annotation is typer.Context or isinstance(p.default, ArgumentInfo)]
        trailing = [p for p in own if p not in leading]
        context_name = next((p.name for p in leading if p.annotation is typer.Context), None)
        if positional_model:
            leading.append(inspect.Parameter(
                "model_argument", inspect.Parameter.KEYWORD_ONLY, annotation=str | None,
                default=typer.Argument(None, metavar="MODEL", help=MODEL_ARGUMENT_HELP, show_default=False)))
        added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=flag.typer_option(),
                                   annotation=flag.annotation) for name, flag in flags.items()]
        parameters = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in (*leading, *added, *trailing)]

        @functools.wraps(command)
        def run(**values: Any) -> Any:
            engine = read_engine_options({name: values.pop(name) for name in flags})
            if positional_model:
                positional = values.pop("model_argument")
                context = values.get(context_name) if context_name else None
                if context is not None:
                    positional, context.args = split_model_word(positional, context.args)
                engine = fold_model_argument(engine, positional)
            with hub_access(engine_access(engine, may_fetch)):
                return command(engine=engine, **values)

        run.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in parameters}
        return run

    return decorate
