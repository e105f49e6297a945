"""`kvplan fit`'s search, in two rounds through an executor.

1. Plan (exact, cheap). One task per planning group (a GPU, TP, PP, KV dtype, max_num_seqs and
   max_num_batched_tokens): its max_model_len candidates from the longest, and for each its KV
   memory points (utilizations or byte counts) by bisection, since more KV memory never turns a
   fitting configuration into one that does not fit. Points below the boundary are decided without
   a plan; a shorter max_model_len is not tried once a longer one fits (it runs the same traffic
   identically and only refuses more).
2. Simulate (estimates), only what fits: the workload at its rate, judged against the objectives
   and for bounded queueing, then the highest rate that still passes (doubling then bisection).

The executor runs the tasks of each round in parallel; everything they take and give is frozen
data."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, replace
from itertools import product

from kvplan.errors import KvplanError
from kvplan.semantics.engine.args import SCHEDULES, WORKLOADS, EngineArgs, named
from kvplan.semantics.kv.sizing import kv_capacity, sizing_limits
from kvplan.units import format_gib
from kvplan.usecases.configuration import Configuration
from kvplan.usecases.executors import Executor, Outcome, guarded
from kvplan.usecases.fit.request import SEARCHED, FitRequest, SearchSpace, SloBound, format_seconds
from kvplan.usecases.fit.result import (
    FitConfiguration,
    FitCounts,
    FitResult,
    PlannedPoint,
    PointStatus,
    RateCheck,
    RejectedFamily,
    RejectReason,
)
from kvplan.usecases.plan import PlanRequest, distinct_weights_warnings, settle
from kvplan.usecases.simulate.capacity_search import highest_passing, sustained
from kvplan.usecases.simulate.driver import run
from kvplan.usecases.simulate.workload import Workload, plan_conversations

# halvings below the workload's rate before a configuration is said to miss the objectives at any rate
DOWNWARD_STEPS = 4
UPWARD_STEPS = 12

Progress = Callable[[str, int, int], None]   # (round, done, total)


# ---------------------------------------------------------------------------- the traffic


def nominal_rate(workload: Workload) -> float:
    """The workload's offered rate (requests/s); fit scales arrivals from it."""
    if workload.is_explicit or workload.arrival is None:
        raise KvplanError(f"{workload.name}: kvplan fit needs a request mix (classes and arrival), not a request list")
    rate = workload.arrival.nominal_rate
    if rate is None:
        raise KvplanError(f"{workload.name}: arrival process {workload.arrival.process!r} has no rate to scale; "
                          "use poisson, constant, bursts or timestamps")
    return rate


def longest_request(workload: Workload, seed: int) -> int:
    """Prompt plus output tokens of the workload's longest request (a later turn holds the whole
    conversation before it)."""
    longest = 0
    for plan in plan_conversations(workload, seed):
        shared = workload.classes[plan.class_index].shared_prefix
        position = shared.tokens if shared is not None else 0
        for turn in plan.turns:
            position += turn.user_tokens + turn.output_tokens
            longest = max(longest, position)
    return longest


def length_candidates(request: FitRequest, seed: int) -> tuple[tuple[int | None, ...], int | None]:
    """max_model_len candidates, longest first (None: the model's own limit), and the length the
    traffic needs."""
    needs = []
    if request.workload is not None:
        needs.append(longest_request(request.workload, seed))
    if request.concurrency is not None:
        needs.append(request.concurrency.tokens)
    need = max(needs) if needs else None
    given = request.space.values("max_model_len")
    if given:
        usable = tuple(sorted((length for length in given if need is None or length >= need), reverse=True))
        if not usable:
            raise KvplanError(f"--max-model-len: every value is shorter than the {need:,} tokens the traffic needs")
        return usable, need
    if need is None:
        return (None,), None
    # the model's limit (vLLM's default), else the shortest power of two that holds the traffic
    limit = settle(PlanRequest(args=EngineArgs(model=request.model, trust_remote_code=request.trust_remote_code),
                               release=request.release)).max_model_len
    shorter = 1 << (need - 1).bit_length()
    return ((None, shorter) if shorter < limit else (None,)), need


# ---------------------------------------------------------------------------- round 1: plan


@dataclass(frozen=True)
class PlanGroup:
    """The configurations of one planning group: `base` with each length and memory point."""

    base: Configuration
    lengths: tuple[int | None, ...]              # longest first
    utilizations: tuple[float | None, ...]       # ascending (empty when memories are given)
    memories: tuple[int, ...]                    # ascending KV bytes per GPU
    concurrency: tuple[int, int] | None          # (requests, tokens)

    def point(self, length: int | None, index: int) -> Configuration:
        if self.memories:
            return self.base.with_args(max_model_len=length, kv_cache_memory_bytes=self.memories[index])
        return self.base.with_args(max_model_len=length, gpu_memory_utilization=self.utilizations[index])

    @property
    def size(self) -> int:
        return len(self.memories) or len(self.utilizations)


@dataclass(frozen=True)
class GroupPlan:
    points: tuple[PlannedPoint, ...]             # one per memory point, at the length kept
    planned: int
    skipped_lengths: int
    profile_runs: int


def plan_point(configuration: Configuration, concurrency: tuple[int, int] | None) -> PlannedPoint:
    """`kvplan plan` for one configuration, and whether it holds the concurrency goal."""
    from kvplan.usecases.planner import process_planner

    try:
        result = process_planner().plan(configuration.plan_request())
    except KvplanError as error:
        return PlannedPoint(configuration, "refused", reason=str(error))
    summary = result.summary
    planned = PlannedPoint(
        configuration.settled(summary), "fits", kv_cache_memory_bytes=result.kv_cache_memory_bytes,
        memory_source=result.memory_source, weights_per_gpu_bytes=summary.weights_per_gpu_bytes,
        weights_warning=result.weights_warning)
    if not result.fits or result.kv_config is None:
        fix = result.suggested_fix
        return replace(planned, status="does_not_fit",
                       reason=(summary.error or "does not fit") + (f"; {fix}" if fix else ""))
    device, weights, given = (result.setup.device.total_bytes, summary.weights_per_gpu_bytes,
                              configuration.args.kv_cache_memory_bytes)
    if given is not None and device and weights is not None and weights + given > device:
        # vLLM trusts --kv-cache-memory-bytes; the weights and the cache alone overflow this GPU
        return replace(planned, status="does_not_fit", reason=(
            f"the weights ({format_gib(weights)} GiB per GPU) and the KV cache ({format_gib(given)} GiB) need more "
            f"than the GPU's {format_gib(device)} GiB"))
    planned = replace(planned, num_gpu_blocks=summary.num_blocks, kv_cache_tokens=summary.gpu_kv_cache_tokens,
                      max_concurrency=summary.max_concurrency)
    if concurrency is None:
        return planned
    requests, tokens = concurrency
    limits = sizing_limits(tokens, summary.max_num_batched_tokens, configuration.value("pipeline_parallel_size"),
                           release=configuration.release)
    _, at_target = kv_capacity(result.kv_config, limits, configuration.release)
    planned = replace(planned, concurrency_at_target=at_target)
    if at_target < requests:
        return replace(planned, status="short_of_concurrency",
                       reason=f"holds {at_target:.2f} requests of {tokens:,} tokens, not {requests:,}")
    if summary.max_num_seqs < requests:
        return replace(planned, status="short_of_concurrency",
                       reason=f"max_num_seqs {summary.max_num_seqs} runs fewer than {requests:,} requests at once")
    return planned


def plan_group(group: PlanGroup) -> GroupPlan:
    from kvplan.usecases.planner import process_planner

    runs_before = process_planner().profile_runs
    planned = 0
    last: tuple[PlannedPoint, ...] = ()
    for tried, length in enumerate(group.lengths):
        made: dict[int, PlannedPoint] = {}

        def judge(index: int, length: int | None = length, made: dict[int, PlannedPoint] = made) -> PlannedPoint:
            nonlocal planned
            if index not in made:
                planned += 1
                made[index] = plan_point(group.point(length, index), group.concurrency)
            return made[index]

        top = group.size - 1
        if judge(top).meets_memory:
            low, high = -1, top                   # low does not meet (or is below the list), high meets
            while high - low > 1:
                middle = (low + high) // 2
                if judge(middle).meets_memory:
                    high = middle
                else:
                    low = middle
            points = tuple(judge(index) if index >= high or index in made else _inferred(made, index)
                           for index in range(group.size))
            return GroupPlan(points, planned, len(group.lengths) - tried - 1,
                             process_planner().profile_runs - runs_before)
        last = tuple(made[index] if index in made else _inferred(made, index)
                     for index in range(group.size))
    return GroupPlan(last, planned, 0, process_planner().profile_runs - runs_before)


def plan_groups(groups: tuple[PlanGroup, ...]) -> tuple[GroupPlan, ...]:
    """Several groups in one task (and one process, whose planner keeps the profile run)."""
    return tuple(plan_group(group) for group in groups)


# bundles (one profile run each) per planning task, at least: a process's first profile run imports
# torch, about 2 s of CPU, and each run after it in the same process costs about 0.1 s for an 8B
# model, so a task per bundle made every worker of a small search pay the import for one run
# (docs/fit.md, "How the search prunes", 1: one profile run per task's bundle either way)
BUNDLES_PER_PLAN_TASK = 4


def _plan_tasks(bundles: list[tuple[PlanGroup, ...]], workers: int) -> list[tuple[tuple[PlanGroup, ...], ...]]:
    """The bundles in as many tasks as the workers run at once, but no more than one per
    BUNDLES_PER_PLAN_TASK bundles; each task a consecutive run of bundles, so the groups keep
    their order."""
    count = max(1, min(workers, math.ceil(len(bundles) / BUNDLES_PER_PLAN_TASK)))
    return [tuple(bundles[i * len(bundles) // count: (i + 1) * len(bundles) // count]) for i in range(count)]


def plan_bundles(bundles: tuple[tuple[PlanGroup, ...], ...]) -> tuple[Outcome[tuple[GroupPlan, ...]], ...]:
    """Several bundles in one task, each guarded on its own: a crash on one bundle fails its
    groups only, as when each bundle was a task of its own."""
    return tuple(guarded(plan_groups, index, bundle) for index, bundle in enumerate(bundles))


def _profile_key(base: Configuration) -> tuple[object, ...]:
    args = base.args
    return (base.gpu, args.tensor_parallel_size, args.pipeline_parallel_size, args.max_num_seqs,
            args.max_num_batched_tokens)


def _inferred(made: dict[int, PlannedPoint], index: int) -> PlannedPoint:
    """A point below one that was planned and failed: it has less KV memory, so it fails too."""
    above = min(i for i in made if i > index and not made[i].meets_memory)
    source = made[above]
    configuration = source.configuration
    return replace(source, configuration=configuration, inferred=True,
                   reason=f"less KV memory than a configuration that already fails ({source.reason})",
                   kv_cache_memory_bytes=None, num_gpu_blocks=None, kv_cache_tokens=None, max_concurrency=None,
                   concurrency_at_target=None)


# ---------------------------------------------------------------------------- round 2: simulate


@dataclass(frozen=True)
class RateTask:
    point: PlannedPoint
    workload: Workload
    base_factor: float                 # the requested rate over the workload's own
    nominal_rate: float
    slo: tuple[SloBound, ...]
    precision: float
    seed: int | None


@dataclass(frozen=True)
class _Trial:
    passes: bool
    sustained: bool
    stalled: bool
    values: tuple[tuple[str, float | None], ...]
    missed: tuple[str, ...]
    ttft_p95_s: float | None
    tpot_p95_s: float | None
    preemptions: int
    num_requests: int
    num_finished: int


def check_rates(task: RateTask) -> RateCheck:
    """The workload on one configuration: the objectives at its rate, then the highest rate that
    passes them (upwards from a pass, downwards from a miss)."""
    point = task.point
    setup = point.configuration.prepare(task.workload, kv_cache_memory_bytes=point.kv_cache_memory_bytes,
                                        seed=task.seed)
    trials: dict[float, _Trial] = {}

    def trial(factor: float) -> bool:
        if factor not in trials:
            outcome = run(setup, rate_factor=task.base_factor * factor)
            metrics = outcome.metrics
            held, _, _ = sustained(outcome)
            values = tuple((bound.key, bound.value(metrics)) for bound in task.slo)
            missed = tuple(_missed(bound, value) for bound, (_, value) in zip(task.slo, values, strict=True)
                           if not bound.met(value))
            if not held:
                missed += ("queueing grows over the run (more arrivals than the engine serves)",)
            ttft = metrics.latency.ttft_s_estimate
            tpot = metrics.latency.tpot_s_estimate
            trials[factor] = _Trial(
                passes=held and not missed, sustained=held, stalled=metrics.stalled, values=values, missed=missed,
                ttft_p95_s=None if ttft is None else ttft.p95, tpot_p95_s=None if tpot is None else tpot.p95,
                preemptions=metrics.preemptions.total, num_requests=metrics.num_requests,
                num_finished=metrics.num_finished)
        return trials[factor].passes

    low, high = highest_passing(trial, steps=UPWARD_STEPS if trial(1.0) else DOWNWARD_STEPS,
                                precision=task.precision)
    at_rate = trials[1.0]
    rate = task.nominal_rate * task.base_factor
    return RateCheck(
        rate=rate, meets=at_rate.passes, figures=at_rate.values, missed=at_rate.missed,
        ttft_p95_s=at_rate.ttft_p95_s, tpot_p95_s=at_rate.tpot_p95_s, preemptions=at_rate.preemptions,
        sustained=at_rate.sustained, stalled=at_rate.stalled, num_requests=at_rate.num_requests,
        num_finished=at_rate.num_finished,
        max_sustained_rate=None if low is None else rate * low, max_rate_bounded=high is not None,
        lowest_rate_tried=rate * min(trials), runs=len(trials),
        step_time_method=setup.timer.method if setup.timer is not None else None,
    )


def _missed(bound: SloBound, value: float | None) -> str:
    if value is None:
        return f"{bound.key}: no figure (no request finished)"
    shown = format_seconds(value) if bound.is_latency else f"{value:g}"
    return f"{bound.key} {shown} > {bound.limit_text}"


# ---------------------------------------------------------------------------- the whole search


# the engine arguments whose lists multiply into the groups of configurations planned together: every
# list fit searches but the memory points and lengths, which are tried within a group
WITHIN_GROUP = ("gpu_memory_utilization", "kv_cache_memory_bytes", "max_model_len")
AXES = tuple(name for name in SEARCHED if name not in WITHIN_GROUP)


def search_size(request: FitRequest) -> int:
    """The configurations the search plans at most: every combination of the axes, each
    max_model_len candidate (two when none is given: the model's limit and the traffic's)."""
    space = request.space
    count = 1
    for axis in (space.gpus, *(space.values(name) for name in AXES)):
        count *= max(1, len(axis))
    return count * max(1, space.memory_points) * (len(space.values("max_model_len")) or 2)


def workload_requests(workload: Workload, rate_factor: float = 1.0) -> int:
    """About how many requests (conversations) one run of the workload at this rate simulates."""
    arrival = workload.arrival
    if workload.is_explicit or arrival is None:
        return len(workload.requests)
    if arrival.count is not None:
        return arrival.count
    if arrival.times_s:
        return len(arrival.times_s)
    rate = arrival.nominal_rate or 0.0
    return int(rate * rate_factor * (arrival.duration_s or 0.0)) + 1


def check_search_size(request: FitRequest) -> None:
    """Refuse, before any work, a search past the caps (one line saying how to narrow or lift them)."""
    size = search_size(request)
    if size > request.max_configurations:
        raise KvplanError(
            f"the search holds {size:,} configurations (the product of the lists of --gpus, --tp, --pp, "
            "--kv-cache-dtype, the memory points, --max-num-seqs, --max-num-batched-tokens and --max-model-len), "
            f"more than the {request.max_configurations:,} fit searches unless told: give shorter lists, or "
            "--max-configurations N to search them all")
    if request.workload is not None:
        nominal = request.workload.arrival.nominal_rate if request.workload.arrival is not None else None
        factor = request.rate / nominal if request.rate is not None and nominal else 1.0
        requests = workload_requests(request.workload, factor)
        if requests > request.max_requests:
            raise KvplanError(
                f"{request.workload.name}: about {requests:,} requests per run, and fit simulates every configuration "
                f"that fits a dozen times: more than the {request.max_requests:,} requests it simulates unless told; "
                "give a shorter workload (arrival.count or duration_s), or --max-requests N")


def fit(request: FitRequest, executor: Executor, progress: Progress | None = None) -> FitResult:
    """Search the space; see the module's docstring."""
    check_search_size(request)
    space = request.space
    if not space.gpus:
        raise KvplanError("--gpus: give at least one GPU of `kvplan gpus`")
    if request.workload is None and request.concurrency is None:
        raise KvplanError("give the traffic: --workload W.json, --concurrency REQUESTS@TOKENS, or both")
    if request.slo and request.workload is None:
        raise KvplanError("--slo needs --workload: the objectives are judged by simulating its traffic")
    if request.rate is not None and request.workload is None:
        raise KvplanError("--rate scales a workload's arrivals: give --workload too")
    missing = [gpu for gpu in space.gpus if request.prices and request.price_of(gpu) is None]
    if missing:
        raise KvplanError(f"--price: no price for {', '.join(missing)}; give one for every GPU of --gpus "
                          "(kvplan has no prices of its own)")
    request = _with_workload_defaults(request)
    space = request.space
    nominal = nominal_rate(request.workload) if request.workload is not None else 0.0
    seed = request.seed if request.seed is not None else (request.workload.seed if request.workload else 0)
    lengths, need = length_candidates(request, seed)
    notes = [*request.notes, *filter(None, [_memory_note(request)])]
    if need is not None:
        notes.append(f"the longest request of the traffic is {need:,} tokens; max_model_len is the longest "
                     "candidate that fits: " + ", ".join("the model's limit" if length is None else f"{length:,}"
                                                         for length in lengths))

    groups = _groups(request, lengths)
    # one bundle per profile run: the groups that differ only in KV dtype share their non-KV memory
    bundles: dict[tuple[object, ...], list[PlanGroup]] = {}
    for group in groups:
        bundles.setdefault(_profile_key(group.base), []).append(group)
    tasks = _plan_tasks([tuple(bundle) for bundle in bundles.values()], executor.workers)
    say = progress or (lambda _round, _done, _total: None)
    say("planning", 0, len(tasks))
    done = [0]

    def planned_one(_outcome: Outcome[tuple[Outcome[tuple[GroupPlan, ...]], ...]]) -> None:
        done[0] += 1
        say("planning", done[0], len(tasks))

    points: list[PlannedPoint] = []
    planned = skipped = profile_runs = 0
    for task, task_outcome in zip(tasks, executor.map(plan_bundles, tasks, on_outcome=planned_one), strict=True):
        # a worker that died fails every bundle of its task; a bundle that raised, only itself
        outcomes: tuple[Outcome[tuple[GroupPlan, ...]], ...] = (
            task_outcome.value if task_outcome.value is not None
            else tuple(Outcome(i, None, task_outcome.error, task_outcome.crashed) for i in range(len(task))))
        for bundle, outcome in zip(task, outcomes, strict=True):
            for index, group in enumerate(bundle):
                if outcome.value is None:
                    status: PointStatus = "failed" if outcome.crashed else "refused"
                    points.extend(PlannedPoint(group.point(lengths[-1], i), status, reason=outcome.error)
                                  for i in range(group.size))
                    continue
                plan = outcome.value[index]
                points.extend(plan.points)
                planned += plan.planned
                skipped += plan.skipped_lengths * group.size
                profile_runs += plan.profile_runs

    checks: dict[int, RateCheck | str] = {}
    runs = 0
    if request.workload is not None:
        base = request.rate / nominal if request.rate is not None else 1.0
        fitting = [index for index, point in enumerate(points) if point.meets_memory]
        rate_tasks = [RateTask(points[index], request.workload, base, nominal, request.slo, request.rate_precision,
                               seed) for index in fitting]
        say("simulating", 0, len(rate_tasks))
        done[0] = 0

        def simulated_one(_outcome: Outcome[RateCheck]) -> None:
            done[0] += 1
            say("simulating", done[0], len(rate_tasks))

        checked_all = executor.map(check_rates, rate_tasks, on_outcome=simulated_one)
        for index, checked in zip(fitting, checked_all, strict=True):
            checks[index] = checked.value if checked.value is not None else str(checked.error)
            runs += checked.value.runs if checked.value is not None else 0

    configurations, rejected, ranked_by = _assemble(request, points, checks)
    total = len(groups) * len(lengths) * space.memory_points
    counts = FitCounts(
        configurations=total, planned=planned, inferred=sum(1 for p in points if p.inferred), skipped_lengths=skipped,
        profile_runs=profile_runs, simulated=len(checks), simulation_runs=runs,
    )
    weights_warnings = distinct_weights_warnings(point.weights_warning for point in points)
    return FitResult(request, configurations, rejected, counts, ranked_by, executor.name, executor.workers,
                     tuple(notes), weights_warnings)


# the workload's own engine settings that stand in for what fit's command line leaves out: the lists fit
# searches (max_num_seqs, max_num_batched_tokens, max_model_len, gpu_memory_utilization), and the one value of
# what it searches no list of (mamba_ssm_cache_dtype; the scheduler's others reach every configuration with
# the workload's engine, `Configuration.with_workload_settings`); not its KV memory, which is one GPU's
_GPUS_OWN = "kv_cache_memory_bytes"
_LISTS_FROM_WORKLOAD = tuple(name for name in SEARCHED if name in named(SCHEDULES, WORKLOADS) and name != _GPUS_OWN)
_FIXED_FROM_WORKLOAD = tuple(name for name in named(WORKLOADS) if name not in SEARCHED)


def _memory_listed(space: SearchSpace) -> bool:
    """Whether the search is given the KV memory's lists: utilizations or KV-cache bytes."""
    listed = dict(space.lists)
    return "gpu_memory_utilization" in listed or _GPUS_OWN in listed


def _with_workload_defaults(request: FitRequest) -> FitRequest:
    """The workload's own engine settings where the command line leaves them out."""
    settings = request.workload.engine.args.given() if request.workload is not None else {}
    listed = dict(request.space.lists)
    lists = {name: (settings[name],) for name in _LISTS_FROM_WORKLOAD if name in settings and name not in listed
             and not (name == "gpu_memory_utilization" and _memory_listed(request.space))}
    fixed = {name: settings[name] for name in _FIXED_FROM_WORKLOAD
             if name in settings and getattr(request.fixed, name) is None}
    return replace(request, space=request.space.with_values(**lists), fixed=replace(request.fixed, **fixed))


def _memory_note(request: FitRequest) -> str | None:
    """Why the workload's engine.kv_cache_memory is not the KV memory of every GPU fit tries."""
    given = request.workload.engine.args.kv_cache_memory_bytes if request.workload is not None else None
    if given is None or _memory_listed(request.space):
        return None
    return (f"the workload's engine.kv_cache_memory ({format_gib(given)} GiB) is one GPU's KV memory: fit sizes each "
            "GPU's own; give --kv-cache-memory to try it")


def _groups(request: FitRequest, lengths: tuple[int | None, ...]) -> list[PlanGroup]:
    space = request.space
    concurrency = None if request.concurrency is None else (request.concurrency.requests,
                                                            request.concurrency.tokens)
    groups = []
    for gpu, *values in product(space.gpus, *(space.values(name) for name in AXES)):
        args = replace(request.fixed, **dict(zip(AXES, values, strict=True)), dtype=request.dtype,
                       trust_remote_code=request.trust_remote_code)
        base = Configuration(model=request.model, release=request.release, gpu=gpu, args=args,
                             step_time=request.step_time)
        if request.workload is not None:
            # max_model_len is the length search's; the workload's own is among its candidates
            base = base.with_workload_settings(request.workload).with_args(max_model_len=None)
        utilizations = tuple(sorted(space.values("gpu_memory_utilization"),
                                    key=lambda u: base.with_args(gpu_memory_utilization=u).utilization))
        groups.append(PlanGroup(base, lengths, () if space.values("kv_cache_memory_bytes") else utilizations,
                                tuple(sorted(space.values("kv_cache_memory_bytes"))), concurrency))
    return groups


def _assemble(request: FitRequest, points: list[PlannedPoint], checks: dict[int, RateCheck | str]
              ) -> tuple[tuple[FitConfiguration, ...], tuple[RejectedFamily, ...], str]:
    prices = bool(request.prices)
    passing: list[FitConfiguration] = []
    for index, point in enumerate(points):
        check = checks.get(index)
        if not point.meets_memory or isinstance(check, str):
            continue
        copies = replicas_for(check) if request.workload is not None else 1
        if copies is None:
            continue
        configuration = point.configuration
        price = request.price_of(configuration.gpu or "")
        per_hour = None if price is None else price * configuration.num_gpus
        rate = None if check is None else check.max_sustained_rate
        gpu_hours = None if not rate else configuration.num_gpus * 1e6 / (rate * 3600)
        passing.append(FitConfiguration(
            point, check, per_hour, gpu_hours, None if gpu_hours is None or price is None else gpu_hours * price,
            pareto=False, replicas=copies))

    if request.workload is not None:
        # what the user pays for: the GPUs (or their price per hour) that serve the rate asked for, not
        # a setup's cost per request at the rate it could sustain if the traffic were that high
        ranked_by = "cost_per_hour_at_rate" if prices else "gpus_at_rate"

        def key(c: FitConfiguration) -> tuple[float, ...]:
            at_rate = c.cost_per_hour_at_rate if prices else float(c.gpus_at_rate)
            rate = c.check.max_sustained_rate if c.check and c.check.max_sustained_rate else 0.0
            per_million = c.cost_per_million_requests if prices else c.gpu_hours_per_million_requests
            return (at_rate if at_rate is not None else float("inf"), c.replicas,
                    per_million if per_million is not None else float("inf"), -rate)
    else:
        ranked_by = "cost_per_hour" if prices else "num_gpus"

        def key(c: FitConfiguration) -> tuple[float, ...]:
            hourly = c.cost_per_hour if prices and c.cost_per_hour is not None else float(c.configuration.num_gpus)
            return (hourly, -(c.point.concurrency_at_target or 0.0))

    passing.sort(key=key)
    front = _pareto(passing, prices)
    ranked = tuple(replace(c, pareto=i in front) for i, c in enumerate(passing))
    return ranked, _rejected(request, points, checks, {_family(c.configuration) for c in ranked}), ranked_by


def replicas_for(check: RateCheck | None) -> int | None:
    """How many copies of a configuration serve the asked rate: 1 when it keeps the objectives at
    that rate, else enough that each copy's share (rate / copies) is at most the highest rate it
    sustains with them; None when it keeps them at no rate tried."""
    if check is None:
        return None
    if check.meets:
        return 1
    if not check.max_sustained_rate or check.max_sustained_rate <= 0:
        return None
    return max(2, math.ceil(check.rate / check.max_sustained_rate - 1e-9))


def _capacity(c: FitConfiguration) -> float:
    if c.check is not None:
        return c.check.max_sustained_rate or 0.0
    return c.point.concurrency_at_target or 0.0


def _pareto(configurations: list[FitConfiguration], prices: bool) -> set[int]:
    """Indices of the configurations no other beats on both hourly cost (GPUs without prices) and
    capacity (sustained rate, else concurrency)."""
    def hourly(c: FitConfiguration) -> float:
        return c.cost_per_hour if prices and c.cost_per_hour is not None else float(c.configuration.num_gpus)

    front = set()
    for i, c in enumerate(configurations):
        dominated = any(hourly(o) <= hourly(c) and _capacity(o) >= _capacity(c)
                        and (hourly(o) < hourly(c) or _capacity(o) > _capacity(c))
                        for o in configurations if o is not c)
        if not dominated:
            front.add(i)
    return front


def _family(configuration: Configuration) -> tuple[str, int, int, str]:
    return (configuration.gpu or "", configuration.value("tensor_parallel_size"),
            configuration.value("pipeline_parallel_size"), configuration.value("kv_cache_dtype"))


def _rejected(request: FitRequest, points: list[PlannedPoint], checks: dict[int, RateCheck | str],
              served: set[tuple[str, int, int, str]]) -> tuple[RejectedFamily, ...]:
    families: dict[tuple[str, int, int, str], list[int]] = {}
    for index, point in enumerate(points):
        families.setdefault(_family(point.configuration), []).append(index)
    rejected = []
    for family, indices in families.items():
        if family in served:
            continue
        rejected.append(_why(request, family, [(points[i], checks.get(i)) for i in indices]))
    order = {gpu: i for i, gpu in enumerate(request.space.gpus)}
    return tuple(sorted(rejected, key=lambda r: (r.cost_per_hour if r.cost_per_hour is not None else r.num_gpus,
                                                 r.num_gpus, order.get(r.gpu, 0), r.kv_cache_dtype)))


def _why(request: FitRequest, family: tuple[str, int, int, str],
         tried: list[tuple[PlannedPoint, RateCheck | str | None]]) -> RejectedFamily:
    gpu, tp, pp, kv_dtype = family
    price = request.price_of(gpu)
    reason: RejectReason
    simulated = [(p, c) for p, c in tried if isinstance(c, RateCheck)]
    failed_runs = [(p, c) for p, c in tried if isinstance(c, str)]
    check: RateCheck | None = None
    if simulated:
        point, check = max(simulated, key=lambda pc: (pc[1].max_sustained_rate or 0.0, -len(pc[1].missed)))
        reason = "slo_missed"
        detail = f"misses the objectives at {check.rate:.3g} req/s (est.): " + "; ".join(check.missed)
        if check.max_sustained_rate is not None:
            detail += f"; they hold up to {check.max_sustained_rate:.3g} req/s"
        else:
            detail += f"; missed at every rate tried, down to {check.lowest_rate_tried:.3g} req/s"
    elif failed_runs:
        point, error = failed_runs[0]
        reason, detail = "refused", f"the simulation refused it: {error}"
    elif any(p.status == "short_of_concurrency" for p, _ in tried):
        point = max((p for p, _ in tried if p.status == "short_of_concurrency"),
                    key=lambda p: p.concurrency_at_target or 0.0)
        reason, detail = "short_of_concurrency", str(point.reason)
    elif any(p.status == "does_not_fit" for p, _ in tried):
        planned = [p for p, _ in tried if p.status == "does_not_fit" and not p.inferred]
        point = planned[-1] if planned else next(p for p, _ in tried if p.status == "does_not_fit")
        reason, detail = "does_not_fit", str(point.reason)
    else:
        point = tried[0][0]
        reason, detail = ("failed" if point.status == "failed" else "refused"), str(point.reason)
    return RejectedFamily(gpu, tp, pp, kv_dtype, reason, detail, point, check,
                          None if price is None else price * tp * pp)
