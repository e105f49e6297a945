"""vLLM 0.34.0's measured sizing, predicted (`docs/vllm/changes-0.34.md` section 1.4): the reservation is
planned on the capacity (`requested - non-KV`, no CUDA-graph estimate), then the block count comes
from what vLLM will measure after warmup and CUDA-graph capture, worker by worker:

    I = free memory at start-up                       (the snapshot)
    U = weights + non-torch + what the runner keeps + the captured CUDA-graph pool (actual)
    C = the null block's commit: every layer segment rounded up to the 2 MiB granule
    F = I - U - C
    R = ceil(total x utilization)                     (1.0 unless given)
    P = the sizing warm-up step's transient peak      (the profile run's: the same full-budget step)
    G = torch's reservation growth over that step     (measured on cuda; P elsewhere)

and `semantics.memory.measured` turns them into blocks. The lines vLLM logs keep its order: the
capacity's tentative auto-fit, "Memory after warmup", the second auto-fit, the capacity line on the
measured blocks, "Extended KV cache".

    measured_plan(request, setup, capacity, ranks, *, init_free_bytes, path) -> PlanResult"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from kvplan.semantics.kv.sizing import bytes_per_block, measured_sizing_texts
from kvplan.semantics.kv.specs import KVCacheConfig
from kvplan.semantics.memory.budget import MemoryBudget
from kvplan.semantics.memory.measured import (
    MeasuredSizing,
    MeasuredTerms,
    Segments,
    SizingPath,
    extended_line,
    layer_segments,
    measured_sizing,
    memory_after_warmup_line,
    refits_after_warmup,
    withheld_warning,
)
from kvplan.usecases.plan import PlanRequest, PlanResult, SettledConfig, plan


@dataclass(frozen=True)
class RankReadings:
    """What one worker's prediction rests on: its budget (the capacity's terms), the CUDA-graph pool
    it captures, torch's reservation growth over the sizing step (None: taken as the transient peak),
    and torch's reservation after the measurement's empty_cache (None: the torch-held part of U)."""

    budget: MemoryBudget
    cuda_graph_pool_bytes: int
    torch_reserve_growth_bytes: int | None = None
    torch_reserved_bytes: int | None = None


def pool_segments(config: KVCacheConfig, capacity_blocks: int) -> Segments:
    """The layer segments of a pool planned for `capacity_blocks` (layer-outermost, LBNHC)."""
    return layer_segments([(tensor.offset, len(tensor.shared_by), tensor.layer_stride or 0, tensor.block_stride or 0)
                           for tensor in config.kv_cache_tensors], capacity_blocks)


def predicted_terms(readings: RankReadings, segments: Segments, init_free_bytes: int) -> MeasuredTerms:
    budget = readings.budget
    resident = budget.total_consumed_bytes + readings.cuda_graph_pool_bytes
    committed = segments.footprint(1)
    peak = budget.transient_peak_bytes
    growth = peak if readings.torch_reserve_growth_bytes is None else readings.torch_reserve_growth_bytes
    return MeasuredTerms(init_free_bytes=init_free_bytes, free_bytes=init_free_bytes - resident - committed,
                         committed_bytes=committed, requested_bytes=budget.requested_bytes,
                         transient_peak_bytes=peak, torch_reserve_growth_bytes=growth)


def measured_plan(request: PlanRequest, setup: SettledConfig, capacity: PlanResult, ranks: Sequence[RankReadings],
                  *, init_free_bytes: int, path: SizingPath) -> PlanResult:
    """The plan on the blocks vLLM will measure, with the measured terms. `capacity` is the
    reservation's plan (its capacity lines not logged); the capacity check failing there stops vLLM
    before warmup, so it is returned as it is."""
    release = request.release
    config = capacity.kv_config
    if not capacity.fits or config is None or not config.kv_cache_groups:
        return replace(capacity, path=path)
    sizings: list[MeasuredSizing] = []
    for readings, worker in zip(ranks, capacity.sizing.worker_configs, strict=True):
        segments = pool_segments(worker, worker.num_blocks)
        terms = predicted_terms(readings, segments, init_free_bytes)
        reserved = readings.torch_reserved_bytes
        if reserved is None:
            reserved = terms.resident_bytes - readings.budget.non_torch_bytes
        sizings.append(measured_sizing(terms, segments, torch_reserved_bytes=reserved, release=release))
    binding = min(sizings, key=lambda sizing: sizing.num_blocks)
    num_blocks = binding.num_blocks
    # vLLM's WARNING when an explicit utilization withholds free memory, logged before the measured line
    warnings = tuple(dict.fromkeys(
        warning for warning in (withheld_warning(sizing.terms, request.utilization, release) for sizing in sizings)
        if warning))
    # the engine takes the minimum over ranks and re-fits --max-model-len auto on (n - 1) blocks
    per_worker = tuple(num_blocks * bytes_per_block(groups) for groups in capacity.sizing.worker_groups)
    refit = setup.auto_fit and refits_after_warmup(release, path)
    after = replace(setup, max_model_len=capacity.max_model_len, auto_fit=refit)
    final = plan(request.with_settings(kv_cache_memory_bytes=per_worker[0], with_weights=False), after,
                 kv_cache_memory_per_worker=per_worker,
                 texts=measured_sizing_texts(release, request.utilization, after_warmup=True))
    before = capacity.sizing.log_lines
    after_lines = [line for line in final.sizing.log_lines if line not in before]
    extended = (extended_line(num_blocks, binding.footprint_bytes),) if final.fits else ()
    logs = (*before, *warnings, memory_after_warmup_line(binding), *after_lines, *extended)
    return replace(final, request=replace(final.request, with_weights=request.with_weights),
                   sizing=replace(final.sizing, log_lines=logs), path=path, measured=binding,
                   weights=capacity.weights, weights_unknown=capacity.weights_unknown)
