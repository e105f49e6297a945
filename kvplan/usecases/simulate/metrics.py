"""What a simulation measures, accumulated step by step with memory that does not grow with steps.

The ``Recorder`` sees every scheduler step (``observe``) and every stretch of time in which
nothing changes (``hold``). It keeps per-request records (memory grows with requests, not steps),
a histogram of in-step block usage weighted by estimated time (or by steps when there is no time
model), running totals, and a bounded ``Downsampler`` series for charts. ``finish`` turns all of
that into frozen result dataclasses. Definitions are in ``docs/metrics.md``.
"""

from __future__ import annotations

import math
from array import array
from collections.abc import Callable
from dataclasses import dataclass, field

from kvplan.semantics.engine.groups import KVCacheGroup
from kvplan.semantics.engine.scheduler import StepResult
from kvplan.semantics.engine.stats import NO_LOOKUPS
from kvplan.semantics.kv.specs import KVCacheSpec
from kvplan.usecases.simulate.series import Downsampler, SeriesPoint
from kvplan.usecases.simulate.timing import StepLoad

SERIES_NAMES = ("used_blocks", "evictable_cached_blocks", "running", "waiting", "scheduled_tokens")


@dataclass(frozen=True, slots=True)
class TimelineRow:
    """One scheduler step as the timeline reports it (``--timeline``; columns in ``docs/metrics.md``).
    The time fields are None when no step-time model estimates seconds."""

    step: int
    start_s_estimate: float | None
    duration_s_estimate: float | None
    num_scheduled_tokens: int
    running: int
    waiting: int
    used_blocks_in_step: int
    num_used_blocks: int
    num_free_blocks: int
    num_evictable_cached_blocks: int
    num_cached_blocks: int
    arrived: int
    admitted: int
    resumed: int
    preempted: int
    finished: int
    prefix_queries: int
    prefix_hits: int
    preempted_queries: int
    preempted_hits: int


StepListener = Callable[[TimelineRow], None]


class RequestRecord:
    """One request's life, in steps and (estimated) seconds; ``computed`` mirrors the engine's count
    while the steps list the request (not while the engine advances it in bulk; it is restored
    when the request is listed again, `StepResult.rejoined`)."""

    __slots__ = (
        "arrival_step", "arrival_time", "cached_tokens", "class_index", "client_first_time", "client_last_time",
        "client_offset",
        "computed", "delivered", "finish_step", "finish_time", "first_scheduled_step", "first_scheduled_time",
        "first_token_step", "first_token_time", "lost", "max_tokens", "num_outputs", "ordinal",
        "preemptions", "prompt_tokens", "recomputed_tokens", "sent_time", "turn",
    )

    def __init__(self, class_index: int, prompt_tokens: int, max_tokens: int, num_outputs: int,
                 arrival_step: int, arrival_time: float | None, turn: int = 0) -> None:
        self.class_index = class_index
        self.turn = turn  # 0 for a single request or a conversation's first turn
        self.prompt_tokens = prompt_tokens
        self.max_tokens = max_tokens
        self.num_outputs = num_outputs  # tokens it will generate: max_tokens, or fewer at max_model_len
        self.arrival_step = arrival_step
        self.arrival_time = arrival_time
        self.first_scheduled_step: int | None = None
        self.first_scheduled_time: float | None = None
        self.first_token_step: int | None = None
        self.first_token_time: float | None = None
        self.finish_step: int | None = None
        self.finish_time: float | None = None
        self.cached_tokens: int | None = None
        self.computed = 0
        self.lost = 0
        self.preemptions = 0
        self.recomputed_tokens = 0
        # the client's view (a run with clients, `Recorder(clients=True)`): when the request was sent,
        # when its first and latest tokens reached the client, and how many did
        self.sent_time = arrival_time
        self.client_first_time: float | None = None
        self.client_last_time: float | None = None
        self.delivered = 0
        self.client_offset = 0.0    # its tokens reach the client this much later than streamed
        self.ordinal = -1       # the arrival it belongs to (the driver's conversation ordinal)


# ---------------------------------------------------------------------------- results


@dataclass(frozen=True)
class Summary:
    """count, mean and percentiles (linear interpolation between order statistics) of a sample."""

    count: int
    mean: float | None
    p50: float | None
    p95: float | None
    p99: float | None
    max: float | None


@dataclass(frozen=True)
class GroupUsage:
    """What one KV cache group holds of the shared pool, at the end of each step (its blocks in use;
    a block that several requests of the group share counts once)."""

    spec: type[KVCacheSpec]         # the group's type (`KVCacheGroup.spec`); outputs write its `kind`
    block_size: int | None
    sliding_window: int | None
    attention_chunk_size: int | None
    num_layers: int | None          # None when no plan says
    peak_used_blocks: int
    mean_used_blocks: float
    mean_share: float               # mean used blocks over the pool's usable blocks


@dataclass(frozen=True)
class KvUsage:
    usable_blocks: int
    block_size: int
    weighting: str  # "estimated seconds" or "steps"
    peak_used_blocks: int
    peak_usage: float
    mean_used_blocks: float
    p50_used_blocks: int
    p95_used_blocks: int
    p99_used_blocks: int
    mean_usage: float
    time_at_full_fraction: float
    mean_evictable_cached_blocks: float
    peak_cached_blocks: int
    # one entry per KV cache group when several share the pool (hybrid models); empty for one group
    groups: tuple[GroupUsage, ...] = ()


@dataclass(frozen=True)
class Preemptions:
    total: int
    requests_preempted: int
    requests_preempted_more_than_once: int
    max_per_request: int
    recomputed_tokens: int


@dataclass(frozen=True)
class PrefixCache:
    prefix_cache_queries: int
    prefix_cache_hits: int
    prefix_cache_hit_rate: float | None
    preempted_queries: int
    preempted_hits: int
    first_admission_prompt_tokens: int
    first_admission_hit_tokens: int
    first_admission_hit_rate: float | None


@dataclass(frozen=True)
class Latency:
    """Per-request latencies; ``*_s`` are estimates from the step-time model (None without one)."""

    queueing_steps: Summary
    ttft_steps: Summary
    tpot_steps: Summary
    e2e_steps: Summary
    queueing_s_estimate: Summary | None
    ttft_s_estimate: Summary | None
    tpot_s_estimate: Summary | None
    e2e_s_estimate: Summary | None


@dataclass(frozen=True)
class Throughput:
    num_steps: int
    duration_s_estimate: float | None
    requests_per_s_estimate: float | None
    output_tokens_per_s_estimate: float | None
    prompt_tokens_per_s_estimate: float | None
    output_tokens_per_step: float | None


@dataclass(frozen=True)
class Queues:
    weighting: str
    mean_running: float
    max_running: int
    mean_waiting: float
    max_waiting: int


@dataclass(frozen=True)
class ClassMetrics:
    name: str
    num_requests: int
    num_finished: int
    mean_prompt_tokens: float | None
    mean_output_tokens: float | None
    preemptions: int
    prefix_cache_queries: int
    prefix_cache_hits: int
    prefix_cache_hit_rate: float | None
    first_admission_hit_rate: float | None
    latency: Latency


@dataclass(frozen=True)
class RunMetrics:
    num_steps: int
    stalled: bool
    num_requests: int
    num_finished: int
    kv: KvUsage
    preemptions: Preemptions
    prefix_cache: PrefixCache
    queues: Queues
    latency: Latency
    throughput: Throughput
    classes: tuple[ClassMetrics, ...]
    series_bucket: float
    series: tuple[SeriesPoint, ...] = field(repr=False)
    latency_series: tuple[tuple[float, float | None, float | None], ...] = field(repr=False)


# ---------------------------------------------------------------------------- statistics


def percentile(ordered: list[float], q: float) -> float:
    """Linear interpolation between order statistics (numpy's default), ``ordered`` ascending."""
    position = (len(ordered) - 1) * q
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def summarize(values: list[float]) -> Summary:
    if not values:
        return Summary(0, None, None, None, None, None)
    ordered = sorted(values)
    return Summary(
        count=len(ordered),
        mean=math.fsum(ordered) / len(ordered),
        p50=percentile(ordered, 0.50),
        p95=percentile(ordered, 0.95),
        p99=percentile(ordered, 0.99),
        max=ordered[-1],
    )


def weighted_percentile(histogram: dict[int, float], q: float) -> int:
    """The smallest value whose cumulative weight reaches ``q`` of the total (inverted CDF)."""
    total = math.fsum(histogram.values())
    running = 0.0
    for value in sorted(histogram):
        running += histogram[value]
        if running >= q * total:
            return value
    return max(histogram)


def _ratio(numerator: float, denominator: float) -> float | None:
    return numerator / denominator if denominator else None


# ---------------------------------------------------------------------------- the recorder


class Recorder:
    """Accumulates one run. ``timed``: a step-time model exists, so seconds are estimated;
    ``on_step`` hears every step as a ``TimelineRow``."""

    def __init__(self, usable_blocks: int, block_size: int, class_names: tuple[str, ...], timed: bool,
                 on_step: StepListener | None = None, groups: tuple[KVCacheGroup, ...] = (),
                 layers_known: bool = False, clients: bool = False) -> None:
        self.groups = groups if len(groups) > 1 else ()
        # clients: follow every output token to the client (inter-token latencies, `deliver`)
        self.clients = clients
        self.emitting: list[RequestRecord] = []
        self.itl = array("d")
        # when tokens reached clients, and how many each time (vllm bench serve's peak output throughput)
        self.delivery_times = array("d")
        self.delivery_counts = array("q")
        self.layers_known = layers_known
        self.group_weighted = [0.0] * len(self.groups)
        self.group_peak = [0] * len(self.groups)
        self._last_groups: tuple[int, ...] = (0,) * len(self.groups)
        self.usable = usable_blocks
        self.block_size = block_size
        self.class_names = class_names
        self.timed = timed
        self.on_step = on_step
        self.records: dict[str, RequestRecord] = {}
        self.live: dict[str, RequestRecord] = {}
        self.used_histogram: dict[int, float] = {}
        self.total_weight = 0.0
        self.full_weight = 0.0
        self.evictable_weighted = 0.0
        self.running_weighted = 0.0
        self.waiting_weighted = 0.0
        self.max_running = 0
        self.max_waiting = 0
        self.peak_used = 0
        self.peak_cached = 0
        self.num_steps = 0
        self.total_preemptions = 0
        self.stats = [0, 0, 0, 0]  # queries, hits, preempted queries, preempted hits
        self.class_lookups = [[0, 0] for _ in class_names]
        self.end_time = 0.0
        self.series = Downsampler(SERIES_NAMES, first_width=1e-3 if timed else 1.0)
        self._last = (0.0, 0.0, 0.0, 0.0, 0.0)
        self._arrived = 0  # requests added since the last step, for the timeline

    def add_request(self, request_id: str, record: RequestRecord) -> None:
        self.records[request_id] = record
        self.live[request_id] = record
        self._arrived += 1

    def hold(self, start: float, end: float) -> None:
        """Nothing changes in ``[start, end)``: the state of the last step holds (idle or blocked)."""
        if end <= start:
            return
        used, evictable, running, waiting, _ = self._last
        self._weigh(int(used), evictable, int(running), int(waiting), end - start)
        self._weigh_groups(self._last_groups, end - start)
        self.series.add(start, end, (used, evictable, running, waiting, 0.0))
        self.end_time = max(self.end_time, end)

    def idle(self, first_step: int, count: int, start: float,
             step_seconds: Callable[[StepLoad], float] | None) -> float:
        """``count`` steps from ``first_step`` that find nothing waiting or running, accounted as
        ``count`` calls of ``observe`` would account them, at once; returns their duration."""
        duration = step_seconds(StepLoad(0, 0, 0)) if step_seconds is not None else 0.0
        used, evictable = self._last[0], self._last[1]
        weight = (duration if self.timed else 1.0) * count
        self.num_steps += count
        self._weigh(int(used), evictable, 0, 0, weight)
        series_start = start if self.timed else float(first_step)
        self.series.add(series_start, series_start + weight, (used, evictable, 0.0, 0.0, 0.0))
        self.end_time = max(self.end_time, start + duration * count)
        self._arrived = 0
        return duration * count

    def observe(self, result: StepResult, running: int, waiting: int, waiting_head: str | None,
                start: float, step_seconds: Callable[[StepLoad], float] | None) -> float:
        """Account one step that began at ``start``; returns its duration (0 without a time model)."""
        live = self.live
        if result.rejoined:
            # requests the engine advanced in bulk are listed again: their count of computed tokens
            for request_id, computed in result.rejoined.items():
                live[request_id].computed = computed
        for request_id in result.preempted:
            record = live[request_id]
            record.lost = record.computed
            record.computed = 0
            record.preemptions += 1
        self.total_preemptions += len(result.preempted)
        for request_id, hit in result.prefix_hit_tokens.items():
            record = live[request_id]
            record.computed = hit
            if record.first_scheduled_step is None:
                record.first_scheduled_step = result.step
                record.first_scheduled_time = start
                record.cached_tokens = hit
            else:
                record.recomputed_tokens += max(0, record.lost - hit)
        context = result.bulk_context_tokens
        # a request the engine advances in bulk decodes: its one query token attends its whole context
        pairs = result.bulk_context_tokens
        decodes = result.num_bulk_scheduled
        decode_context = result.bulk_context_tokens
        first_tokens: list[RequestRecord] = []
        emitting = self.emitting
        clients = self.clients
        for request_id, tokens in result.scheduled.items():
            record = live[request_id]
            computed = record.computed + tokens
            record.computed = computed
            context += computed
            # each of the step's new tokens attends every token up to itself
            pairs += tokens * computed - tokens * (tokens - 1) // 2
            if tokens == 1:
                decodes += 1
                decode_context += computed
            if computed >= record.prompt_tokens:
                if record.first_token_step is None:
                    record.first_token_step = result.step
                    first_tokens.append(record)
                if clients:
                    emitting.append(record)
        if result.prefix_cache is not NO_LOOKUPS:
            # (a step without lookups adds nothing: most steps)
            self._attribute_lookups(result, waiting_head)

        duration = 0.0
        # Async scheduling: a step that only waits for an earlier batch's output adds no time (that
        # batch's run is the earlier step's duration), and the tokens it delivers were known when
        # that run ended, which is when this step began.
        waits_only = result.output_of_earlier_batch and result.num_scheduled_tokens == 0
        if step_seconds is not None and not waits_only:
            duration = step_seconds(StepLoad(result.num_scheduled_tokens, context,
                                             len(result.scheduled) + result.num_bulk_scheduled, pairs,
                                             decodes, decode_context))
        end = start + duration
        for record in first_tokens:
            record.first_token_time = end
        finish_time = start if result.output_of_earlier_batch else end
        for request_id in result.finished:
            record = live.pop(request_id)
            record.finish_step = result.step
            record.finish_time = finish_time

        used = self.usable - result.free_blocks_after_schedule
        if used > self.peak_used:
            self.peak_used = used
        if result.num_cached_blocks > self.peak_cached:
            self.peak_cached = result.num_cached_blocks
        self.num_steps += 1
        weight = duration if self.timed else 1.0
        # `_weigh`, inline (once per step): the same sums in the same order
        evictable = result.num_evictable_cached_blocks
        histogram = self.used_histogram
        histogram[used] = histogram.get(used, 0.0) + weight
        self.total_weight += weight
        if used >= self.usable:
            self.full_weight += weight
        self.evictable_weighted += evictable * weight
        self.running_weighted += running * weight
        self.waiting_weighted += waiting * weight
        if running > self.max_running:
            self.max_running = running
        if waiting > self.max_waiting:
            self.max_waiting = waiting
        if self.groups:
            self._last_groups = result.num_used_blocks_by_group
            self._weigh_groups(self._last_groups, weight)
        series_start = start if self.timed else float(result.step)
        self.series.add(series_start, series_start + weight, (
            float(used), float(evictable), float(running), float(waiting),
            result.num_scheduled_tokens / weight if weight else 0.0))
        # after the step, finished requests' blocks are free: that is what holds until the next one
        self._last = (float(result.num_used_blocks), float(evictable),
                      float(running), float(waiting), 0.0)
        if end > self.end_time:
            self.end_time = end
        if self.on_step is not None:
            self.on_step(self._timeline_row(result, running, waiting, used, start, duration))
        self._arrived = 0
        return duration

    def deliver(self, produced: float, stream: Callable[[float, int], float] | None) -> list[RequestRecord]:
        """The tokens of the last observed step reach their clients (``stream``: when the front end
        has streamed that many tokens produced at ``produced``; None: at once). Returns the requests
        whose last token this was."""
        emitting = [r for r in self.emitting if r.delivered < r.num_outputs]
        self.emitting = []
        if not emitting:
            return []
        reached = produced if stream is None else stream(produced, len(emitting))
        self.delivery_times.append(reached)
        self.delivery_counts.append(len(emitting))
        done = []
        itl = self.itl
        for record in emitting:
            at = reached + record.client_offset
            if record.delivered == 0:
                record.client_first_time = at
            else:
                itl.append(at - record.client_last_time)  # type: ignore[operator]
            record.client_last_time = at
            record.delivered += 1
            if record.delivered == record.num_outputs:
                done.append(record)
        return done

    def _weigh(self, used: int, evictable: float, running: int, waiting: int, weight: float) -> None:
        self.used_histogram[used] = self.used_histogram.get(used, 0.0) + weight
        self.total_weight += weight
        if used >= self.usable:
            self.full_weight += weight
        self.evictable_weighted += evictable * weight
        self.running_weighted += running * weight
        self.waiting_weighted += waiting * weight
        self.max_running = max(self.max_running, running)
        self.max_waiting = max(self.max_waiting, waiting)

    def _weigh_groups(self, used_by_group: tuple[int, ...], weight: float) -> None:
        for group_id, used in enumerate(used_by_group[:len(self.groups)]):
            self.group_weighted[group_id] += used * weight
            self.group_peak[group_id] = max(self.group_peak[group_id], used)

    def _group_usage(self, total: float) -> tuple[GroupUsage, ...]:
        return tuple(
            GroupUsage(
                spec=group.spec, block_size=group.block_size, sliding_window=group.sliding_window,
                attention_chunk_size=group.attention_chunk_size,
                num_layers=group.num_layers if self.layers_known else None,
                peak_used_blocks=self.group_peak[group_id], mean_used_blocks=self.group_weighted[group_id] / total,
                mean_share=self.group_weighted[group_id] / total / self.usable,
            )
            for group_id, group in enumerate(self.groups)
        )

    def _attribute_lookups(self, result: StepResult, waiting_head: str | None) -> None:
        """Split this step's prefix-cache lookups by class, as vLLM counts them (every lookup).

        Lookups are made by the admitted and resumed requests and, when the head of the waiting
        queue could not be allocated, once more by that head: what the admitted requests do not
        account for belongs to it."""
        stats = result.prefix_cache
        self.stats[0] += stats.queries
        self.stats[1] += stats.hits
        self.stats[2] += stats.preempted_queries
        self.stats[3] += stats.preempted_hits
        if not stats.requests:
            return
        queries, hits = stats.queries, stats.hits
        for request_id in result.admitted:
            record = self.records[request_id]
            lookup = self.class_lookups[record.class_index]
            lookup[0] += record.prompt_tokens
            lookup[1] += result.prefix_hit_tokens[request_id]
            queries -= record.prompt_tokens
            hits -= result.prefix_hit_tokens[request_id]
        if stats.requests > len(result.admitted) and waiting_head is not None:
            lookup = self.class_lookups[self.records[waiting_head].class_index]
            lookup[0] += queries
            lookup[1] += hits

    def _timeline_row(self, result: StepResult, running: int, waiting: int, used: int,
                      start: float, duration: float) -> TimelineRow:
        stats = result.prefix_cache
        return TimelineRow(
            result.step, start if self.timed else None, duration if self.timed else None,
            result.num_scheduled_tokens, running, waiting, used,
            result.num_used_blocks, result.num_free_blocks, result.num_evictable_cached_blocks,
            result.num_cached_blocks, self._arrived, len(result.admitted), len(result.resumed), len(result.preempted),
            len(result.finished), stats.queries, stats.hits, stats.preempted_queries, stats.preempted_hits,
        )

    # ------------------------------------------------------------------------ results

    def finish(self, stalled: bool, first_arrival: float) -> RunMetrics:
        records = list(self.records.values())
        weighting = "estimated seconds" if self.timed else "steps"
        histogram = self.used_histogram or {0: 1.0}
        total = self.total_weight or 1.0
        mean_used = math.fsum(v * w for v, w in histogram.items()) / total if self.total_weight else 0.0
        kv = KvUsage(
            usable_blocks=self.usable,
            block_size=self.block_size,
            weighting=weighting,
            peak_used_blocks=self.peak_used,
            peak_usage=self.peak_used / self.usable,
            mean_used_blocks=mean_used,
            p50_used_blocks=weighted_percentile(histogram, 0.50),
            p95_used_blocks=weighted_percentile(histogram, 0.95),
            p99_used_blocks=weighted_percentile(histogram, 0.99),
            mean_usage=mean_used / self.usable,
            time_at_full_fraction=self.full_weight / total,
            mean_evictable_cached_blocks=self.evictable_weighted / total,
            peak_cached_blocks=self.peak_cached,
            groups=self._group_usage(total),
        )
        preempted = [r.preemptions for r in records if r.preemptions]
        preemptions = Preemptions(
            total=self.total_preemptions,
            requests_preempted=len(preempted),
            requests_preempted_more_than_once=sum(1 for p in preempted if p > 1),
            max_per_request=max(preempted, default=0),
            recomputed_tokens=sum(r.recomputed_tokens for r in records),
        )
        admitted = [r for r in records if r.cached_tokens is not None]
        first_prompt = sum(r.prompt_tokens for r in admitted)
        first_hits = sum(r.cached_tokens or 0 for r in admitted)
        queries, hits, preempted_queries, preempted_hits = self.stats
        prefix = PrefixCache(
            prefix_cache_queries=queries,
            prefix_cache_hits=hits,
            prefix_cache_hit_rate=_ratio(hits, queries),
            preempted_queries=preempted_queries,
            preempted_hits=preempted_hits,
            first_admission_prompt_tokens=first_prompt,
            first_admission_hit_tokens=first_hits,
            first_admission_hit_rate=_ratio(first_hits, first_prompt),
        )
        queues = Queues(
            weighting=weighting,
            mean_running=self.running_weighted / total,
            max_running=self.max_running,
            mean_waiting=self.waiting_weighted / total,
            max_waiting=self.max_waiting,
        )
        finished = [r for r in records if r.finish_step is not None]
        output_tokens = sum(r.num_outputs for r in finished)
        prompt_tokens = sum(r.prompt_tokens for r in finished)
        duration = (self.end_time - first_arrival) if self.timed else None
        throughput = Throughput(
            num_steps=self.num_steps,
            duration_s_estimate=duration,
            requests_per_s_estimate=_ratio(len(finished), duration) if duration else None,
            output_tokens_per_s_estimate=_ratio(output_tokens, duration) if duration else None,
            prompt_tokens_per_s_estimate=_ratio(prompt_tokens, duration) if duration else None,
            output_tokens_per_step=_ratio(output_tokens, self.num_steps),
        )
        classes = tuple(
            self._class_metrics(index, name, [r for r in records if r.class_index == index])
            for index, name in enumerate(self.class_names)
        )
        return RunMetrics(
            num_steps=self.num_steps,
            stalled=stalled,
            num_requests=len(records),
            num_finished=len(finished),
            kv=kv,
            preemptions=preemptions,
            prefix_cache=prefix,
            queues=queues,
            latency=self._latency(records),
            throughput=throughput,
            classes=classes,
            series_bucket=self.series.width,
            series=tuple(self.series.points()),
            latency_series=self._latency_series(records),
        )

    def _class_metrics(self, index: int, name: str, records: list[RequestRecord]) -> ClassMetrics:
        finished = [r for r in records if r.finish_step is not None]
        admitted = [r for r in records if r.cached_tokens is not None]
        queries, hits = self.class_lookups[index]
        return ClassMetrics(
            name=name,
            num_requests=len(records),
            num_finished=len(finished),
            mean_prompt_tokens=_ratio(sum(r.prompt_tokens for r in records), len(records)),
            mean_output_tokens=_ratio(sum(r.num_outputs for r in finished), len(finished)),
            preemptions=sum(r.preemptions for r in records),
            prefix_cache_queries=queries,
            prefix_cache_hits=hits,
            prefix_cache_hit_rate=_ratio(hits, queries),
            first_admission_hit_rate=_ratio(sum(r.cached_tokens or 0 for r in admitted),
                                            sum(r.prompt_tokens for r in admitted)),
            latency=self._latency(records),
        )

    def _latency(self, records: list[RequestRecord]) -> Latency:
        started = [r for r in records if r.first_scheduled_step is not None]
        first = [r for r in records if r.first_token_step is not None]
        finished = [r for r in records if r.finish_step is not None]
        multi = [r for r in finished if r.num_outputs > 1]
        steps = Latency(
            queueing_steps=summarize([r.first_scheduled_step - r.arrival_step for r in started]),  # type: ignore[operator]
            ttft_steps=summarize([r.first_token_step - r.arrival_step + 1 for r in first]),  # type: ignore[operator]
            tpot_steps=summarize([(r.finish_step - r.first_token_step) / (r.num_outputs - 1) for r in multi]),  # type: ignore[operator]
            e2e_steps=summarize([r.finish_step - r.arrival_step + 1 for r in finished]),  # type: ignore[operator]
            queueing_s_estimate=None, ttft_s_estimate=None, tpot_s_estimate=None, e2e_s_estimate=None,
        )
        if not self.timed:
            return steps
        return Latency(
            queueing_steps=steps.queueing_steps,
            ttft_steps=steps.ttft_steps,
            tpot_steps=steps.tpot_steps,
            e2e_steps=steps.e2e_steps,
            queueing_s_estimate=summarize([r.first_scheduled_time - r.arrival_time for r in started]),  # type: ignore[operator]
            ttft_s_estimate=summarize([r.first_token_time - r.arrival_time for r in first]),  # type: ignore[operator]
            tpot_s_estimate=summarize([(r.finish_time - r.first_token_time) / (r.num_outputs - 1) for r in multi]),  # type: ignore[operator]
            e2e_s_estimate=summarize([r.finish_time - r.arrival_time for r in finished]),  # type: ignore[operator]
        )

    def _latency_series(self, records: list[RequestRecord]) -> tuple[tuple[float, float | None, float | None], ...]:
        """Per series bucket of arrival: (bucket start, median TTFT, median end-to-end latency)."""
        width = self.series.width
        buckets: dict[int, tuple[list[float], list[float]]] = {}
        for record in records:
            if record.finish_step is None:
                continue
            if self.timed:
                arrival = record.arrival_time or 0.0
                ttft = record.first_token_time - arrival  # type: ignore[operator]
                e2e = record.finish_time - arrival  # type: ignore[operator]
            else:
                arrival = float(record.arrival_step)
                ttft = float(record.first_token_step - record.arrival_step + 1)  # type: ignore[operator]
                e2e = float(record.finish_step - record.arrival_step + 1)
            ttfts, e2es = buckets.setdefault(int(arrival // width), ([], []))
            ttfts.append(ttft)
            e2es.append(e2e)
        return tuple(
            (index * width, summarize(ttfts).p50, summarize(e2es).p50)
            for index, (ttfts, e2es) in sorted(buckets.items())
        )
