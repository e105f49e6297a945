"""The planning settings (`kvplan plan`'s flags, a spec's [target], a workload's engine.model
planning keys), described once with their ranges for `kvplan.schema`: the command line, the check
spec and the workload take them the same way, and docs/schemas/input/ publishes them."""

from __future__ import annotations

from kvplan import limits
from kvplan.errors import KvplanError
from kvplan.gpus.catalog import get_gpu
from kvplan.schema import Checked, Field, Integer, ListOf, Number, Record, Text

# the kinds of vLLM's engine arguments are declared with them (`semantics.engine.args`); the use cases that
# read a file's planning keys import these from here
from kvplan.semantics.engine.args import DTYPE as DTYPE
from kvplan.semantics.engine.args import KV_CACHE_DTYPE as KV_CACHE_DTYPE
from kvplan.semantics.engine.args import MEMORY, SCHEDULES, SIZES, TARGETS, file_fields, in_order, named
from kvplan.semantics.engine.args import MODEL as MODEL
from kvplan.semantics.engine.args import UTILIZATION as UTILIZATION


def gpu_problem(key: str) -> str | None:
    """Why `key` names no GPU of the catalog (None when it does)."""
    try:
        get_gpu(key)
    except KvplanError as error:
        return str(error)
    return None


# The engine arguments a planning file takes (a check spec's [target], a profile's settings): those that
# plan a pool from a model, by their roles, in the order the schemas have always listed them (only the
# order: a setting missing here comes after these)
_FILE_ORDER = ("gpu_memory_utilization", "kv_cache_memory_bytes", "block_size", "max_model_len",
               "max_num_batched_tokens", "max_num_seqs", "kv_cache_dtype", "dtype", "tensor_parallel_size",
               "pipeline_parallel_size", "num_gpu_blocks_override", "enable_prefix_caching", "enable_chunked_prefill")
PLANNED_IN_FILES = in_order(named(SCHEDULES, SIZES, TARGETS), _FILE_ORDER)

GPU = Checked(Text(max_length=256, controls=False), gpu_problem,
              "a GPU of `kvplan gpus`: its key, a unique prefix of it, its name as nvidia-smi prints it, or words "
              "naming one (\"L4\", \"H100 SXM\")", says="a GPU key of `kvplan gpus`")
PLANNING_SETTINGS: dict[str, Field] = {
    "gpu": Field(GPU),
    "gpu_memory": Field(MEMORY, description="device memory total (instead of gpu)"),
    # vLLM's engine arguments, as `EngineArgs` declares them
    **file_fields(*PLANNED_IN_FILES),
}

# step times measured on a device: a workload's timing.calibration, a profile's calibration.step_time
STEP_MS = Number(0, limits.MAX_STEP_MS, exclusive_minimum=True, description="milliseconds")
CALIBRATION = ListOf(Record({"num_tokens": Field(Integer(1, limits.MAX_TOKENS), required=True),
                             "ms": Field(STEP_MS, required=True)}), 1, 10**6,
                     "step times measured at a few token counts (one entry per count)")
