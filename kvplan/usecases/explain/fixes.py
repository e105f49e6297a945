"""What ran out, by how much, and the smallest changes that start: for a logged start-up whose KV
cache cannot hold one request of max_model_len tokens, or that ended in an error. Every change is
checked with kvplan's own sizing (`plan` on the memory the change leaves), and says so when it
cannot be.

    shortfall(log, context) -> Shortfall | None
    fixes(log, context) -> (Fix, ...)"""

from __future__ import annotations

import math
from dataclasses import dataclass

from kvplan.errors import KvplanError
from kvplan.semantics.engine.args import setting
from kvplan.semantics.memory.budget import REDUNDANCY_BUFFER_BYTES, MemoryBudget, requested_memory, utilization_for
from kvplan.units import format_gib
from kvplan.usecases.explain.log_reader import StartupLog
from kvplan.usecases.explain.logged_budget import logged_available
from kvplan.usecases.plan import PlanRequest, PlanResult, plan, settle

# the largest tensor-parallel size tried for "one more GPU"
MAX_TENSOR_PARALLEL = 8


@dataclass(frozen=True)
class Shortfall:
    """The term that ran out: what was needed, what there was, in bytes, and in words."""

    term: str
    needed_bytes: int | None
    available_bytes: int | None
    text: str

    @property
    def short_bytes(self) -> int | None:
        if self.needed_bytes is None or self.available_bytes is None:
            return None
        return self.needed_bytes - self.available_bytes


@dataclass(frozen=True)
class Fix:
    """One change to the command line, checked with kvplan's sizing where `checked`."""

    flags: tuple[tuple[str, str], ...]      # (flag, value) as `vllm serve` takes them (`Setting.flag`)
    what: str
    checked: bool
    outcome: str

    @property
    def change(self) -> str:
        return " ".join(f"{flag} {value}".strip() for flag, value in self.flags)


@dataclass(frozen=True)
class FixContext:
    """What the changes are checked with: the settings predicted with, the logged budget (or the
    predicted one when the log ended before the profile run) and the plan of the logged KV memory."""

    request: PlanRequest | None
    budget: MemoryBudget | None
    budget_source: str                      # "log" or "predicted"
    sized: PlanResult | None


def _change(name: str, value: str) -> tuple[str, str]:
    """One flag of a fix, spelled as `vllm serve` takes it (`EngineArgs`' declaration)."""
    return setting(name).flag, value


def _outcome(result: PlanResult) -> str:
    summary = result.summary
    if not result.fits:
        return "still does not fit: " + (summary.error or "no memory for the cache blocks")
    concurrency = summary.max_concurrency or 0.0
    return (f"starts: {summary.gpu_kv_cache_tokens or 0:,} tokens of KV cache, {concurrency:.2f}x for "
            f"{summary.max_model_len:,}-token requests")


def _sized(request: PlanRequest, kv_bytes: int, **changes: object) -> PlanResult:
    return plan(request.with_settings(kv_cache_memory_bytes=kv_bytes, with_weights=False, **changes))


def _fits(result: PlanResult) -> bool:
    return result.fits


def shortfall(log: StartupLog, context: FixContext) -> Shortfall | None:
    """The term that ran out, when the start-up did not fit (or ended in an error kvplan can place)."""
    error = log.error
    if error is not None and error.kind == "startup_refusal":
        figures = error.figures
        return Shortfall("free memory at start-up", figures["requested_bytes"], figures["free_bytes"],
                         f"vLLM asked for {format_gib(figures['requested_bytes'])} GiB ({figures['utilization']} of "
                         f"{format_gib(figures['total_bytes'])} GiB) but {format_gib(figures['free_bytes'])} GiB were "
                         f"free on {figures['device']}: "
                         f"{format_gib(figures['requested_bytes'] - figures['free_bytes'])} GiB short; another process "
                         "holds that memory")
    if error is not None and error.kind == "out_of_memory":
        figures = error.figures
        phase = figures.get("phase", "after the KV cache was allocated")
        return Shortfall("memory left beside the KV cache", figures["tried_bytes"], figures["free_bytes"],
                         f"{phase}: vLLM tried to allocate {format_gib(figures['tried_bytes'])} GiB with "
                         f"{format_gib(figures['free_bytes'])} GiB free; the KV cache had taken the rest, "
                         "so the warm-up's buffers did not fit beside it")
    if error is not None and error.kind == "max_model_len_over_derived":
        figures = error.figures
        return Shortfall("max_model_len", figures["max_model_len"], figures["derived_max_model_len"],
                         f"--max-model-len {figures['max_model_len']:,} is above the model's "
                         f"{figures['derived_from']} ({figures['derived_max_model_len']:,})")
    sized, available = context.sized, logged_available(log)
    if (error is not None and error.kind == "no_cache_memory") or (available is not None and available <= 0):
        needed = None if sized is None else sized.sizing.bytes_needed_for_one_max_len_request
        return Shortfall("KV cache memory", needed, available if available is not None else 0,
                         "no memory was left for the KV cache: the non-KV memory took all of "
                         "total x gpu_memory_utilization")
    if sized is not None and not sized.fits:
        needed = sized.sizing.bytes_needed_for_one_max_len_request
        return Shortfall("KV cache memory", needed, available,
                         f"one {sized.max_model_len:,}-token request needs {format_gib(needed)} GiB of KV cache, "
                         f"{format_gib(needed - (available or 0))} GiB more than the "
                         f"{format_gib(available or 0)} GiB vLLM had")
    if error is not None and error.kind == "max_model_len_too_large":
        figures = error.figures
        return Shortfall("KV cache memory", figures["needed_bytes"], figures["available_bytes"],
                         f"one {figures['max_model_len']:,}-token request needs {format_gib(figures['needed_bytes'])}"
                         f" GiB, the KV cache had {format_gib(figures['available_bytes'])} GiB")
    return None


def fixes(log: StartupLog, context: FixContext) -> tuple[Fix, ...]:
    """The smallest changes that start, for the shortfall of this start-up (none when it started)."""
    found = shortfall(log, context)
    request, budget = context.request, context.budget
    if found is None or request is None:
        return ()
    error = log.error
    if error is not None and error.kind == "startup_refusal":
        return _refusal_fixes(error.figures, context)
    if error is not None and error.kind == "out_of_memory":
        return _oom_fixes(log, context)
    if error is not None and error.kind == "max_model_len_over_derived":
        return _derived_length_fixes(error.figures, context)
    if budget is None:
        return ()
    available = budget.available_kv_bytes
    out: list[Fix] = []
    sized = context.sized
    if sized is not None and available > 0 and sized.sizing.estimated_max_model_len:
        length = sized.sizing.estimated_max_model_len
        out.append(Fix((_change("max_model_len", str(length)),), "the longest request the KV memory holds",
                       True, _outcome(_sized(request, available, max_model_len=length))))
    out.extend(_utilization_fix(request, budget, context))
    if request.value("kv_cache_dtype") == "auto" and available > 0:
        result = _sized(request, available, kv_cache_dtype="fp8")
        out.append(Fix((_change("kv_cache_dtype", "fp8"),), "half the bytes per token, on the same memory",
                       True, _outcome(result)))
    out.extend(_more_gpus(request, budget))
    return tuple(fix for fix in out if fix.checked is False or "still does not fit" not in fix.outcome) or tuple(out)


def _non_kv_total(budget: MemoryBudget) -> int:
    """What the KV cache does not get of `requested`: non-KV memory and the graph estimate in the budget."""
    return budget.requested_bytes - budget.available_kv_bytes


def _utilization_fix(request: PlanRequest, budget: MemoryBudget, context: FixContext) -> list[Fix]:
    sized = context.sized
    needed = None if sized is None else sized.sizing.bytes_needed_for_one_max_len_request
    if not needed:
        return []
    non_kv = _non_kv_total(budget)
    utilization = utilization_for(budget.total_bytes, non_kv, needed)
    # the capacity check of some releases holds one block back: step up until kvplan's sizing fits
    while utilization is not None and utilization <= 1.0:
        kv = requested_memory(budget.total_bytes, utilization) - non_kv
        result = _sized(request, kv, gpu_memory_utilization=utilization)
        if result.fits:
            what = f"{format_gib(kv)} GiB of KV cache beside the same {format_gib(non_kv)} GiB of non-KV memory"
            requested = requested_memory(budget.total_bytes, utilization)
            if context.budget_source == "log" and requested > budget.free_at_start_bytes:
                what += (f"; above the {format_gib(budget.free_at_start_bytes)} GiB free at start-up, which vLLM "
                         "refuses: free that memory first")
            return [Fix((_change("gpu_memory_utilization", f"{utilization:g}"),), what, True, _outcome(result))]
        utilization = round(utilization + 0.0001, 4)
    return [Fix((_change("gpu_memory_utilization", "1.0"),),
                "not enough even at 1.0: the non-KV memory leaves too little", True, "still does not fit")]


def _more_gpus(request: PlanRequest, budget: MemoryBudget) -> list[Fix]:
    """The next tensor-parallel size the model takes: each GPU holds tp/tp' of the weights (the
    other terms taken as logged: an estimate, said so)."""
    tp = request.value("tensor_parallel_size")
    for more in range(tp + 1, MAX_TENSOR_PARALLEL + 1):
        candidate = request.with_args(tensor_parallel_size=more, kv_cache_memory_bytes=None)
        try:
            settle(candidate)
        except KvplanError:
            continue
        weights = budget.weights_bytes
        kv = budget.available_kv_bytes + weights - weights * tp // more
        result = _sized(request, kv, tensor_parallel_size=more)
        return [Fix((_change("tensor_parallel_size", str(more)),),
                    f"{more} GPUs: each holds {tp}/{more} of the {format_gib(weights)} GiB of weights "
                    f"({format_gib(kv)} GiB of KV cache per GPU; the other terms as logged, an estimate)",
                    True, _outcome(result))]
    return []


def _refusal_fixes(figures: dict[str, object], context: FixContext) -> tuple[Fix, ...]:
    """vLLM refused to start: less free than requested. The largest utilization the free memory
    allows, checked against the predicted non-KV memory (the log ended before the profile run)."""
    total, free = int(figures["total_bytes"]), int(figures["free_bytes"])  # type: ignore[call-overload]
    utilization = math.floor(free / total * 100) / 100
    while utilization > 0 and requested_memory(total, utilization) > free:
        utilization = round(utilization - 0.01, 2)
    request, budget = context.request, context.budget
    if request is None or budget is None:
        return (Fix((_change("gpu_memory_utilization", f"{utilization:g}"),),
                    f"asks for at most the {format_gib(free)} GiB that were free", False,
                    "not checked: the log ended before the profile run and kvplan could not predict it "
                    "(give --model, and torch for the profile run)"),)
    kv = requested_memory(total, utilization) - _non_kv_total(budget)
    result = _sized(request, kv, gpu_memory_utilization=utilization)
    return (Fix((_change("gpu_memory_utilization", f"{utilization:g}"),),
                f"asks for at most the {format_gib(free)} GiB that were free; {format_gib(kv)} GiB of KV cache "
                "beside kvplan's predicted non-KV memory", True, _outcome(result)),)


def _oom_fixes(log: StartupLog, context: FixContext) -> tuple[Fix, ...]:
    """Out of memory after the KV cache was allocated (graph capture, the sampler warm-up): give the
    KV cache less, by the allocation that failed less what was free, plus vLLM's 150 MiB margin."""
    error, budget, request = log.error, context.budget, context.request
    if error is None or budget is None or request is None:
        return ()
    short = int(error.figures["tried_bytes"]) - int(error.figures["free_bytes"]) + REDUNDANCY_BUFFER_BYTES
    step = math.ceil(short / budget.total_bytes * 10_000) / 10_000
    utilization = round(budget.utilization - step, 4)
    kv = requested_memory(budget.total_bytes, utilization) - _non_kv_total(budget)
    out = [Fix((_change("gpu_memory_utilization", f"{utilization:g}"),),
               f"{format_gib(short)} GiB more left beside the KV cache ({format_gib(kv)} GiB of KV cache): the "
               "allocation that failed, less what was free, plus vLLM's 150 MiB margin; the least that can start "
               "(kvplan does not model the warm-up's later allocations)",
               True, _outcome(_sized(request, kv, gpu_memory_utilization=utilization)))]
    phase = str(error.figures.get("phase", ""))
    if "sampler" in phase and budget is not None:
        seqs = request.args.max_num_seqs or 1024
        out.append(Fix((_change("max_num_seqs", str(max(seqs // 2, 1))),),
                       "the sampler warm-up's buffers scale with the requests it warms up", False,
                       "not checked: kvplan does not model the post-capture sampler warm-up"))
    return tuple(out)


def _derived_length_fixes(figures: dict[str, object], context: FixContext) -> tuple[Fix, ...]:
    derived = int(figures["derived_max_model_len"])  # type: ignore[call-overload]
    request, budget = context.request, context.budget
    if request is None or budget is None:
        return (Fix((_change("max_model_len", str(derived)),), "the model's own limit", False,
                    "not checked: kvplan could not predict this start-up's memory"),)
    result = _sized(request, budget.available_kv_bytes, max_model_len=derived)
    return (Fix((_change("max_model_len", str(derived)),), "the model's own limit, on kvplan's predicted KV memory",
                True, _outcome(result)),)
