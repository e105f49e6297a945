"""The simulation driver: a workload through the engine's scheduler, step by step, into metrics.

Two front ends share the one engine. A request list timed in steps (the trace-replay format) runs
through ``kvplan.semantics.engine.replay.replay`` itself, so it gives the same per-step numbers as
``kvplan replay``. Everything timed in seconds (a request mix, ``arrival_time`` lists) runs
through ``_run_timed``: arrivals join the waiting queue at the first step that starts after
them, each step lasts what the step-time model estimates, the clock jumps over idle stretches,
and a multi-turn conversation's next turn arrives a think time after the previous one finished.
"""

from __future__ import annotations

import gc
import heapq
import math
from array import array
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from functools import cached_property

from kvplan.errors import KvplanError
from kvplan.limits import MAX_RECORDED_STEPS
from kvplan.parsing import FieldError, as_number
from kvplan.semantics.engine.config import EngineConfig
from kvplan.semantics.engine.replay import replay
from kvplan.semantics.engine.request import Request, as_token_array
from kvplan.semantics.engine.scheduler import ModelRunner, Scheduler, StepResult
from kvplan.semantics.engine.trace import (
    CONFIG_KEYS,
    PREFIX_TOKEN_BASE,
    TOKENS_PER_ID,
    Trace,
    TraceRequest,
    parse_trace,
)
from kvplan.semantics.kv.specs import MambaSpec
from kvplan.semantics.releases import Release
from kvplan.usecases.replay import bulk_decode, require_pool_memory
from kvplan.usecases.simulate.clients import Clients
from kvplan.usecases.simulate.engine_source import EngineOverrides, ResolvedEngine, resolve_engine
from kvplan.usecases.simulate.frontend import FrontEnd
from kvplan.usecases.simulate.metrics import Recorder, RequestRecord, RunMetrics, StepListener
from kvplan.usecases.simulate.timing import StepLoad, StepTimeModel, choose_step_time
from kvplan.usecases.simulate.workload import PlannedConversation, Workload, plan_conversations

# Conversation tokens: conversation c owns ids [BASE + c * STRIDE, BASE + (c + 1) * STRIDE), far
# above the trace format's prefix, unique and output ranges, so no two requests share a token by accident.
CONVERSATION_TOKEN_BASE = 10**12
CONVERSATION_TOKEN_STRIDE = 10**9
EXPLICIT_CLASS = "requests"

Progress = Callable[[int, int], None]


@dataclass(frozen=True)
class SimOptions:
    overrides: EngineOverrides = field(default_factory=EngineOverrides)
    seed: int | None = None
    step_time_ms: float | None = None
    # an engine resolved by the caller (`kvplan profile --workload`: the pool it allocated), in
    # place of the workload's engine section and the overrides
    engine: ResolvedEngine | None = None
    # None: the workload's engine.vllm_version, else the default release
    release: Release | None = None
    # the serving front end (None: the workload's timing.frontend, else none: engine latency only)
    frontend: FrontEnd | None = None
    # follow every output token to its client (inter-token latencies); implied by a front end or a closed loop
    clients: bool = False


@dataclass(frozen=True)
class PreparedWorkload:
    """Everything fixed before a run: the engine, the time model, and what arrives."""

    workload: Workload
    engine: ResolvedEngine
    timer: StepTimeModel | None
    seed: int
    class_names: tuple[str, ...]
    prefix_ids: tuple[int | None, ...]  # per class: index of its named shared prefix
    explicit: tuple[TraceRequest, ...]
    explicit_times: tuple[float, ...] | None
    notes: tuple[str, ...]
    frontend: FrontEnd | None = None
    clients: bool = False

    @property
    def config(self) -> EngineConfig:
        return self.engine.config

    @property
    def in_steps(self) -> bool:
        return self.workload.arrivals_in_steps

    @property
    def kv_bytes_per_token(self) -> int | None:
        """From the profile or plan, else from the timing section."""
        facts = self.engine.facts.kv_bytes_per_token
        return facts if facts is not None else self.workload.timing.kv_bytes_per_token

    @cached_property
    def conversations(self) -> list[PlannedConversation]:
        """The request mix's arrivals at the offered rate, drawn once: a run at that rate and the
        capacity bound (`request_block_sizes`) both read them, and a million of them take seconds
        to draw. Read only."""
        return plan_conversations(self.workload, self.seed)

    def conversations_at(self, rate_factor: float) -> list[PlannedConversation]:
        """The arrivals with the offered rate multiplied by `rate_factor` (drawn anew unless 1)."""
        return self.conversations if rate_factor == 1.0 else plan_conversations(self.workload, self.seed, rate_factor)


@dataclass(frozen=True)
class RunOutcome:
    metrics: RunMetrics
    records: tuple[RequestRecord, ...]  # in arrival order
    num_rejected: int
    num_conversations_cut: int
    # the pool refused an allocation or lost a prefix hit to an eviction (`Scheduler.pool_was_short`):
    # while False, a pool that never runs out would have run exactly the same steps
    pool_was_short: bool = True
    # with clients (`SimOptions.clients`): every inter-token latency at the client, in seconds, and when
    # tokens reached the clients (time, tokens)
    itl_s: tuple[float, ...] = ()
    deliveries: tuple[tuple[float, int], ...] = ()


def prepare(workload: Workload, options: SimOptions) -> PreparedWorkload:
    """Resolve the engine and the time model and validate the requests against them."""
    where = workload.name
    engine = options.engine or resolve_engine(workload.engine, options.overrides, where, options.release)
    require_pool_memory(engine.config)      # refused before the run starts, not after its first line
    timer, timing_notes = choose_step_time(workload.timing, engine.facts, step_time_ms=options.step_time_ms,
                                           gpu=options.overrides.gpu,
                                           enforce_eager=bool(options.overrides.args.enforce_eager),
                                           method=options.overrides.step_time or "auto",
                                           async_scheduling=engine.config.scheduling == "async")
    seed = options.seed if options.seed is not None else workload.seed
    notes = [*engine.notes, *timing_notes]
    explicit: tuple[TraceRequest, ...] = ()
    times: tuple[float, ...] | None = None
    if workload.is_explicit:
        explicit, times = _parse_explicit(workload, engine.config)
        class_names: tuple[str, ...] = (EXPLICIT_CLASS,)
        prefix_ids: tuple[int | None, ...] = (None,)
    else:
        class_names = tuple(c.name for c in workload.classes)
        prefix_ids = _prefix_ids(workload)
        notes.extend(_prefix_notes(workload, engine.config))
    if timer is None and not workload.arrivals_in_steps:
        raise KvplanError(
            f"{where}: timing: arrivals are in seconds but no step time can be estimated: give "
            "timing.step_time_ms, --step-time-ms, engine.profile or engine.model (or timing.weights_bytes "
            "and timing.kv_bytes_per_token for a roofline)")
    frontend = options.frontend or workload.timing.frontend
    closed = workload.arrival is not None and workload.arrival.max_concurrency is not None
    if (frontend is not None or closed) and workload.arrivals_in_steps:
        raise KvplanError(f"{where}: a front end or a closed loop needs arrivals in seconds (arrival_time), "
                          "not arrival_step")
    clients = options.clients or frontend is not None or closed
    return PreparedWorkload(workload, engine, timer, seed, class_names, prefix_ids, explicit, times, tuple(notes),
                            frontend, clients)


def _parse_explicit(
    workload: Workload, config: EngineConfig,
) -> tuple[tuple[TraceRequest, ...], tuple[float, ...] | None]:
    """Validate an explicit list with the trace format's own rules (token ids, lengths, ids)."""
    timed = [("arrival_time" in r) if isinstance(r, dict) else False for r in workload.requests]
    if any(timed) and not all(timed):
        index = timed.index(not timed[0])
        raise KvplanError(f"{workload.name}: requests[{index}]: every request needs arrival_time once one has "
                          "it (seconds), or none does (arrival_step, in scheduler steps)")
    times: list[float] = []
    rows = []
    for index, row in enumerate(workload.requests):
        if timed[index]:
            row = dict(row)
            if "arrival_step" in row:
                raise KvplanError(f"{workload.name}: requests[{index}]: give arrival_time or arrival_step, not both")
            try:
                times.append(as_number(row.pop("arrival_time"), f"requests[{index}].arrival_time", minimum=0))
            except FieldError as error:
                raise KvplanError(f"{workload.name}: {error}") from None
        rows.append(row)
    document = {"config": {k: getattr(config, k) for k in CONFIG_KEYS}, "requests": rows}
    trace = parse_trace(document, source=f"{workload.name} ({workload.requests_source})"
                        if workload.requests_source != workload.name else workload.name)
    return trace.requests, (tuple(times) if all(timed) else None)


def _prefix_ids(workload: Workload) -> tuple[int | None, ...]:
    names: dict[str, int] = {}
    out = []
    for request_class in workload.classes:
        prefix = request_class.shared_prefix
        out.append(None if prefix is None else names.setdefault(prefix.name, len(names)))
    return tuple(out)


def _prefix_notes(workload: Workload, config: EngineConfig) -> list[str]:
    notes = []
    lengths: dict[str, int] = {}
    for index, request_class in enumerate(workload.classes):
        prefix = request_class.shared_prefix
        if prefix is None:
            continue
        where = f"classes[{index}] ({request_class.name})"
        if prefix.tokens > TOKENS_PER_ID:
            raise KvplanError(f"{workload.name}: {where}.shared_prefix.tokens: at most {TOKENS_PER_ID:,} "
                              "(the token-id rule gives each prefix a million ids)")
        if lengths.setdefault(prefix.name, prefix.tokens) != prefix.tokens:
            raise KvplanError(f"{workload.name}: {where}.shared_prefix: {prefix.name!r} has "
                              f"{lengths[prefix.name]} tokens in another class; one name, one prompt")
        if not config.enable_prefix_caching:
            notes.append(f"{where}: shared prefix {prefix.name!r} cannot hit: prefix caching is off")
        elif prefix.tokens < config.block_size:
            notes.append(f"{where}: shared prefix {prefix.name!r} ({prefix.tokens} tokens) is shorter than one "
                         f"block ({config.block_size} tokens), so it can never be a prefix-cache hit")
        elif prefix.tokens % config.block_size:
            shared = prefix.tokens // config.block_size * config.block_size
            notes.append(f"{where}: only {shared} of the {prefix.tokens} tokens of shared prefix {prefix.name!r} "
                         f"can hit (whole {config.block_size}-token blocks)")
    return notes


# ---------------------------------------------------------------------------- running


def run(setup: PreparedWorkload, *, config: EngineConfig | None = None, rate_factor: float = 1.0,
        progress: Progress | None = None, on_step: StepListener | None = None,
        model_runner: ModelRunner | None = None) -> RunOutcome:
    """One simulation of the setup, optionally with another engine config or a scaled rate;
    ``on_step`` hears every step; ``model_runner`` runs inside every step (see ``Scheduler``)."""
    config = config or setup.config
    engine = setup.engine
    groups = engine.kv_cache_groups if config.kv_cache_groups is not None else ()
    require_pool_memory(config)
    recorder = Recorder(config.num_gpu_blocks - 1, config.block_size, setup.class_names,
                        timed=setup.timer is not None, on_step=on_step, groups=groups,
                        layers_known=bool(engine.planned_groups), clients=setup.clients and not setup.in_steps)
    with _rare_cycle_collections():
        if setup.in_steps:
            return _run_in_steps(setup, config, recorder, progress, model_runner)
        return _run_timed(setup, config, recorder, rate_factor, progress, model_runner)


# Allocations between two young-generation collections during a run (CPython's default: 700).
RUN_COLLECTION_THRESHOLD = 100_000


@contextmanager
def _rare_cycle_collections() -> Iterator[None]:
    """A run allocates millions of short-lived objects (batches, step results, block lists) that
    reference counting frees, and keeps every request's: at the default threshold the cycle
    collector rescans them all again and again, a tenth of a long run. Collections only reclaim
    cycles, so running them less often changes no result."""
    thresholds = gc.get_threshold()
    gc.set_threshold(RUN_COLLECTION_THRESHOLD, *thresholds[1:])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)


def _step_seconds(setup: PreparedWorkload) -> Callable[[StepLoad], float] | None:
    return setup.timer.seconds if setup.timer is not None else None


def _run_in_steps(setup: PreparedWorkload, config: EngineConfig, recorder: Recorder, progress: Progress | None,
                  model_runner: ModelRunner | None) -> RunOutcome:
    trace = Trace(config, setup.explicit)
    by_id = {r.request_id: r for r in trace.requests}
    seconds = _step_seconds(setup)
    clock = [0.0]
    total = len(trace.requests)
    seen: list[Scheduler] = []

    def observe(result: StepResult, scheduler: Scheduler, arrived: list[str]) -> None:
        if not seen:
            seen.append(scheduler)
        for request_id in arrived:
            request = by_id[request_id]
            recorder.add_request(request_id, _record(0, request.prompt_len, request.max_tokens, config,
                                                     result.step, clock[0] if seconds else None))
        head = scheduler.waiting[0].request_id if scheduler.waiting else None
        clock[0] += recorder.observe(result, scheduler.num_running, len(scheduler.waiting), head, clock[0], seconds)
        if progress is not None and result.step % 128 == 0:
            progress(total - len(recorder.live) - _not_arrived(trace, result.step), total)

    def idle(first_step: int, count: int) -> None:
        clock[0] += recorder.idle(first_step, count, clock[0], seconds)

    # a step listener (the timeline) hears every step, idle ones included (check_recorded_steps)
    summary = replay(trace, observe, model_runner, on_idle=idle if recorder.on_step is None else None,
                     bulk_decode=bulk_decode())
    records = tuple(recorder.records[r.request_id] for r in trace.requests if r.request_id in recorder.records)
    short = seen[0].pool_was_short if seen else False
    return RunOutcome(recorder.finish(summary.stalled, 0.0), records, 0, 0, short)


def check_recorded_steps(setup: PreparedWorkload, flag: str) -> None:
    """Refuse, before running, a per-step output of a run that spans more steps than anyone reads:
    a request list timed in steps writes at least one line per step up to its last arrival."""
    last = max((request.arrival_step for request in setup.explicit), default=0) if setup.in_steps else 0
    if last > MAX_RECORDED_STEPS:
        raise KvplanError(f"{flag}: the last request arrives at step {last:,}, so the run would write at least "
                          f"{last:,} lines (one per step; at most {MAX_RECORDED_STEPS:,}): leave out {flag}, or "
                          "bring the arrival steps closer")


def _not_arrived(trace: Trace, step: int) -> int:
    return sum(1 for r in trace.requests if r.arrival_step > step)


def _record(class_index: int, prompt: int, max_tokens: int, config: EngineConfig, step: int,
            time: float | None, turn: int = 0) -> RequestRecord:
    # the engine stops a request at max_model_len tokens, so it may generate fewer than max_tokens
    outputs = min(max_tokens, config.max_model_len - prompt)
    return RequestRecord(class_index, prompt, max_tokens, outputs, step, time, turn)


class _Conversation:
    """A request mix's arrival in flight: where its tokens stand and which turn comes next."""

    __slots__ = ("base", "plan", "position", "prefix", "turn")

    def __init__(self, plan: PlannedConversation, prefix: array[int]) -> None:
        self.plan = plan
        self.prefix = prefix
        self.base = CONVERSATION_TOKEN_BASE + plan.ordinal * CONVERSATION_TOKEN_STRIDE
        self.position = 0  # conversation tokens (user and generated) before the current turn
        self.turn = 0


def _run_timed(setup: PreparedWorkload, config: EngineConfig, recorder: Recorder, rate_factor: float,
               progress: Progress | None, model_runner: ModelRunner | None) -> RunOutcome:
    seconds = _step_seconds(setup)
    assert seconds is not None
    ready: list[tuple[float, int]] = []  # (time, ordinal): when each arrival is ready to be sent
    conversations: list[_Conversation] = []
    if setup.workload.is_explicit:
        assert setup.explicit_times is not None
        ready = [(time / rate_factor, ordinal) for ordinal, time in enumerate(setup.explicit_times)]
    else:
        prefixes: dict[int, array[int]] = {}
        for plan in setup.conversations_at(rate_factor):
            prefix = _prefix_tokens(setup, plan.class_index, prefixes)
            conversations.append(_Conversation(plan, prefix))
            ready.append((plan.arrival_time, plan.ordinal))
    arrival = setup.workload.arrival
    clients = Clients(ready, arrival.max_concurrency if arrival is not None else None, setup.frontend)
    pending = clients.pending  # (time it reaches the engine, tie-breaker, ordinal)
    total = len(setup.explicit) if setup.workload.is_explicit else sum(len(c.plan.turns) for c in conversations)
    owner: dict[str, int] = {}  # request id -> conversation ordinal
    rejected = cut = 0
    stream = clients.stream if setup.frontend is not None else None
    # with a front end or a closed loop, a client acts when its request is done both in the engine
    # and at the client (in either order: async scheduling reports a finish one step late)
    by_client = not clients.direct
    done_at_client: dict[int, RequestRecord] = {}
    done_in_engine: set[int] = set()

    def next_send(ordinal: int, record: RequestRecord) -> None:
        time = record.client_last_time if record.client_last_time is not None else record.finish_time
        assert time is not None
        if conversations and conversations[ordinal].turn < len(conversations[ordinal].plan.turns):
            clients.follow_up(ordinal, time + conversations[ordinal].plan.turns[conversations[ordinal].turn]
                              .think_time_s)
        else:
            clients.release(time)

    # clients follow every request's tokens, so no request may be advanced in bulk unlisted
    scheduler = Scheduler(config, model_runner, bulk_decode=bulk_decode() and not recorder.clients)
    first_arrival = clients.first_ready
    if by_client:
        clients.admit_until(first_arrival)
    now = first_arrival if by_client else (pending[0][0] if pending else 0.0)
    stalled = False
    while clients.waiting or scheduler.has_unfinished():
        if not scheduler.has_unfinished():
            if not pending:
                clients.admit_next()
            if pending[0][0] > now:
                recorder.hold(now, pending[0][0])
                now = pending[0][0]
        while pending and pending[0][0] <= now:
            time, _, ordinal = heapq.heappop(pending)
            made: tuple[Request, RequestRecord] | None
            if setup.workload.is_explicit:
                made = _explicit_request(setup, ordinal, config, scheduler.num_steps, time)
            else:
                made = _turn_request(setup, conversations[ordinal], config, scheduler.num_steps, time)
                if made is None:
                    # the rest of the conversation cannot arrive: its next prompt is too long
                    if conversations[ordinal].turn == 0:
                        rejected += 1
                    else:
                        cut += 1
                    total -= len(conversations[ordinal].plan.turns) - conversations[ordinal].turn
                    clients.sent_at(ordinal, time)
                    clients.release(time)
            if made is None:
                continue
            request, record = made
            record.ordinal = ordinal
            record.sent_time, record.client_offset = clients.sent_at(ordinal, time)
            scheduler.add_request(request)
            recorder.add_request(request.request_id, record)
            owner[request.request_id] = ordinal
        if not scheduler.has_unfinished():
            continue
        result = scheduler.step()
        head = scheduler.waiting[0].request_id if scheduler.waiting else None
        now += recorder.observe(result, scheduler.num_running, len(scheduler.waiting), head, now, seconds)
        if recorder.clients:
            # requests sent while the step ran reach the front end before the step's tokens do
            if by_client:
                clients.admit_until(now)
            for record in recorder.deliver(now, stream):
                clients.finished()
                if by_client:
                    if record.ordinal in done_in_engine:
                        done_in_engine.discard(record.ordinal)
                        next_send(record.ordinal, record)
                    else:
                        done_at_client[record.ordinal] = record
        for request_id in result.finished:
            ordinal = owner.pop(request_id)
            follow = _finish_turn(conversations[ordinal], recorder.records[request_id]) if conversations else None
            if by_client:
                if ordinal in done_at_client:
                    next_send(ordinal, done_at_client.pop(ordinal))
                else:
                    done_in_engine.add(ordinal)
            elif follow is not None:
                clients.follow_up(ordinal, now + follow)
        if progress is not None and result.step % 128 == 0:
            progress(len(recorder.records) - len(recorder.live), total)
        if scheduler.is_stalled(result, clients.waiting):
            stalled = True
            break
        if (result.num_scheduled_tokens == 0 and not result.preempted and not result.output_of_earlier_batch
                and clients.waiting):
            # nothing can change before the next arrival: the blocked head stays blocked
            if not pending:
                clients.admit_next()
            if pending and pending[0][0] > now:
                recorder.hold(now, pending[0][0])
                now = pending[0][0]
    records = tuple(recorder.records.values())
    return RunOutcome(recorder.finish(stalled, first_arrival), records, rejected, cut, scheduler.pool_was_short,
                      tuple(recorder.itl), tuple(zip(recorder.delivery_times, recorder.delivery_counts, strict=True)))


def _prefix_tokens(setup: PreparedWorkload, class_index: int, cache: dict[int, array[int]]) -> array[int]:
    """The class's shared prefix, as the engine's token arrays (prompts are concatenated from it)."""
    prefix_id = setup.prefix_ids[class_index]
    if prefix_id is None:
        return array("q")
    if prefix_id not in cache:
        shared = setup.workload.classes[class_index].shared_prefix
        assert shared is not None
        start = PREFIX_TOKEN_BASE + prefix_id * TOKENS_PER_ID
        cache[prefix_id] = array("q", range(start, start + shared.tokens))
    return cache[prefix_id]


def _explicit_request(setup: PreparedWorkload, ordinal: int, config: EngineConfig, step: int,
                      time: float) -> tuple[Request, RequestRecord]:
    spec = setup.explicit[ordinal]
    return spec.to_request(), _record(0, spec.prompt_len, spec.max_tokens, config, step, time)


def _turn_request(setup: PreparedWorkload, conversation: _Conversation, config: EngineConfig, step: int,
                  time: float) -> tuple[Request, RequestRecord] | None:
    """The conversation's next turn: its whole history plus new user tokens; None if too long."""
    plan = conversation.plan
    turn = plan.turns[conversation.turn]
    history = conversation.position + turn.user_tokens
    prompt_len = len(conversation.prefix) + history
    if prompt_len >= config.max_model_len:
        return None
    base = conversation.base
    # Built as the request's own token array: no per-token conversion of a list.
    prompt = conversation.prefix + as_token_array(range(base, base + history))
    outputs = range(base + history, base + history + turn.output_tokens)
    name = setup.class_names[plan.class_index]
    request_id = f"{name}-{plan.ordinal}" if len(plan.turns) == 1 else f"{name}-{plan.ordinal}.{conversation.turn}"
    request = Request(request_id, prompt, turn.output_tokens, outputs)
    request.num_shareable_blocks = shareable_blocks(conversation, config)
    return request, _record(plan.class_index, prompt_len, turn.output_tokens, config, step, time,
                            conversation.turn)


def shareable_blocks(conversation: _Conversation, config: EngineConfig) -> int | None:
    """The blocks of the conversation's current turn that another request may share
    (`Request.num_shareable_blocks`): on its last turn, those of the shared prefix and the earlier
    turns, since no later turn repeats its new tokens and no other conversation has them (their
    ids are the conversation's own, `CONVERSATION_TOKEN_STRIDE` apart); None (all) before it."""
    if conversation.turn < len(conversation.plan.turns) - 1:
        return None
    return (len(conversation.prefix) + conversation.position) // config.block_size


def _finish_turn(conversation: _Conversation, record: RequestRecord) -> float | None:
    """Advance past a finished turn; the think time before the next one, or None at the end."""
    turn = conversation.plan.turns[conversation.turn]
    conversation.position += turn.user_tokens + record.num_outputs
    conversation.turn += 1
    if conversation.turn == len(conversation.plan.turns):
        return None
    return conversation.plan.turns[conversation.turn].think_time_s


# ---------------------------------------------------------------------------- sizes for capacity


def blocks_at_length(config: EngineConfig, tokens: int) -> int:
    """The most blocks one request of `tokens` tokens holds, over every KV cache group: a group's
    blocks of its own size (a window or chunk holds fewer), a Mamba group's state block(s)."""
    total = 0
    for group in config.groups:
        if group.spec is MambaSpec and group.mamba_cache_mode in ("none", "align"):
            total += 1 if group.mamba_cache_mode == "none" else 2
        else:
            total += math.ceil(tokens / (group.block_size or config.block_size))
    return total


def request_block_sizes(setup: PreparedWorkload) -> list[int]:
    """Blocks each request could hold at its longest (prompt plus every output, capped by the model
    length): an upper bound on what running requests can ever hold together."""
    config = setup.config
    sizes = []
    if setup.workload.is_explicit:
        for request in setup.explicit:
            sizes.append(blocks_at_length(config, min(request.prompt_len + request.max_tokens, config.max_model_len)))
        return sizes
    for plan in setup.conversations:
        shared = setup.workload.classes[plan.class_index].shared_prefix
        prefix = shared.tokens if shared is not None else 0
        position = 0
        for turn in plan.turns:
            prompt = prefix + position + turn.user_tokens
            if prompt >= config.max_model_len:
                break
            outputs = min(turn.output_tokens, config.max_model_len - prompt)
            sizes.append(blocks_at_length(config, prompt + outputs))
            position += turn.user_tokens + outputs
    return sizes


def with_pool(config: EngineConfig, num_gpu_blocks: int) -> EngineConfig:
    return replace(config, num_gpu_blocks=num_gpu_blocks)
