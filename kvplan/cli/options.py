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
import sys
from collections.abc import Callable
from dataclasses import dataclass, field, fields, replace
from typing import TYPE_CHECKING, Any, TypeVar, get_args, get_type_hints

from kvplan.errors import KvplanError
from kvplan.hub import HubAccess, hub_access
from kvplan.schema import ByteSize, Kind, Text
from kvplan.semantics.engine.args import (
    FETCHES,
    MEMORY,
    MODEL,
    PLANS,
    POOL_BLOCKS,
    PRICES,
    RUNS,
    SCHEDULES,
    SEARCHES,
    SIZES,
    EngineArgs,
    Setting,
    check_value,
    in_order,
    named,
    read_bytes,
)
from kvplan.semantics.engine.args import setting as engine_setting
from kvplan.semantics.engine.args import settings as engine_settings
from kvplan.semantics.engine.trace_format import SCHEDULING_MODE, VLLM_VERSION
from kvplan.semantics.releases import NEWEST_RELEASE, RELEASES, Release, Scheduling, release_named
from kvplan.sources.installed import default_release
from kvplan.usecases.plan_settings import GPU
from kvplan.usecases.step_time_methods import STEP_TIME_METHODS

if TYPE_CHECKING:
    from kvplan.usecases.plan import PlanRequest

JSON_FLAG = "--json"       # every command's (`cli.root.json_option`; plan's fast path reads it too)
STEP_TIME = Text(choices=STEP_TIME_METHODS, description="how a step's time is estimated")


@dataclass(frozen=True)
class EngineOptions:
    """The engine settings of one command line: vLLM's engine arguments (`EngineArgs`, declared once in
    `kvplan.semantics.engine.args`) and kvplan's own; None means "not given" (the workload's, the
    trace's or vLLM's default applies)."""

    args: EngineArgs = field(default_factory=EngineArgs)
    gpu: str | None = None
    gpu_memory: int | None = None                 # bytes
    num_gpu_blocks: int | None = None
    offline: bool = False                         # never ask the Hugging Face hub
    vllm_version: str | None = None
    scheduling: Scheduling | None = None
    step_time: str | None = None                  # how steps are priced: auto, kernels or roofline
    prompt_len: tuple[int, ...] | None = None     # --prompt-len: lengths to give the concurrency at

    @property
    def model(self) -> str | None:
        return self.args.model

    @property
    def revision(self) -> str | None:
        return self.args.revision

    @property
    def trust_remote_code(self) -> bool:
        return bool(self.args.trust_remote_code)

    def value(self, name: str) -> Any:
        """One setting by its name: an engine argument's (vLLM's name) or kvplan's own."""
        return getattr(self.args if name in _ARG_TYPES else self, name)

    def release(self) -> Release | None:
        """The release --vllm-version names; None: the file's, else the default."""
        return None if self.vllm_version is None else release_named(self.vllm_version)

    def release_or_default(self) -> Release:
        """The release --vllm-version names, else the default (`sources.installed.default_release`)."""
        return self.release() or default_release()

    def plan_request(self, command: str = "plan") -> PlanRequest:
        """The request `plan` and `profile` size the cache for: vLLM's defaults where unset; no model
        is bad input (exit 2) with the command's usage, never a model chosen for the user."""
        from kvplan.usecases.plan import TYPICAL_PROMPT_LENS, PlanRequest

        model = self.model
        if model is None:
            raise KvplanError(f"no model given; usage: kvplan {command} MODEL [OPTIONS], as `vllm serve MODEL` "
                              "(or --model MODEL): a hub id, a model directory or a config.json")
        return PlanRequest(args=self.args, gpu=self.gpu, gpu_memory_bytes=self.gpu_memory,
                           release=self.release_or_default(),
                           prompt_lens=TYPICAL_PROMPT_LENS if self.prompt_len is None else self.prompt_len)

    def pick(self, settings: type[S]) -> S:
        """The options a use case's settings dataclass names, under the same names (an engine argument
        under its file key: `kv_cache_memory` for vLLM's kv_cache_memory_bytes)."""
        by_key = {setting.key or name: getattr(self.args, name) for name, setting in engine_settings()}
        by_key["trust_remote_code"] = self.trust_remote_code      # a switch: off unless given
        return settings(**{field.name: by_key[field.name] if field.name in by_key else getattr(self, field.name)
                           for field in fields(settings)})  # type: ignore[arg-type]


S = TypeVar("S")


# --- the options, as typer declares them -------------------------------------------------------

def _same(value: Any) -> Any:
    return value


@dataclass(frozen=True)
class Flag:
    """One option as declared to typer (`typer.Option(default, *decls, ...)`), kept as plain data so
    that `kvplan plan` can read its flags without importing typer (`kvplan.cli.plan_args`)."""

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
    return lambda value: check_value(kind, value, flag)


def parse_optional_bytes(text: str | None, flag: str, kind: ByteSize = MEMORY) -> int | None:
    """A size flag: one number and one unit (`24GiB`, `24G` as vLLM reads it), within the kind's range."""
    return None if text is None else read_bytes(text, flag, kind)


def on_off(value: str | None, flag: str = "--prefix-caching") -> bool | None:
    if value is None:
        return None
    if value.lower() in ("on", "true", "1", "yes"):
        return True
    if value.lower() in ("off", "false", "0", "no"):
        return False
    raise KvplanError(f"{flag} takes on or off, got {value!r}")


# kvplan's own settings (what vLLM has no engine argument for); vLLM's are made from `EngineArgs`
_OWN: dict[str, Flag] = {
    "gpu": _flag(str | None, _declared(
        None, "--gpu", help="GPU from `kvplan gpus`: its memory, batch defaults and MLA block size, and the "
        "step-time estimate of simulate."), checked(GPU, "--gpu")),
    "gpu_memory": _flag(str | None, _declared(
        None, "--gpu-memory", help="Device memory total instead of --gpu, e.g. 80GiB (units: docs/inputs.md)."),
        lambda text: parse_optional_bytes(text, "--gpu-memory")),
    "num_gpu_blocks": _flag(int | None, _declared(
        None, "--num-gpu-blocks", help="Pool size, null block included (replaces the workload's or trace's)."),
        checked(POOL_BLOCKS, "--num-gpu-blocks")),
    "offline": _flag(bool, _declared(
        False, "--offline", help="Never use the network (as HF_HUB_OFFLINE=1): a model must be local, bundled or "
        "cached.")),
    "vllm_version": _flag(str | None, _declared(
        None, "--vllm-version", metavar="|".join(RELEASES),
        help="The vLLM release whose rules to follow. Default: the input file's vllm_version, else the "
        f"installed vllm's version when kvplan reproduces it, else {NEWEST_RELEASE.version} "
        "(`kvplan version` says which)."),
        checked(VLLM_VERSION, "--vllm-version")),
    "scheduling": _flag(str | None, _declared(
        None, "--scheduling", metavar="|".join(get_args(Scheduling)),
        help="The engine loop: async, what `vllm serve` does (the default), or sync, as with vLLM's "
        "--no-async-scheduling."), checked(SCHEDULING_MODE, "--scheduling")),
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
_ARG_TYPES = get_type_hints(EngineArgs)


def _arg_flag(name: str, setting: Setting, decls: tuple[str, ...], hidden: bool = False) -> Flag:
    """The typer option of one engine argument, as `EngineArgs` declares it."""
    return Flag(annotation=setting.annotation or _ARG_TYPES[name], default=setting.flag_default, decls=decls,
                help=None if hidden else setting.help, hidden=hidden, metavar=setting.metavar,
                read=lambda value: setting.read(value, decls[0].split("/")[0]))  # messages name the flag given


# every engine argument under its field name, then kvplan's own settings
_OPTIONS: dict[str, Flag] = {
    **{name: _arg_flag(name, setting, setting.flags) for name, setting in engine_settings()},
    **_OWN,
}
# the spellings kvplan used before it followed vLLM's (`--tp`, `--chunked-prefill`, `--prefix-caching on|off`):
# still read, not shown, and each use says the spelling to give instead
_ALIASES: dict[str, tuple[str, Flag]] = {
    **{f"{name}_alias": (name, _arg_flag(name, setting, setting.hidden_flags, hidden=True))
       for name, setting in engine_settings() if setting.hidden_flags},
    "prefix_caching_alias": ("enable_prefix_caching", _flag(str | None, _declared(
        None, "--prefix-caching", metavar="on|off", hidden=True), on_off)),
}
# the prefixes of vLLM's flags that vLLM reads too (`--kv-cache-memory`): read, not shown, no deprecation
_PREFIXES: dict[str, tuple[str, Flag]] = {
    f"{name}_prefix": (name, _arg_flag(name, setting, setting.prefix_flags, hidden=True))
    for name, setting in engine_settings() if setting.prefix_flags
}

# The order each command's --help has always shown its flags in (plan's and simulate's orders cross, so
# no one order of `EngineArgs` gives both). Only the order: which engine arguments a command takes is
# their roles' (`named`), and a setting missing here is shown after these, in field order.
_PLAN_HELP = (
    "model", "kv_cache_memory_bytes", "gpu", "gpu_memory", "gpu_memory_utilization", "block_size", "max_model_len",
    "max_num_batched_tokens", "max_num_seqs", "kv_cache_dtype", "dtype", "tensor_parallel_size",
    "pipeline_parallel_size", "num_gpu_blocks_override", "enable_prefix_caching", "enable_chunked_prefill",
    "trust_remote_code", "offline", "revision", "vllm_version", "enable_extensible_kv_cache", "enforce_eager",
    "quantization", "mamba_ssm_cache_dtype", "prompt_len",
)
_SIMULATE_HELP = (
    "num_gpu_blocks", "block_size", "enable_prefix_caching", "max_num_batched_tokens", "max_num_seqs",
    "max_model_len", "enable_chunked_prefill", "vllm_version", "scheduling", "async_scheduling", "gpu",
    "gpu_memory_utilization", "gpu_memory", "kv_cache_memory_bytes", "kv_cache_dtype", "dtype",
    "tensor_parallel_size", "pipeline_parallel_size", "trust_remote_code", "offline", "revision", "enforce_eager",
    "step_time",
)


def command_flags(engine: tuple[str, ...], own: tuple[str, ...], shown: tuple[str, ...]) -> tuple[str, ...]:
    """A command's settings: the engine arguments of its roles and kvplan's own, in the order `shown`."""
    return in_order((*engine, *own), shown)


# fit: the sizing engine arguments it searches no list of (its comma lists, such as --tensor-parallel-size 1,2,
# are `SEARCHES`'s), one value each, which every configuration takes; its flags add what fetches the model
FIT_FIXED = tuple(name for name in named(SIZES) if name not in named(SEARCHES))
FITTING = command_flags((*FIT_FIXED, *named(FETCHES)), ("vllm_version", "offline", "step_time"), _SIMULATE_HELP)
# plan and profile: every setting the planner reads
PLANNING = command_flags(named(PLANS), ("gpu", "gpu_memory", "offline", "vllm_version", "prompt_len"), _PLAN_HELP)
# replay: the scheduler's settings a trace carries, and the engine loop
SCHEDULING = command_flags(named(SCHEDULES, RUNS), ("num_gpu_blocks", "vllm_version", "scheduling"), _SIMULATE_HELP)
# simulate: replay's, what sizes a pool planned from the workload's model, and what prices the steps
SIMULATING = command_flags(
    (*named(SCHEDULES, RUNS), *named(SIZES, FETCHES, PRICES)),
    ("num_gpu_blocks", "vllm_version", "scheduling", "gpu", "gpu_memory", "offline", "step_time"), _SIMULATE_HELP)
assert {field.name for field in fields(EngineOptions) if field.name != "args"} == set(_OWN)


def engine_flags(names: tuple[str, ...]) -> dict[str, Flag]:
    """The flags of the named engine settings, then the hidden old spellings of any of them."""
    unknown = [name for name in names if name not in _OPTIONS]
    if unknown:
        raise ValueError(f"no engine option {unknown}")
    flags = {name: _OPTIONS[name] for name in names}
    flags.update({alias: flag for alias, (target, flag) in (*_ALIASES.items(), *_PREFIXES.items())
                  if target in names})
    return flags


def flag_option(name: str, help: str) -> Any:
    """A setting's typer option as every command declares it (spelling, default), with what it does for
    one command (`check --revision`: the target's model)."""
    return replace(engine_flags((name,))[name], help=help).typer_option()


def deprecated_spelling(old: str, target: str) -> None:
    """One line on stderr: the old spelling still works, for one release, and vLLM's is the one to give."""
    print(f"kvplan: {old} is deprecated: give {engine_setting(target).flags[0]} (vLLM's spelling)", file=sys.stderr)


def read_engine_options(values: dict[str, Any]) -> EngineOptions:
    """The settings from the raw values of `engine_flags(...)`, each read (sizes, on/off, limits)
    and each old spelling folded into its setting."""
    settings = {name: _OPTIONS[name].read(value) for name, value in values.items() if name in _OPTIONS}
    for alias, (target, flag) in (*_ALIASES.items(), *_PREFIXES.items()):
        if alias not in values:
            continue
        given = flag.read(values[alias])
        if given is None:
            continue
        if alias in _ALIASES:
            deprecated_spelling(flag.decls[0], target)
        if settings[target] is not None and given != settings[target]:
            raise KvplanError(f"{engine_setting(target).flag} and its old spelling disagree: give one of them")
        if settings[target] is None:
            settings[target] = given
    args = {name: settings.pop(name) for name in list(settings) if name in _ARG_TYPES}
    if args.get("async_scheduling") is not None:      # vLLM's switch names kvplan's --scheduling mode
        mode = "async" if args["async_scheduling"] else "sync"
        if settings.get("scheduling") not in (None, mode):
            raise KvplanError(f"--scheduling {settings['scheduling']} and --{'' if mode == 'async' else 'no-'}"
                              "async-scheduling disagree: give one of them")
        settings["scheduling"] = mode
    return EngineOptions(args=EngineArgs(**args), **settings)


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
    return replace(engine, args=replace(engine.args, model=positional))


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


# --- fit's comma lists ---------------------------------------------------------------------------

def _list_flag(setting: Setting, decls: tuple[str, ...], hidden: bool = False) -> Flag:
    """The option of an engine argument fit takes as a comma list: its text, as its `Setting` declares the list."""
    return Flag(annotation=str | None, default=None if hidden else setting.list_default, decls=decls,
                help=None if hidden else setting.list_help, hidden=hidden)


def list_flags(names: tuple[str, ...]) -> dict[str, Flag]:
    """The comma-list options of the named engine arguments (`SEARCHES`), each under vLLM's spellings, then
    its old spellings (hidden, with a deprecation line) and the prefixes vLLM reads too (hidden)."""
    flags: dict[str, Flag] = {}
    for name in names:
        setting = engine_setting(name)
        flags[f"{name}_list"] = _list_flag(setting, setting.flags)
        if setting.hidden_flags:
            flags[f"{name}_list_alias"] = _list_flag(setting, setting.hidden_flags, hidden=True)
        if setting.prefix_flags:
            flags[f"{name}_list_prefix"] = _list_flag(setting, setting.prefix_flags, hidden=True)
    return flags


@dataclass(frozen=True)
class ListOptions:
    """fit's comma lists as the command line gives them (the options of `list_flags`), not read yet: fit
    calls `texts` where its order of checks reads them, so that its earlier refusals still come before
    any deprecation line."""

    names: tuple[str, ...]
    values: dict[str, str | None]

    def texts(self) -> dict[str, tuple[str | None, str]]:
        """Each list's text (None: not given) and the flag its messages name: an old spelling is folded
        in with its deprecation line, a prefix vLLM reads too (`--kv-cache-memory`) with none, and
        named in the messages as given."""
        texts = {}
        for name in self.names:
            setting = engine_setting(name)
            text, flag = self.values[f"{name}_list"], setting.flag
            old = self.values.get(f"{name}_list_alias")
            if old is not None:
                deprecated_spelling(setting.hidden_flags[0], name)
                # the list default is what typer hands over when vLLM's spelling is absent
                if text not in (None, setting.list_default) and text != old:
                    raise KvplanError(f"{setting.flag} and its old spelling disagree: give one of them")
                text = old
            prefix = self.values.get(f"{name}_list_prefix")
            if prefix is not None:
                if text not in (None, setting.list_default, prefix):
                    raise KvplanError(f"{setting.flag} and {setting.prefix_flags[0]} disagree: give one of them")
                text, flag = prefix, setting.prefix_flags[0]
            texts[name] = (text, flag)
        return texts


def list_options(*names: str, after: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Give a command comma lists of the named engine arguments as options (`list_flags`), shown after
    its option `after`, and call it with them as `lists: ListOptions`."""
    flags = list_flags(names)

    def decorate(command: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(command, eval_str=True)
        own = [p for p in signature.parameters.values() if p.name != "lists"]
        at = [p.name for p in own].index(after) + 1
        added = [inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=flag.typer_option(),
                                   annotation=flag.annotation) for name, flag in flags.items()]
        parameters = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) for p in (*own[:at], *added, *own[at:])]

        @functools.wraps(command)
        def run(**values: Any) -> Any:
            lists = ListOptions(names, {name: values.pop(name) for name in flags})
            return command(lists=lists, **values)

        run.__signature__ = signature.replace(parameters=parameters)  # type: ignore[attr-defined]
        run.__annotations__ = {p.name: p.annotation for p in parameters}
        return run

    return decorate
