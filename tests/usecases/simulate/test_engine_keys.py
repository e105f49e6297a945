"""A workload's engine takes the scheduler's engine arguments from `EngineArgs` (SCHEDULES, as a trace's
config does) and those that plan engine.model's pool (WORKLOADS), beside the format's own keys."""

from __future__ import annotations

from kvplan.semantics.engine.args import SCHEDULES, WORKLOADS, named, setting
from kvplan.usecases.simulate.workload_format import ENGINE

# the trace format's own keys, and the workload's pool sources and device
TRACE_KEYS = {"num_gpu_blocks", "hash_algo", "hash_seed", "vllm_version", "scheduling"}
WORKLOAD_KEYS = {"profile", "model", "gpu", "gpu_memory"}


def keys(*roles: str) -> set[str]:
    return {setting(name).key or name for name in named(*roles)}


def test_workload_engine_keys_are_the_schedules_and_workloads_fields() -> None:
    assert set(ENGINE.fields) == keys(SCHEDULES) | keys(WORKLOADS) | TRACE_KEYS | WORKLOAD_KEYS
    assert not keys(SCHEDULES) & (keys(WORKLOADS) | TRACE_KEYS | WORKLOAD_KEYS)
    for name in named(SCHEDULES):
        declared = setting(name)
        assert ENGINE.fields[declared.key or name].kind == declared.fixed_range
