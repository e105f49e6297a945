"""vLLM's engine arguments that kvplan reproduces, declared once: `EngineArgs`, with vLLM's field
names (`EngineArgs` in vLLM's engine/arg_utils.py; docs/vllm/kv-semantics.md §1 reads them).

Each field carries what every reader of it needs: its range (a `kvplan.schema` kind, which the
command line, traces, workloads, check specs and sweep grids check it against), its flag as vLLM
spells it (`--tensor-parallel-size`, `-tp`), the spellings kvplan used before (hidden aliases),
its help text, and its default per release, read from the release table
(`kvplan.semantics.releases`). None means "not set": a layer of settings leaves the value of the
layer under it, and `over` stacks layers (file < pool source < command line).

A new engine setting is one field here plus the code that uses it: its roles (`PLANS`, `SIZES`,
`SCHEDULES`, ...) say which readers take it, and the command lines (`kvplan.cli.options`), fit's lists
and the readers of traces, workloads, check specs and profiles are made from this list by role (`named`)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, fields, replace
from typing import Any

from kvplan import limits
from kvplan.errors import KvplanError
from kvplan.parsing import FieldError
from kvplan.schema import Boolean, ByteSize, Checked, Either, Field, Integer, Kind, Number, Text
from kvplan.semantics.config.cache import ALLOWED_BLOCK_SIZES, check_kv_cache_dtype, utilization_problem
from kvplan.semantics.config.model import check_model_dtype
from kvplan.semantics.releases import RELEASES, Release
from kvplan.units import parse_count


def _block_size_problem(value: int) -> str | None:
    if value in ALLOWED_BLOCK_SIZES:
        return None
    return f"{value} is not a block size vLLM accepts: expected one of {', '.join(map(str, ALLOWED_BLOCK_SIZES))}"


# the kinds of the engine arguments, here with them: the trace format (`trace_format`) takes the scheduler's
# from these declarations, and the command line's --num-gpu-blocks is a trace's num_gpu_blocks
POOL_BLOCKS = Integer(2, limits.MAX_BLOCKS, "blocks in the pool, the null block (block 0) included")
BLOCK_SIZE = Checked(Integer(1, max(ALLOWED_BLOCK_SIZES)), _block_size_problem,
                     f"tokens per block: one of {', '.join(map(str, ALLOWED_BLOCK_SIZES))} (vLLM's choices)",
                     {"enum": list(ALLOWED_BLOCK_SIZES)}, says=f"one of {', '.join(map(str, ALLOWED_BLOCK_SIZES))}")
BATCHED_TOKENS = Integer(1, limits.MAX_TOKENS, "token budget of one scheduler step")
NUM_SEQS = Integer(1, limits.MAX_SEQS, "most requests running at once")
MODEL_LEN = Integer(2, limits.MAX_TOKENS, "longest prompt + output of one request, in tokens")
MODEL = Text(max_length=limits.MAX_PATH, controls=False, description="hub id, model directory or config.json path")
MEMORY = ByteSize(1, limits.MAX_BYTES)
UTILIZATION = Number(0, 1, exclusive_minimum=True, description="vLLM's gpu_memory_utilization in (0, 1]")
PARALLEL = Integer(1, limits.MAX_PARALLEL)
DTYPE = Text(max_length=64, controls=False, description="auto, bfloat16, float16 or float32 (vLLM's --dtype)")
KV_CACHE_DTYPE = Text(max_length=64, controls=False,
                      description="auto, fp8, fp8_e4m3 or fp8_e5m2 (vLLM's --kv-cache-dtype)")
MAX_MODEL_LEN = Either((MODEL_LEN, Text(choices=("auto",)), Integer(-1, -1)),
                       "longest prompt + output in tokens; \"auto\" or -1 fits the largest the memory holds")
# vLLM's MambaDType (CacheConfig.mamba_ssm_cache_dtype, docs/vllm/kv-semantics.md: State dtypes)
MAMBA_DTYPE = Text(choices=("auto", "float16", "float32"), description="auto, float16 or float32 (vLLM's "
                   "--mamba-ssm-cache-dtype)")
REVISION = Text(max_length=256, controls=False, description="a hub revision: branch, tag or commit")
QUANTIZATION = Text(max_length=64, controls=False, description="a quantization method, as vLLM's --quantization")


def check_value(kind: Kind, value: Any, flag: str) -> Any:
    """`value` when it is of `kind` (None: not given), else bad input in one line."""
    if value is not None:
        try:
            kind.check(value, flag)
        except FieldError as error:
            raise KvplanError(str(error)) from None
    return value


def read_count(text: str, flag: str, kind: Kind) -> int:
    """A count as vLLM's human_readable_int reads it (`8192`, `8K`), within the kind's range."""
    return check_value(kind, parse_count(text, flag), flag)


def read_bytes(text: str, flag: str, kind: ByteSize = MEMORY) -> int:
    """A size: one number and one unit (`24GiB`, `24G` as vLLM reads it), within the kind's range."""
    try:
        return kind.read(text, flag)
    except FieldError as error:
        raise KvplanError(str(error)) from None


def read_max_model_len(text: str, flag: str = "--max-model-len") -> int:
    """-1 = auto-fit, else a length as vLLM's human_readable_int_or_auto reads it."""
    if text.strip().lower() in ("auto", "-1"):
        return -1
    return read_count(text, flag, MODEL_LEN)


@dataclass(frozen=True)
class Setting:
    """What one engine argument is, for every reader of it."""

    flags: tuple[str, ...]                 # vLLM's spellings, the long one first (`--tensor-parallel-size`, `-tp`)
    help: str
    kind: Kind                             # the range of the value (not of the text a flag is given as)
    annotation: Any = None                 # the type typer parses the flag as (None: the value's)
    # the value from a flag's text (None: typer's own value is the value); the flag's name for messages
    parse: Callable[[str, str], Any] | None = None
    hidden_flags: tuple[str, ...] = ()     # kvplan's earlier spellings: still read (with a deprecation line), not shown
    # spellings vLLM takes too, read but not shown: vLLM's argparse reads an unambiguous prefix of a flag
    # (`--kv-cache-memory`, which vLLM's own log suggests, docs/vllm/kv-semantics.md)
    prefix_flags: tuple[str, ...] = ()
    metavar: str | None = None
    default: Callable[[Release], Any] = lambda release: None  # the release's default; None: derived later
    flag_default: Any = None               # what typer hands over when the flag is absent
    key: str | None = None                 # its name in kvplan's files and bundles where not vLLM's
    description: str | None = None         # what a file's key says in the schemas (None: the kind's)
    # fit's comma list of values to try (`SEARCHES`): its help, and its text where it is left out (None: vLLM's
    # default, or what fit derives)
    list_help: str | None = None
    list_default: str | None = None
    roles: frozenset[str] = frozenset()    # which readers take it (`ROLES`; `named` lists a role's settings)
    # what a file's value becomes once checked (a whole number 1 as the utilization 1.0, as a flag gives it)
    convert: Callable[[Any], Any] | None = None
    # vLLM's own rule on a read value beyond its range (raises KvplanError): a sweep checks every value of
    # its axis with it before any cell runs, as `kvplan plan` checks the flag before reading a model
    rule: Callable[[Any], None] | None = None
    axis: str | None = None                # what a sweep grid's axis of it holds ("tensor-parallel sizes"; SWEEPS)
    # The range where a file fixes the value for a run (a trace's config, a workload's engine, a sweep grid's
    # axis values), where narrower than `kind`: max_model_len there is a length, never "auto" or -1, which ask
    # a plan to fit it (a check spec's [target] and a profile's settings, as the flag, take `kind`).
    fixed_kind: Kind | None = None
    # What a trace's config and a workload's engine say of it, where they say more than `description` (the
    # default a replay takes); a check spec's [target] and a profile's settings say `description` only.
    fixed_description: str | None = None

    @property
    def fixed_range(self) -> Kind:
        """The range where a file fixes the value for a run: `fixed_kind` where narrower, else `kind`."""
        return self.fixed_kind or self.kind

    @property
    def flag(self) -> str:
        """The spelling messages name: the first long one, without a `/--no-...` half."""
        return self.flags[0].split("/")[0]

    def vetted(self, value: Any) -> Any:
        """The value, where vLLM's own rule on it holds (`rule`; None: no rule, or not given)."""
        if value is not None and self.rule is not None:
            self.rule(value)
        return value

    def read(self, value: Any, flag: str | None = None) -> Any:
        """The setting's value from what a flag or a file gave (None: not given), checked."""
        if value is None:
            return None
        shown = flag or self.flag
        if self.parse is not None and isinstance(value, str):
            value = self.parse(value, shown)
        checked = self.kind.normal(check_value(self.kind, value, shown))
        return checked if self.convert is None else self.convert(checked)


# What decides which readers take an engine argument: a field names its roles (`Setting.roles`), and each
# reader's list of settings is `named(role, ...)`, in the order of `EngineArgs`. A new setting is shown
# by every command and read by every file that takes its roles, with no list to extend.
PLANS = "plans"            # `plan` and `profile` take its flag: the planner reads it
FETCHES = "fetches"        # where the model's config comes from: every command planning from a model takes it
SIZES = "sizes"            # sizes a pool planned from a model, wherever it is planned (simulate's engine.model,
#                            fit, a check target): `simulate` takes its flag
SCHEDULES = "schedules"    # the scheduler's: a trace's config and a workload's engine carry it, `replay` and
#                            `simulate` take its flag, a pool planned from a model takes it too
RESOLVES = "resolves"      # a plan resolves it (its summary says the value), so a saved profile fixes it
RUNS = "runs"              # how the engine loop runs the steps: `replay` and `simulate` take its flag
PRICES = "prices"          # it prices the steps only: `simulate` takes its flag, not the pool it plans
TARGETS = "targets"        # a check spec's [target] and a profile's settings take it beside the SIZES and
#                            SCHEDULES ones
WORKLOADS = "workloads"    # a workload's engine takes it beside engine.model, to plan that pool
EXPLAINS = "explains"      # `explain` takes its flag: a setting a start-up log may leave unsaid, which the user
#                            gives to fill it in (or to replace what the log says)
SEARCHES = "searches"      # fit takes it as a comma list of values to try (`Setting.list_help`), each read as
#                            its flag is, and searches every combination
SWEEPS = "sweeps"          # a sweep grid takes it as an axis (under its file key; `Setting.axis` says what
#                            the axis holds)
ROLES = (PLANS, FETCHES, SIZES, SCHEDULES, RESOLVES, RUNS, PRICES, TARGETS, WORKLOADS, EXPLAINS, SEARCHES,
         SWEEPS)


def _setting(*roles: str, **declared: Any) -> Any:
    assert set(roles) <= set(ROLES), roles
    return field(default=None, metadata={"setting": Setting(roles=frozenset(roles), **declared)})


def _check_utilization(value: float) -> None:
    problem = utilization_problem(value)
    if problem is not None:
        raise KvplanError(problem)


def _utilization_defaults() -> str:
    """"0.9 in 0.17.1, 0.92 in 0.33.0; 0.34.0: 1.0 with the extensible KV cache, 0.92 without", from the table."""
    plain = [f"{release.gpu_memory_utilization} in {release.version}" for release in RELEASES.values()
             if release.measured_utilization is None]
    measured = [f"{release.version}: {release.measured_utilization} with the extensible KV cache, "
                f"{release.gpu_memory_utilization} without" for release in RELEASES.values()
                if release.measured_utilization is not None]
    return "; ".join(filter(None, (", ".join(plain), *measured)))


def _utilization_list_help() -> str:
    """fit's list: the default utilization of every release, read from the release table (stays right as
    releases change)."""
    defaults = ", ".join(
        f"{release.gpu_memory_utilization:g} for {release.version}" if release.measured_utilization is None else
        f"{release.measured_utilization:g} on the measured sizing path ({release.gpu_memory_utilization:g} otherwise) "
        f"for {release.version}" for release in RELEASES.values())
    return f"Utilizations to try (default: the release's, {defaults})."


def _block_size_defaults() -> str:
    """"16, 64 in 0.34.0", from the table."""
    first = next(iter(RELEASES.values())).default_block_size
    others = [f"{release.default_block_size} in {release.version}" for release in RELEASES.values()
              if release.default_block_size != first]
    return ", ".join((str(first), *others))


def _prefix_caching_help() -> str:
    off = [release.version for release in RELEASES.values() if not release.prefix_caching_for_hybrids]
    return "vLLM's prefix caching. Default: on" + (f", except for Mamba hybrids in vLLM {' and '.join(off)}"
                                                   if off else "") + "."


@dataclass(frozen=True)
class EngineArgs:
    """The engine arguments of one layer of settings (a file, a pool source, the command line);
    None: not set."""

    model: str | None = _setting(
        PLANS, EXPLAINS,
        flags=("--model", "-m"), kind=MODEL,
        help="The model, also given as the first word after the command (as `vllm serve MODEL`): a hub id "
        "(resolved from the bundled catalog, then the local HF cache), a local directory holding config.json, or "
        "a path to a config.json. A hub id that is neither is fetched from the Hugging Face hub (HF_TOKEN or the "
        "saved login; never with --offline).")
    revision: str | None = _setting(
        PLANS, EXPLAINS, FETCHES,
        flags=("--revision",), kind=REVISION,
        help="Hub revision (branch, tag or commit) of --model when it is fetched or cached.")
    trust_remote_code: bool | None = _setting(
        PLANS, EXPLAINS, FETCHES,
        flags=("--trust-remote-code",), kind=Boolean(), annotation=bool, flag_default=False,
        help="Allow transformers to run the model's own code (only this flag does: never a file kvplan reads).",
        default=lambda release: False)
    dtype: str | None = _setting(
        PLANS, EXPLAINS, SIZES, SWEEPS, rule=check_model_dtype, axis="model dtypes",
        flags=("--dtype",), kind=DTYPE, default=lambda release: "auto",
        help="auto (the default), bfloat16, float16 or float32 (as vLLM's --dtype).")
    quantization: str | None = _setting(
        PLANS,
        flags=("--quantization", "-q"), kind=QUANTIZATION, metavar="METHOD",
        help="vLLM's --quantization: the checkpoint's own method (the default), or fp8 on an unquantized "
        "checkpoint (vLLM quantizes its linear layers at load: fp8 weights).")
    kv_cache_dtype: str | None = _setting(
        PLANS, EXPLAINS, SIZES, SEARCHES, SWEEPS, rule=check_kv_cache_dtype, axis="KV-cache dtypes",
        flags=("--kv-cache-dtype",), kind=KV_CACHE_DTYPE, default=lambda release: "auto",
        help="auto (the default), fp8, fp8_e4m3 or fp8_e5m2.",
        list_help="KV-cache dtypes, e.g. auto,fp8.", list_default="auto")
    tensor_parallel_size: int | None = _setting(
        PLANS, EXPLAINS, SIZES, SEARCHES, SWEEPS, axis="tensor-parallel sizes",
        flags=("--tensor-parallel-size", "-tp"), hidden_flags=("--tp",), kind=PARALLEL,
        default=lambda release: 1, help="Tensor-parallel size (default 1); every figure is per GPU.",
        list_help="Tensor-parallel sizes, e.g. 1,2,4.", list_default="1")
    pipeline_parallel_size: int | None = _setting(
        PLANS, EXPLAINS, SIZES, SEARCHES, SWEEPS, axis="pipeline-parallel sizes",
        flags=("--pipeline-parallel-size", "-pp"), hidden_flags=("--pp",), kind=PARALLEL,
        default=lambda release: 1, help="Pipeline-parallel size (default 1).",
        list_help="Pipeline-parallel sizes.", list_default="1")
    gpu_memory_utilization: float | None = _setting(
        PLANS, EXPLAINS, SIZES, WORKLOADS, SEARCHES, SWEEPS,
        rule=_check_utilization, axis="gpu_memory_utilization values",
        flags=("--gpu-memory-utilization",), kind=UTILIZATION, annotation=float | None, convert=float,
        default=lambda release: release.gpu_memory_utilization,
        help=f"vLLM's gpu_memory_utilization in (0, 1]; default the release's ({_utilization_defaults()}).",
        list_help=_utilization_list_help())
    kv_cache_memory_bytes: int | None = _setting(
        PLANS, SIZES, WORKLOADS, SEARCHES, SWEEPS, axis="KV-cache bytes per GPU (instead of utilizations)",
        flags=("--kv-cache-memory-bytes",), prefix_flags=("--kv-cache-memory",), kind=MEMORY, key="kv_cache_memory",
        description="KV-cache bytes per GPU, as vLLM's --kv-cache-memory-bytes",
        annotation=str | None, parse=lambda text, flag: read_bytes(text, flag),
        help="KV-cache bytes per GPU (also read as --kv-cache-memory, as vLLM reads it): 25938100224, 24.16GiB, "
        "900MiB, or vLLM's 24G (GiB) and 24g (GB).",
        list_help="KV-cache bytes per GPU to try instead of utilizations, e.g. 20GiB,40GiB.")
    num_gpu_blocks_override: int | None = _setting(
        PLANS, TARGETS,
        flags=("--num-gpu-blocks-override",), kind=POOL_BLOCKS,
        description="replace the computed block count (vLLM's flag)",
        help="Replace the computed block count (vLLM's flag).")
    block_size: int | None = _setting(
        PLANS, EXPLAINS, SCHEDULES, RESOLVES, SWEEPS, axis="block sizes",
        flags=("--block-size",), kind=BLOCK_SIZE, default=lambda release: release.default_block_size,
        help=f"Tokens per block (default the release's: {_block_size_defaults()}; MLA backends and hybrids "
        "change it).")
    max_model_len: int | None = _setting(
        PLANS, EXPLAINS, SCHEDULES, RESOLVES, SEARCHES, SWEEPS, axis="max_model_len values", fixed_kind=MODEL_LEN,
        flags=("--max-model-len",), kind=MAX_MODEL_LEN, annotation=str | None,
        parse=read_max_model_len,
        help="Longest prompt + output. Default: the model's limit as vLLM derives it; `auto` or -1 fits the "
        "largest.",
        list_help="max_model_len candidates; the longest that fits is kept (default: the model's limit, else the "
        "shortest power of two that holds the traffic).")
    max_num_batched_tokens: int | None = _setting(
        PLANS, EXPLAINS, SCHEDULES, RESOLVES, SEARCHES, SWEEPS, axis="max_num_batched_tokens values",
        flags=("--max-num-batched-tokens",), kind=BATCHED_TOKENS, annotation=str | None,
        parse=lambda text, flag: read_count(text, flag, BATCHED_TOKENS),
        help="Token budget per step, e.g. 8192 or 8K (as vLLM reads it). Default: what `vllm serve` picks for the "
        "GPU (2048 for one outside the catalog, given by --gpu-memory alone).",
        list_help="max_num_batched_tokens values (default vLLM's).")
    max_num_seqs: int | None = _setting(
        PLANS, EXPLAINS, SCHEDULES, RESOLVES, SEARCHES, SWEEPS, axis="max_num_seqs values",
        flags=("--max-num-seqs",), kind=NUM_SEQS,
        help="Most running requests. Default: what `vllm serve` picks for the GPU (256 for one outside the "
        "catalog).",
        list_help="max_num_seqs values (default vLLM's).")
    mamba_ssm_cache_dtype: str | None = _setting(
        PLANS, SIZES, WORKLOADS,
        flags=("--mamba-ssm-cache-dtype",), kind=MAMBA_DTYPE, default=lambda release: "auto", metavar="DTYPE",
        help="vLLM's --mamba-ssm-cache-dtype: the dtype of a Mamba layer's ssm state, auto (the default: the "
        "model's hook, else the conv state's dtype), float16 or float32 (twice the state of a 16-bit one).")
    enable_prefix_caching: bool | None = _setting(
        PLANS, EXPLAINS, SCHEDULES, RESOLVES, SWEEPS, axis="prefix caching on and/or off",
        flags=("--enable-prefix-caching/--no-enable-prefix-caching",), kind=Boolean(), help=_prefix_caching_help(),
        fixed_description="vLLM's prefix caching (default on)")
    enable_chunked_prefill: bool | None = _setting(
        PLANS, EXPLAINS, SCHEDULES, SWEEPS, axis="chunked prefill on and/or off",
        flags=("--enable-chunked-prefill/--no-enable-chunked-prefill",), kind=Boolean(),
        hidden_flags=("--chunked-prefill/--no-chunked-prefill",),
        default=lambda release: True, help="vLLM's chunked prefill (default on).",
        fixed_description="vLLM's chunked prefill (default on)")
    # the planner reads it, but no command shows its flag yet: no role
    disable_hybrid_kv_cache_manager: bool | None = _setting(
        flags=("--disable-hybrid-kv-cache-manager/--no-disable-hybrid-kv-cache-manager",), kind=Boolean(),
        help="vLLM's --disable-hybrid-kv-cache-manager: one KV cache group for every layer type. Default: vLLM "
        "decides (the hybrid manager, except for chunked local attention where the environment turns it off).")
    enable_extensible_kv_cache: bool | None = _setting(
        PLANS, EXPLAINS,
        flags=("--enable-extensible-kv-cache/--no-enable-extensible-kv-cache",), kind=Boolean(),
        help="vLLM 0.34.0's extensible KV cache: sized from the memory measured after warmup and CUDA-graph "
        "capture. Default: on unless --kv-cache-memory or --num-gpu-blocks-override is given; off: 0.33.0's "
        "estimate decides.")
    enforce_eager: bool | None = _setting(
        PLANS, PRICES,
        flags=("--enforce-eager/--no-enforce-eager",), kind=Boolean(), default=lambda release: False,
        help="vLLM's --enforce-eager: no CUDA graphs, so no graph pool is taken from the KV memory and every "
        "kernel is launched one by one (the step-time estimate).")

    async_scheduling: bool | None = _setting(
        RUNS,
        flags=("--async-scheduling/--no-async-scheduling",), kind=Boolean(),
        help="vLLM's async scheduling: the engine loop `vllm serve` runs (the default); --no-async-scheduling "
        "runs the sync loop (the same as --scheduling sync).")

    def over(self, under: EngineArgs) -> EngineArgs:
        """These settings where set, `under`'s elsewhere: `command_line.over(pool.over(file))`."""
        return replace(under, **{name: value for name, value in self.given().items()})

    def value(self, name: str, release: Release) -> Any:
        """The setting where set, else the release's default (None where vLLM derives it from the
        model and the GPU: the lengths, the batch limits)."""
        given = getattr(self, name)
        return setting(name).default(release) if given is None else given

    def given(self) -> dict[str, Any]:
        """The settings that are set, by vLLM's names."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    @classmethod
    def defaults(cls, release: Release) -> EngineArgs:
        """The release's defaults of the settings it fixes (the rest, None, are derived from the model
        and the GPU: max_model_len, the batch limits)."""
        return cls(**{name: setting.default(release) for name, setting in settings()})

    @classmethod
    def read(cls, values: dict[str, Any], flags: dict[str, str] | None = None) -> EngineArgs:
        """Settings from raw values by field name (a flag's text or a file's value), each read and
        checked; `flags` names a value's source in messages (default: its flag)."""
        known = dict(settings())
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ValueError(f"no engine argument {unknown}")
        return cls(**{name: known[name].read(value, (flags or {}).get(name)) for name, value in values.items()})


def file_fields(*names: str) -> dict[str, Field]:
    """The named engine arguments as a file takes them (a check spec's [target], a workload's engine,
    a profile's settings): under their file keys, with their kinds."""
    return {(setting(name).key or name): Field(setting(name).kind, description=setting(name).description or "")
            for name in names}


def fixed_fields(*names: str) -> dict[str, Field]:
    """The named engine arguments as a file that fixes them for a run takes them (a trace's config, a
    workload's engine): under their file keys, with their fixed kinds and descriptions (`Setting.fixed_kind`,
    `Setting.fixed_description`) where narrower or fuller than `file_fields`'."""
    record = {}
    for name in names:
        declared = setting(name)
        described = declared.fixed_description or declared.description or ""
        record[declared.key or name] = Field(declared.fixed_range, description=described)
    return record


def settings() -> Iterator[tuple[str, Setting]]:
    """Every engine argument with its declaration, in the order of `EngineArgs`."""
    for spec in fields(EngineArgs):
        yield spec.name, spec.metadata["setting"]


def named(*roles: str) -> tuple[str, ...]:
    """The engine arguments with any of these roles, in the order of `EngineArgs`."""
    unknown = set(roles) - set(ROLES)
    if unknown:
        raise ValueError(f"no role {sorted(unknown)}")
    return tuple(name for name, declared in settings() if declared.roles & set(roles))


def in_order(names: tuple[str, ...], shown: tuple[str, ...]) -> tuple[str, ...]:
    """`names` in the order `shown` has always given them (a command's --help, a schema's keys), then
    the others, in their own order: where an order is observable a derived list keeps it, and a new
    setting comes after the settings shown before it."""
    return (*(name for name in shown if name in names), *(name for name in names if name not in shown))


def setting(name: str) -> Setting:
    """The declaration of one engine argument."""
    for spec in fields(EngineArgs):
        if spec.name == name:
            return spec.metadata["setting"]
    raise KeyError(name)
