"""The grid file of `kvplan sweep` (TOML, `docs/sweep.md`), described once: the commands, every
axis with the range its values may take (the same kinds as `kvplan plan`'s flags and a workload's
engine), and the simulate options. `load_grid` checks a grid against `GRID` before reading it;
docs/schemas/input/sweep-grid.json is `GRID` published."""

from __future__ import annotations

from kvplan import limits
from kvplan.schema import Boolean, Field, Integer, Kind, ListOf, Record, Text
from kvplan.semantics.engine.args import DTYPE, KV_CACHE_DTYPE, MEMORY, MODEL, PARALLEL, UTILIZATION
from kvplan.semantics.engine.trace_format import (
    BATCHED_TOKENS,
    BLOCK_SIZE,
    MODEL_LEN,
    NUM_SEQS,
    SCHEDULING_MODE,
    SCHEMA_KEY,
    VLLM_VERSION,
)
from kvplan.usecases.plan_settings import GPU, STEP_MS

COMMANDS = ("plan", "profile", "simulate")
MAX_AXIS_VALUES = 10_000        # values of one axis; the cells, their product, are bounded by MAX_CELLS
PATH = Text(max_length=limits.MAX_PATH, controls=False, description="a workload file, relative to the grid file")


def _axis(kind: Kind, what: str, required: bool = False) -> Field:
    return Field(ListOf(kind, 1, MAX_AXIS_VALUES), required=required, description=what)


AXES = Record({
    "models": _axis(MODEL, "the models to try: hub ids, model directories or config.json paths", required=True),
    "vllm_releases": _axis(VLLM_VERSION, "the vLLM releases whose rules to follow"),
    "gpus": _axis(GPU, "GPUs from `kvplan gpus`"),
    "tensor_parallel_size": _axis(PARALLEL, "tensor-parallel sizes"),
    "pipeline_parallel_size": _axis(PARALLEL, "pipeline-parallel sizes"),
    "kv_cache_dtype": _axis(KV_CACHE_DTYPE, "KV-cache dtypes"),
    "dtype": _axis(DTYPE, "model dtypes"),
    "gpu_memory_utilization": _axis(UTILIZATION, "gpu_memory_utilization values"),
    "kv_cache_memory": _axis(MEMORY, "KV-cache bytes per GPU (instead of utilizations)"),
    "block_size": _axis(BLOCK_SIZE, "block sizes"),
    "max_model_len": _axis(MODEL_LEN, "max_model_len values"),
    "max_num_seqs": _axis(NUM_SEQS, "max_num_seqs values"),
    "max_num_batched_tokens": _axis(BATCHED_TOKENS, "max_num_batched_tokens values"),
    "enable_prefix_caching": _axis(Boolean(), "prefix caching on and/or off"),
    "enable_chunked_prefill": _axis(Boolean(), "chunked prefill on and/or off"),
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
