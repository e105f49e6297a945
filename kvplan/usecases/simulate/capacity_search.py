"""Capacity answers: the pool that would avoid every preemption, and the highest sustained rate.

* Blocks for zero preemptions: the peak in-step usage of the same workload on a pool that can
  never run out (every request the scheduler may run at once, at its full length), plus the null
  block: the pool this traffic needs to never preempt and never wait for KV cache. When the run
  itself was never short of blocks (no refusal, no prefix hit lost to an eviction), every larger
  pool runs the same steps, so its own peak is that answer; only otherwise does the workload run
  a second time, on the pool that never runs out.
* ``--find-max-rate``: the offered rate is scaled (the same arrivals, compressed or stretched)
  and each rate is simulated; a rate is sustained when queueing does not grow over the run
  (``sustained`` below). Doubling then bisection finds the highest sustained rate to 2%.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass

from kvplan.errors import KvplanError
from kvplan.semantics.kv.sizing import kv_cache_tokens
from kvplan.usecases.simulate.driver import PreparedWorkload, RunOutcome, request_block_sizes, run, with_pool

MAX_UNBOUNDED_POOL = 4_000_000  # blocks; a pool this large costs seconds and a GB of Python objects
MIN_REQUESTS_FOR_RATE = 8
SEARCH_STEPS = 16
PRECISION = 1.02
CRITERION = (
    "sustained: the run does not stall, every request finishes, and the mean queueing delay of the "
    "last quarter of arrivals is at most 1.5x that of the second quarter plus two mean step times "
    "(under overload it grows in proportion to the arrival time, about 2.3x); arrivals are the arrival process's "
    "(a conversation's later turns are not offered load, so they are not judged)"
)


@dataclass(frozen=True)
class ZeroPreemptionPool:
    num_gpu_blocks: int | None  # counts the null block, as engine.num_gpu_blocks does
    peak_used_blocks: int | None
    kv_tokens: int | None
    kv_bytes: int | None
    configured_is_enough: bool | None
    method: str


@dataclass(frozen=True)
class RateTrial:
    rate_rps_estimate: float
    sustained: bool
    stalled: bool
    early_queueing_s_estimate: float | None
    late_queueing_s_estimate: float | None


@dataclass(frozen=True)
class MaxRate:
    max_sustained_rate_rps_estimate: float | None
    nominal_rate_rps: float
    bounded_above: bool  # False when every rate tried was sustained (the answer is a lower bound)
    criterion: str
    trials: tuple[RateTrial, ...]


@dataclass(frozen=True)
class Capacity:
    zero_preemption: ZeroPreemptionPool
    max_rate: MaxRate | None


def answer_capacity(setup: PreparedWorkload, outcome: RunOutcome, *, find_max_rate: bool,
                    stage: Callable[[str], None] | None = None) -> Capacity:
    max_rate = search_max_rate(setup, stage) if find_max_rate else None
    return Capacity(zero_preemption_pool(setup, outcome, stage), max_rate)


def zero_preemption_pool(setup: PreparedWorkload, outcome: RunOutcome,
                         stage: Callable[[str], None] | None = None) -> ZeroPreemptionPool:
    config = setup.config
    sizes = sorted(request_block_sizes(setup), reverse=True)
    bound = sum(sizes[: config.max_num_seqs]) + 1
    if config.num_gpu_blocks >= bound:
        peak = outcome.metrics.kv.peak_used_blocks
        method = "the configured pool already holds every request it may run at once at full length"
    elif not outcome.pool_was_short:
        peak = outcome.metrics.kv.peak_used_blocks
        method = ("peak in-step usage of this run: the pool never refused a block nor lost a prefix hit to an "
                  "eviction, so a pool that never runs out runs the same steps")
    elif bound > MAX_UNBOUNDED_POOL:
        return ZeroPreemptionPool(None, None, None, None, None,
                                  f"not computed: a pool that never runs out needs {bound:,} blocks here")
    else:
        if stage is not None:
            stage(f"simulating again on a pool that never runs out ({bound:,} blocks)")
        peak = run(setup, config=with_pool(config, bound)).metrics.kv.peak_used_blocks
        method = f"peak in-step usage of the same workload on a pool that never runs out ({bound:,} blocks)"
    blocks = peak + 1   # the null block is part of every pool: plan and --num-gpu-blocks count it
    per_token = setup.kv_bytes_per_token
    # vLLM's "GPU KV cache size" of the advised pool (null block included): blocks per group times the
    # smallest block size
    tokens = kv_cache_tokens(blocks, [group.block_size or config.block_size for group in config.groups])
    return ZeroPreemptionPool(
        num_gpu_blocks=blocks,
        peak_used_blocks=peak,
        kv_tokens=tokens,
        kv_bytes=tokens * per_token if per_token is not None else None,
        configured_is_enough=config.num_gpu_blocks >= blocks,
        method=method,
    )


def _nominal_rate(setup: PreparedWorkload) -> float:
    if setup.in_steps:
        raise KvplanError("--find-max-rate needs arrivals in seconds (a request mix, or arrival_time in the "
                          "request list); this workload's arrivals are scheduler steps")
    if setup.workload.is_explicit:
        times = setup.explicit_times or ()
        span = (max(times) - min(times)) if times else 0.0
        if span <= 0:
            raise KvplanError("--find-max-rate: every request arrives at the same time, so there is no rate to scale")
        return (len(times) - 1) / span
    assert setup.workload.arrival is not None
    rate = setup.workload.arrival.nominal_rate
    if rate is None:
        raise KvplanError(f"--find-max-rate: the arrival process {setup.workload.arrival.process!r} has no rate to "
                          "scale; use poisson, constant, bursts or timestamps")
    return rate


def sustained(outcome: RunOutcome) -> tuple[bool, float | None, float | None]:
    """Whether queueing stayed bounded, with the second and last quarters' mean queueing delays."""
    if outcome.metrics.stalled or any(r.finish_time is None for r in outcome.records):
        return False, None, None
    records = sorted((r for r in outcome.records if r.turn == 0), key=lambda r: r.arrival_time or 0.0)
    count = len(records)
    if count < MIN_REQUESTS_FOR_RATE:
        raise KvplanError(f"--find-max-rate needs at least {MIN_REQUESTS_FOR_RATE} arrivals, the workload has {count}")
    second = records[count // 4: count // 2]
    last = records[3 * count // 4:]

    def queueing(record: object) -> float:
        return record.first_scheduled_time - record.arrival_time  # type: ignore[attr-defined]

    early = math.fsum(queueing(r) for r in second) / len(second)
    late = math.fsum(queueing(r) for r in last) / len(last)
    throughput = outcome.metrics.throughput
    mean_step = (throughput.duration_s_estimate or 0.0) / max(1, throughput.num_steps)
    return late <= 1.5 * early + 2 * mean_step, early, late


def search_max_rate(setup: PreparedWorkload, stage: Callable[[str], None] | None = None) -> MaxRate:
    nominal = _nominal_rate(setup)
    trials: list[RateTrial] = []
    verdicts: dict[float, bool] = {}

    def trial(factor: float) -> bool:
        if factor in verdicts:
            return verdicts[factor]
        if stage is not None:
            stage(f"--find-max-rate: trying {nominal * factor:.4g} requests/s")
        outcome = run(setup, rate_factor=factor)
        ok, early, late = sustained(outcome)
        trials.append(RateTrial(nominal * factor, ok, outcome.metrics.stalled, early, late))
        verdicts[factor] = ok
        return ok

    low, high = highest_passing(trial)
    return MaxRate(
        max_sustained_rate_rps_estimate=nominal * low if low is not None else None,
        nominal_rate_rps=nominal,
        bounded_above=high is not None,
        criterion=CRITERION,
        trials=tuple(sorted(trials, key=lambda t: t.rate_rps_estimate)),
    )


def highest_passing(trial: Callable[[float], bool], *, steps: int = SEARCH_STEPS,
                    precision: float = PRECISION) -> tuple[float | None, float | None]:
    """The highest rate factor for which ``trial`` passes, assuming it passes below some factor and
    fails above: from 1, doubling (or halving) until the verdict changes, then bisecting in log
    space until the bracket is within ``precision``. Returns (highest passing, lowest failing); None
    where the search found none within ``steps`` doublings or halvings."""
    low: float | None = None
    high: float | None = None
    if trial(1.0):
        low = 1.0
        for _ in range(steps):
            if not trial(low * 2):
                high = low * 2
                break
            low *= 2
    else:
        high = 1.0
        for _ in range(steps):
            if trial(high / 2):
                low = high / 2
                break
            high /= 2
    if low is not None and high is not None:
        while high / low > precision:
            middle = math.sqrt(low * high)
            if trial(middle):
                low = middle
            else:
                high = middle
    return low, high
