"""The grid file of `kvplan sweep` (TOML, `docs/sweep.md`), described once: the commands, every
axis with the range its values may take (the same kinds as `kvplan plan`'s flags and a workload's
engine), and the simulate options. `load_grid` checks a grid against `GRID` before reading it;
docs/schemas/input/sweep-grid.json is `GRID` published.

The engine-argument axes are `EngineArgs`' fields with the SWEEPS role (their kinds, their file keys,
`Setting.axis` their descriptions): a new one is a role and a description in args.py."""

from __future__ import annotations

from kvplan import limits
from kvplan.schema import Boolean, Field, Integer, Kind, ListOf, Record, Text
from kvplan.semantics.engine.args import MODEL, SWEEPS, in_order, named, setting
from kvplan.semantics.engine.trace_format import SCHEDULING_MODE, SCHEMA_KEY, VLLM_VERSION
from kvplan.usecases.plan_settings import GPU, STEP_MS

COMMANDS = ("plan", "profile", "simulate")
MAX_AXIS_VALUES = 10_000        # values of one axis; the cells, their product, are bounded by MAX_CELLS
# the engine axes a grid had before they were made from `EngineArgs`: their order is observable (in the
# schema, the order of the cells, the rows' columns), and a cell's id always holds them (grid.py)
HISTORICAL_ENGINE_AXES = (
    "tensor_parallel_size", "pipeline_parallel_size", "kv_cache_dtype", "dtype", "gpu_memory_utilization",
    "kv_cache_memory_bytes", "block_size", "max_model_len", "max_num_seqs", "max_num_batched_tokens",
    "enable_prefix_caching", "enable_chunked_prefill")
# the engine arguments a grid takes as axes (`EngineArgs`' SWEEPS role), a new one after those
ENGINE_AXES = in_order(named(SWEEPS), HISTORICAL_ENGINE_AXES)
PATH = Text(max_length=limits.MAX_PATH, controls=False, description="a workload file, relative to the grid file")


def _axis(kind: Kind, what: str, required: bool = False) -> Field:
    return Field(ListOf(kind, 1, MAX_AXIS_VALUES), required=required, description=what)


def axis_name(name: str) -> str:
    """The axis of an engine argument: its key in kvplan's files (kv_cache_memory), else vLLM's name."""
    return setting(name).key or name


def _engine_axis(name: str) -> Field:
    what = setting(name).axis
    assert what, f"{name} has the SWEEPS role but no axis description"
    return _axis(setting(name).fixed_range, what)      # max_model_len's values are lengths, never "auto"


AXES = Record({
    "models": _axis(MODEL, "the models to try: hub ids, model directories or config.json paths", required=True),
    "vllm_releases": _axis(VLLM_VERSION, "the vLLM releases whose rules to follow"),
    "gpus": _axis(GPU, "GPUs from `kvplan gpus`"),
    **{axis_name(name): _engine_axis(name) for name in ENGINE_AXES},
    "scheduling": _axis(SCHEDULING_MODE, "engine loops"),
    "workloads": _axis(PATH, "workload files, for the simulate command"),
}, "the axes: every combination of their values is a cell")

SIMULATE = Record({
    "find_max_rate": Field(Boolean("also search the highest arrival rate each cell sustains")),
    "seed": Field(Integer(0, limits.MAX_SEED, "random seed of the workloads")),
    "step_time_ms": Field(STEP_MS, description="every step takes this long (an estimate)"),
}, "options of the simulate command")

GRID = Record({
    **SCHEMA_KEY,
    "description": Field(Text(max_length=100_000, min_length=0)),
    "commands": Field(ListOf(Text(choices=COMMANDS), 1, len(COMMANDS)),
                      description="what each cell runs (default plan)"),
    "axes": Field(AXES, required=True),
    "simulate": Field(SIMULATE),
}, title="a kvplan sweep grid: commands, axes and the simulate options")
