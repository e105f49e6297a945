"""Arrival processes: when each conversation (or single request) of a workload arrives, in seconds.

``{"process": "poisson", "rate": 4.0, "count": 1000}``; processes are ``poisson`` and
``constant`` (a rate in requests per second), ``gamma`` (a rate and a ``burstiness``: gaps drawn
from a gamma distribution of shape ``burstiness``, as `vllm bench serve --burstiness`; 1 is
Poisson, below 1 burstier, above 1 more regular), ``bursts`` (``burst_size`` requests at once every
``interval_s``), ``all_at_once`` and ``timestamps`` (an explicit list ``times_s``). The rate
processes and bursts take either ``count`` or ``duration_s``. Times are generated from unit draws
and then divided by the rate, so scaling the rate (``--find-max-rate``) compresses the same
sequence of arrivals.

Every process takes ``max_concurrency``: a closed loop of that many clients, as `vllm bench serve
--max-concurrency` runs one. The process then says when each request becomes ready to send; a
client sends it once one of the N clients is free (each sends its next request when its previous
one has finished), so ``all_at_once`` with ``max_concurrency`` N is N clients that all start at
t=0 and send back to back.
"""

from __future__ import annotations

import math
import random
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from kvplan.parsing import (
    FieldError,
    as_int,
    as_list,
    as_number,
    as_object,
    child,
    get,
    reject_unknown,
)

PROCESSES = ("poisson", "constant", "gamma", "bursts", "all_at_once", "timestamps")
MAX_ARRIVALS = 10_000_000

_KEYS = {
    "poisson": ("rate", "count", "duration_s"),
    "constant": ("rate", "count", "duration_s"),
    "gamma": ("rate", "burstiness", "count", "duration_s"),
    "bursts": ("burst_size", "interval_s", "count", "duration_s"),
    "all_at_once": ("count",),
    "timestamps": ("times_s",),
}


@dataclass(frozen=True)
class ArrivalProcess:
    process: str
    rate: float | None = None  # requests per second (poisson, constant)
    burst_size: int | None = None
    interval_s: float | None = None
    count: int | None = None
    duration_s: float | None = None
    times_s: tuple[float, ...] = ()
    burstiness: float | None = None     # gamma: the shape of the gaps' distribution
    max_concurrency: int | None = None  # a closed loop of this many clients; None: an open loop

    @property
    def nominal_rate(self) -> float | None:
        """The offered load in arrivals per second, or None when it has none (all at once)."""
        if self.rate is not None:
            return self.rate
        if self.burst_size is not None and self.interval_s is not None:
            return self.burst_size / self.interval_s
        if len(self.times_s) > 1 and self.times_s[-1] > self.times_s[0]:
            return (len(self.times_s) - 1) / (self.times_s[-1] - self.times_s[0])
        return None


def parse_arrival(raw: Any, path: str) -> ArrivalProcess:
    obj = as_object(raw, path)
    process = get(obj, "process", path, _process_name)
    reject_unknown(obj, path, ("process", *_KEYS[process], "max_concurrency"))
    clients = get(obj, "max_concurrency", path, as_int, None, minimum=1)
    return replace(_parse_process(obj, process, path), max_concurrency=clients)


def _parse_process(obj: Mapping[str, Any], process: str, path: str) -> ArrivalProcess:
    if process == "timestamps":
        times_path = child(path, "times_s")
        raw_times = as_list(obj.get("times_s"), times_path)
        times = [as_number(t, child(times_path, i), minimum=0) for i, t in enumerate(raw_times)]
        return ArrivalProcess(process, times_s=tuple(sorted(times)))
    if process == "all_at_once":
        return ArrivalProcess(process, count=get(obj, "count", path, as_int, minimum=1))

    count = get(obj, "count", path, as_int, None, minimum=1)
    duration = get(obj, "duration_s", path, as_number, None, positive=True)
    if (count is None) == (duration is None):
        raise FieldError(child(path, "count"), "give exactly one of count and duration_s")
    if process == "bursts":
        burst = get(obj, "burst_size", path, as_int, minimum=1)
        interval = get(obj, "interval_s", path, as_number, positive=True)
        expected = count if count is not None else math.ceil(duration / interval) * burst
        _check_size(expected, path)
        return ArrivalProcess(process, burst_size=burst, interval_s=interval, count=count, duration_s=duration)
    rate = get(obj, "rate", path, as_number, positive=True)
    if duration is not None:
        _check_size(rate * duration, path)
    burstiness = get(obj, "burstiness", path, as_number, positive=True) if process == "gamma" else None
    return ArrivalProcess(process, rate=rate, count=count, duration_s=duration, burstiness=burstiness)


def _check_size(expected: float, path: str) -> None:
    if expected > MAX_ARRIVALS:
        raise FieldError(path, f"about {expected:.0f} arrivals; at most {MAX_ARRIVALS:,} are supported")


def _process_name(value: Any, path: str) -> str:
    if value not in PROCESSES:
        raise FieldError(path, f"unknown arrival process {value!r} (expected one of: {', '.join(PROCESSES)})")
    return value


def arrival_times(arrival: ArrivalProcess, rng: random.Random, rate_factor: float = 1.0) -> list[float]:
    """Arrival times in seconds, non-decreasing, with the offered rate multiplied by ``rate_factor``."""
    process = arrival.process
    if process == "all_at_once":
        return [0.0] * (arrival.count or 0)
    if process == "timestamps":
        return [t / rate_factor for t in arrival.times_s]
    if process == "bursts":
        assert arrival.burst_size is not None and arrival.interval_s is not None
        interval = arrival.interval_s / rate_factor
        if arrival.count is not None:
            return [(i // arrival.burst_size) * interval for i in range(arrival.count)]
        assert arrival.duration_s is not None
        bursts = math.ceil(arrival.duration_s / interval)
        return [b * interval for b in range(bursts) for _ in range(arrival.burst_size)]

    assert arrival.rate is not None
    rate = arrival.rate * rate_factor
    times: list[float] = []
    clock = 0.0
    while True:
        if process == "poisson":
            # an exponential gap from a unit draw; 1 - random() is never 0
            clock += -math.log(1.0 - rng.random()) / rate
        elif process == "gamma":
            # mean gap 1 / rate: shape k = burstiness, scale 1 / (rate k) (vLLM's get_request)
            assert arrival.burstiness is not None
            clock += rng.gammavariate(arrival.burstiness, 1.0) / (rate * arrival.burstiness)
        elif times:
            clock += 1.0 / rate
        if arrival.duration_s is not None and clock >= arrival.duration_s:
            return times
        times.append(clock)
        if arrival.count is not None and len(times) == arrival.count:
            return times
