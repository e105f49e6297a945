"""The vLLM releases kvplan reproduces, as data: one `Release` per release, holding the value of
every policy that differs between releases. Code reads the policy from the `Release` it was handed
(a request's `release`), never a version string; each policy's variants are implemented next to
the code that applies them, in a table keyed by the policy's value, so a new release is a new row
here plus, where its behaviour is new, one more entry in such a table.

Where each policy is applied:

    gpu_memory_utilization        default of PlanRequest (plan, profile, check) and of workloads' engine.model
    non_kv_memory                 semantics/memory/budget.py (NON_KV_MEMORY)
    cuda_graphs_in_budget         semantics/memory/budget.py (the CUDA-graph pool taken from the KV budget)
    sampler_passes                measure/dummy_run.py (dummy sampler runs in the profile run)
    capacity_reserve_blocks       semantics/kv/sizing.py (blocks the memory check and auto-fit hold back)
    per_request_memory            semantics/kv/sizing.py (PER_REQUEST_MEMORY)
    group_padding_ratio           semantics/kv/grouping.py (when unequal layer types are padded to one group size)
    prefix_caching_for_hybrids    semantics/kv/layer_specs.py (the default of --enable-prefix-caching for hybrids)
    kv_capacity_log               semantics/kv/sizing.py (KV_CAPACITY_LOG: the "GPU KV cache size" lines)
    freed_unhashed_blocks         semantics/engine/block_pool.py (UNHASHED_TO_HEAD: where a freed unhashed block goes)
    admission                     semantics/engine/scheduler.py (WHOLE_PROMPT_FIRST: what must fit to admit)
    prefix_stats                  semantics/engine/kv_cache_manager.py (STATS_AT_LOOKUP: when lookups are counted)
    scheduling                    semantics/engine/scheduler.py (BATCHES_IN_FLIGHT: the loop `vllm serve` runs)
    hybrid_scheduling             semantics/engine/config.py (the loops reproduced with several KV cache groups)"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kvplan.errors import KvplanError

NonKvMemory = Literal["weights_peak_non_torch"]        # weights + torch peak increase + non-torch increase
PerRequestMemory = Literal["first_group_times_group_size"]   # group 0's blocks for every layer of a group
KvCapacityLog = Literal["tokens_then_concurrency"]     # "GPU KV cache size: N tokens", "Maximum concurrency ..."
# freed blocks without a hash (every block with caching off) join the free queue's tail, or its head
FreedUnhashedBlocks = Literal["tail", "head"]
# a waiting request is admitted when its next chunk fits, or when its whole prompt fits and then the chunk
Admission = Literal["first_chunk", "whole_prompt"]
# prefix-cache statistics count every lookup (a blocked queue head again at every step), or admissions only
PrefixStats = Literal["every_lookup", "on_admission"]
# sync: a batch's output is processed in the step that scheduled it (`--no-async-scheduling`); async: the
# next batch is scheduled before it, with two batches in flight (`vllm serve`'s default in both releases)
Scheduling = Literal["sync", "async"]


@dataclass(frozen=True)
class Release:
    version: str
    gpu_memory_utilization: float                  # vLLM's default --gpu-memory-utilization
    non_kv_memory: NonKvMemory                     # how the profile run's terms add up to non-KV memory
    cuda_graphs_in_budget: bool                    # the CUDA-graph pool is taken from the KV budget
    sampler_passes: int                            # dummy sampler runs in the profile run
    capacity_reserve_blocks: int                   # blocks the memory check and auto-fit hold back
    per_request_memory: PerRequestMemory           # what one max_model_len request needs, over groups
    group_padding_ratio: float                     # pad layer types to one group size below this size ratio
    prefix_caching_for_hybrids: bool               # the default of prefix caching for Mamba hybrids
    kv_capacity_log: KvCapacityLog                 # the log lines that report the pool
    freed_unhashed_blocks: FreedUnhashedBlocks     # where a freed block without a hash goes
    admission: Admission                           # when a waiting request is admitted
    prefix_stats: PrefixStats                      # when prefix-cache statistics are recorded
    scheduling: Scheduling                         # the engine loop `vllm serve` runs (--scheduling overrides)
    hybrid_scheduling: tuple[Scheduling, ...]      # the loops reproduced with several KV cache groups


VLLM_0_17_1 = Release(
    version="0.17.1",
    gpu_memory_utilization=0.9,
    non_kv_memory="weights_peak_non_torch",
    cuda_graphs_in_budget=False,
    sampler_passes=1,
    capacity_reserve_blocks=0,
    per_request_memory="first_group_times_group_size",
    group_padding_ratio=1.25,
    prefix_caching_for_hybrids=False,
    kv_capacity_log="tokens_then_concurrency",
    freed_unhashed_blocks="tail",
    admission="first_chunk",
    prefix_stats="every_lookup",
    scheduling="async",
    hybrid_scheduling=("sync", "async"),
)

# The engine's policies are 0.33.0's (trace-replay-0.33.md, checked against its records). Its non-KV
# memory formula, per-request memory of hybrids and pool log lines are new variants, and its grouping
# and hybrid prefix-caching default are to be checked: they come with the sizing side of issue 13, and
# until then those five hold 0.17.1's values here.
VLLM_0_33_0 = Release(
    version="0.33.0",
    gpu_memory_utilization=0.92,
    non_kv_memory="weights_peak_non_torch",
    cuda_graphs_in_budget=True,
    sampler_passes=2,
    capacity_reserve_blocks=1,
    per_request_memory="first_group_times_group_size",
    group_padding_ratio=1.25,
    prefix_caching_for_hybrids=False,
    kv_capacity_log="tokens_then_concurrency",
    freed_unhashed_blocks="head",
    admission="whole_prompt",
    prefix_stats="on_admission",
    scheduling="async",
    # 0.33.0 hashes and frees the blocks of sliding-window and Mamba groups differently (changes doc
    # section 3.4-3.5); kvplan has no records of its classes with several groups yet
    hybrid_scheduling=(),
)

RELEASES: dict[str, Release] = {release.version: release for release in (VLLM_0_17_1, VLLM_0_33_0)}
DEFAULT_RELEASE = VLLM_0_17_1


def release_named(version: str) -> Release:
    """The release of a version string the user gave (a file's `vllm_version`, --vllm-version)."""
    try:
        return RELEASES[version]
    except (KeyError, TypeError):
        raise KvplanError(f"vllm_version must be one of {', '.join(RELEASES)} (the releases kvplan reproduces), "
                          f"got {version!r}") from None
