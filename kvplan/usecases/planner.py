"""`kvplan plan` for many configurations of one model, at the cost of one profile run per distinct
non-KV memory.

`plan_for_device` predicts the KV memory of a named GPU with a profile run on the fake backend
(about a second or two each). What that run measures (weights, activation peak, non-torch memory)
depends on the model, its dtype, the GPU, the parallel layout and the profile batch
(`max_num_batched_tokens`, `max_num_seqs`), never on `gpu_memory_utilization`, the KV-cache dtype,
`max_model_len` or the block size. `Planner` keeps each run's budget and gives every other
configuration that shares it the KV memory that budget leaves at its own utilization, then sizes
the cache with `plan`: the same numbers `plan_for_device` gives, which a test checks. On 0.34.0's
measured path (docs/vllm/changes-0.34.md §1.4) that KV memory is the capacity, and the block count is
the one vLLM measures after warmup and CUDA-graph capture, predicted from the same run's terms and
captured graph pool, as `run_profile` predicts it."""

from __future__ import annotations

from dataclasses import dataclass, replace

from kvplan.errors import KvplanError
from kvplan.semantics.kv.sizing import measured_sizing_texts
from kvplan.semantics.memory.budget import MemoryBudget
from kvplan.usecases.measured_sizing import RankReadings, measured_plan
from kvplan.usecases.plan import PlanRequest, PlanResult, plan, predicts_kv_memory, settle


@dataclass(frozen=True)
class _Measured:
    budgets: tuple[MemoryBudget, ...]      # one per pipeline stage's rank
    warnings: tuple[str, ...]
    refusal: str | None
    graph_pools: tuple[int, ...] = ()      # each rank's captured CUDA-graph pool (the measured path's U)
    init_free_bytes: int = 0               # free memory at start-up (the measured path's I)
    non_torch_source: str | None = None


class Planner:
    """Plans as `plan_for_device` makes them; one instance per process keeps the profile runs."""

    def __init__(self) -> None:
        self._measured: dict[PlanRequest, _Measured] = {}
        self.profile_runs = 0

    def plan(self, request: PlanRequest) -> PlanResult:
        if not predicts_kv_memory(request):
            return plan(request)
        from kvplan.usecases.profile import PREDICTED_MEASURED_MEMORY, PREDICTED_MEMORY

        setup = settle(request)
        measured = self._measure(request, setup.batch.max_num_batched_tokens, setup.batch.max_num_seqs)
        if measured.refusal is not None:
            raise KvplanError(measured.refusal)
        # each rank's KV memory at this utilization; the smallest bounds the pool, as in run_profile
        budgets = tuple(replace(budget, utilization=request.utilization, kv_cache_memory_override=None)
                        for budget in measured.budgets)
        per_rank = tuple(budget.available_kv_bytes for budget in budgets)
        path = request.sizing_path
        if not path.measured:
            result = replace(plan(request.with_args(kv_cache_memory_bytes=min(per_rank)), setup,
                                  kv_cache_memory_per_worker=per_rank), path=path)
            source = PREDICTED_MEMORY
        else:
            # 0.34.0's measured path: the reservation on the capacity, then the blocks measured after capture
            capacity = plan(request.with_args(kv_cache_memory_bytes=min(per_rank)), setup,
                            kv_cache_memory_per_worker=per_rank, report_capacity=False,
                            texts=measured_sizing_texts(request.release, request.utilization, after_warmup=False))
            readings = [RankReadings(budget, pool) for budget, pool in zip(budgets, measured.graph_pools, strict=True)]
            result = measured_plan(request, setup, capacity, readings, init_free_bytes=measured.init_free_bytes,
                                   path=path)
            source = PREDICTED_MEASURED_MEMORY
        return replace(result, memory_source=source, warnings=measured.warnings,
                       non_torch_bytes=measured.budgets[0].non_torch_bytes, non_torch_source=measured.non_torch_source)

    def _measure(self, request: PlanRequest, max_num_batched_tokens: int, max_num_seqs: int) -> _Measured:
        # what the profile run depends on, and nothing else
        key = request.with_args(gpu_memory_utilization=1.0, kv_cache_dtype="auto", max_model_len=None,
                      block_size=None, enable_prefix_caching=None, num_gpu_blocks_override=None,
                      max_num_batched_tokens=max_num_batched_tokens, max_num_seqs=max_num_seqs)
        if key not in self._measured:
            from kvplan.errors import require_profile_extra
            from kvplan.usecases.profile import ProfileRequest, run_profile

            require_profile_extra("predicting the KV memory of a GPU (no --kv-cache-memory given)")
            try:
                profile = run_profile(ProfileRequest(plan=request, backend="fake", allocate=False))
            except KvplanError as error:  # kept too: the same key is refused the same way
                self._measured[key] = _Measured((), (), str(error))
                return self._measured[key]
            self.profile_runs += 1
            if profile.plan is None or not profile.ranks:
                refusal = f"the profile run refused this configuration: {profile.finding or 'no plan'}"
                self._measured[key] = _Measured((), (), refusal)
            else:
                self._measured[key] = _Measured(
                    tuple(rank.budget for rank in profile.ranks), profile.warnings, None,
                    graph_pools=tuple(rank.graphs.bytes if rank.graphs else 0 for rank in profile.ranks),
                    init_free_bytes=profile.snapshot.free_bytes, non_torch_source=profile.non_torch_source or None)
        return self._measured[key]


_PROCESS_PLANNER: Planner | None = None


def process_planner() -> Planner:
    """The planner of this process (each worker of an executor has its own)."""
    global _PROCESS_PLANNER
    if _PROCESS_PLANNER is None:
        _PROCESS_PLANNER = Planner()
    return _PROCESS_PLANNER
