"""The replay loop of docs/vllm/replay-contract.md §2: arrivals by step, one scheduler step (engine-core
iteration, in either scheduling mode) per step, the stall rule, and the run's summary. Records are
streamed to an observer, never kept."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass

from kvplan.semantics.engine.config import EngineConfig
from kvplan.semantics.engine.request import Request
from kvplan.semantics.engine.scheduler import ModelRunner, Scheduler, StepResult
from kvplan.semantics.engine.trace import Trace

# Called after every step with the step, the scheduler and the ids that arrived before it.
StepObserver = Callable[[StepResult, Scheduler, list[str]], None]
# Called instead of the observer for a stretch of idle steps (nothing waiting, running or arriving):
# the first step and how many there are.
IdleObserver = Callable[[int, int], None]
# an idle stretch this long or longer is skipped whole when nobody observes single steps
IDLE_SKIP_STEPS = 4096


@dataclass(frozen=True)
class RequestOutcome:
    arrival_step: int
    first_scheduled_step: int | None
    finish_step: int | None
    num_preemptions: int
    num_cached_tokens: int | None


@dataclass(frozen=True)
class ReplaySummary:
    config: EngineConfig
    num_steps: int
    stalled: bool
    num_finished: int
    num_requests: int
    total_preemptions: int
    prefix_cache_queries: int
    prefix_cache_hits: int
    prefix_cache_hit_rate: float
    preempted_queries: int
    preempted_hits: int
    max_used_blocks: int
    requests: dict[str, RequestOutcome]


def replay(trace: Trace, observe: StepObserver | None = None,
           model_runner: ModelRunner | None = None, on_idle: IdleObserver | None = None,
           bulk_decode: bool | None = None) -> ReplaySummary:
    """Run the trace to completion (or to a stall), calling `observe` after every step (and
    `model_runner` inside every step, see `Scheduler`). A long stretch of idle steps before the next
    arrival is skipped in one go when no observer needs each step, or when `on_idle` accounts for it:
    a trace whose arrivals lie 10**9 steps apart takes no longer than one whose arrivals touch.
    `bulk_decode` (the scheduler's fast path; same records): None, on when nobody observes steps,
    since an observer may read every request's counters."""
    if bulk_decode is None:
        bulk_decode = observe is None
    scheduler = Scheduler(trace.config, model_runner, bulk_decode=bulk_decode)
    arrivals: defaultdict[int, list[int]] = defaultdict(list)
    for spec in trace.requests:
        arrivals[spec.arrival_step].append(spec.ordinal)
    arrival_steps_ahead = sorted(arrivals)
    ahead = 0
    may_skip = model_runner is None and (observe is None or on_idle is not None)
    last_arrival = trace.last_arrival_step
    arrival_steps = {r.request_id: r.arrival_step for r in trace.requests}
    live: dict[str, Request] = {}
    outcomes: dict[str, RequestOutcome] = {}
    usable = trace.config.num_gpu_blocks - 1
    max_used_blocks = 0
    stalled = False
    step = 0
    while scheduler.has_unfinished() or step <= last_arrival:
        while ahead < len(arrival_steps_ahead) and arrival_steps_ahead[ahead] < step:
            ahead += 1
        if may_skip and not scheduler.has_unfinished() and ahead < len(arrival_steps_ahead):
            gap = arrival_steps_ahead[ahead] - step
            if gap >= IDLE_SKIP_STEPS:
                if on_idle is not None:
                    on_idle(step, gap)
                scheduler.num_steps += gap
                step += gap
        arrived: list[str] = []
        for ordinal in arrivals.pop(step, ()):
            arriving = trace.requests[ordinal].to_request()
            scheduler.add_request(arriving)
            live[arriving.request_id] = arriving
            arrived.append(arriving.request_id)
        result = scheduler.step()
        max_used_blocks = max(max_used_blocks, usable - result.free_blocks_after_schedule)
        if observe is not None:
            observe(result, scheduler, arrived)
        for request_id in result.finished:
            # Keep only the outcome: a finished request's tokens are not kept.
            outcomes[request_id] = _outcome(live.pop(request_id), arrival_steps[request_id])
        more_arrivals = step < last_arrival
        step += 1
        if scheduler.is_stalled(result, more_arrivals):
            stalled = True
            break
    for unfinished in live.values():
        outcomes[unfinished.request_id] = _outcome(unfinished, arrival_steps[unfinished.request_id])
    totals = scheduler.prefix_cache_stats
    return ReplaySummary(
        config=trace.config,
        num_steps=step,
        stalled=stalled,
        num_finished=sum(1 for o in outcomes.values() if o.finish_step is not None),
        num_requests=len(trace.requests),
        total_preemptions=scheduler.total_preemptions,
        prefix_cache_queries=totals.queries,
        prefix_cache_hits=totals.hits,
        prefix_cache_hit_rate=totals.hit_rate,
        preempted_queries=totals.preempted_queries,
        preempted_hits=totals.preempted_hits,
        max_used_blocks=max_used_blocks,
        # Every request has arrived: a run ends (or stalls) only after the last arrival step.
        requests={r.request_id: outcomes[r.request_id] for r in trace.requests},
    )


def _outcome(request: Request, arrival_step: int) -> RequestOutcome:
    return RequestOutcome(
        arrival_step=arrival_step,
        first_scheduled_step=request.first_scheduled_step,
        finish_step=request.finish_step,
        num_preemptions=request.num_preemptions,
        num_cached_tokens=request.num_cached_tokens,
    )

