"""vLLM's FCFS scheduler (`v1/core/sched/scheduler.py`, `async_scheduler.py`) with a model that
generates each request's planned tokens; one `step()` is one engine-core iteration.

Arrivals are the caller's job (`add_request` before `step`). A schedule takes running requests
first, in order, preempting the last running request when blocks run out (it restarts from zero
at the front of the waiting queue); then waiting requests, only in a step without preemption,
strictly in order (the head blocks the rest). A batch's output gives every request that was not
a partial prefill chunk one token; finished requests are freed in the batch's order.

SYNC: each step schedules a batch and processes its output. ASYNC (`EngineCore.step_with_batch_queue`
with two batches in flight): a step schedules batch N+1 while batch N runs, so a decode is
scheduled again before its previous token is known (an output placeholder), and batch N's
tokens, finishes and frees come after batch N+1's schedule."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from kvplan.errors import KvplanError
from kvplan.semantics.engine.config import EngineConfig
from kvplan.semantics.engine.cruise import Cruise
from kvplan.semantics.engine.hashing import RequestBlockHasher
from kvplan.semantics.engine.kv_cache_manager import KVCacheManager, prefill_end
from kvplan.semantics.engine.mamba_manager import prefill_checkpoint_is_valid, prefill_checkpoint_position
from kvplan.semantics.engine.request import Request, RequestStatus
from kvplan.semantics.engine.stats import NO_LOOKUPS, PrefixCacheStats
from kvplan.semantics.kv.specs import MambaSpec
from kvplan.semantics.releases import Admission, MambaChunkEnds, Scheduling

# Whether a waiting request's whole prompt must fit before its chunk is allocated, by the release's
# `admission` (vLLM 0.33.0's `scheduler_reserve_full_isl`).
WHOLE_PROMPT_FIRST: dict[Admission, bool] = {"first_chunk": False, "whole_prompt": True}
# The engine core's batch queue, by scheduling loop: async keeps the executor's
# `max_concurrent_batches` in flight, 2 with one GPU and pp = 1 in both releases.
BATCHES_IN_FLIGHT: dict[Scheduling, int] = {"sync": 1, "async": 2}

# Called where vLLM's model runs, right after a schedule, with {request id: tokens} scheduled:
# each scheduled request has its new num_computed_tokens and its whole block table, and no
# request has been freed since the schedule (kvplan profile --workload writes K/V here).
ModelRunner = Callable[["Scheduler", dict[str, int]], None]


# Not frozen: a frozen dataclass's __init__ sets each of these 20 fields through object.__setattr__,
# a tenth of the time of a bulk-decode step. Callers read it only.
@dataclass(slots=True)
class StepResult:
    """What one step did; cheap to build (no block tables or queue contents); read only."""

    step: int
    scheduled: dict[str, int]
    num_scheduled_tokens: int
    admitted: list[str]
    resumed: list[str]
    prefix_hit_tokens: dict[str, int]
    preempted: list[str]
    finished: list[str]
    free_blocks_after_schedule: int
    num_free_blocks: int
    num_used_blocks: int
    num_cached_blocks: int
    num_evictable_cached_blocks: int
    prefix_cache: PrefixCacheStats
    # Blocks each KV cache group holds at the end of the step (one entry for one group).
    num_used_blocks_by_group: tuple[int, ...] = ()
    # Async: `finished` and the frees come from the output of a batch with tokens that an earlier
    # step scheduled, whose tokens were known when that batch's run ended (before this step's).
    output_of_earlier_batch: bool = False
    # The bulk fast path (`cruise.py`): requests that decode one token this step without being
    # listed in `scheduled`, and the sum of their computed tokens after the schedule.
    num_bulk_scheduled: int = 0
    bulk_context_tokens: int = 0
    # Requests listed again from this step on, with their computed tokens before its schedule.
    rejoined: dict[str, int] | None = None


@dataclass(slots=True)
class Batch:
    """One schedule's work: requests in scheduling order, and which of them sample a token."""

    scheduled: dict[str, int]
    requests: list[Request]
    samples: list[bool]
    admitted: list[str]
    resumed: list[str]
    prefix_hit_tokens: dict[str, int]
    preempted: list[str]
    num_tokens: int
    step: int = -1
    # The leading requests of the batch are the cruising requests, not listed (`cruise.py`).
    cruising: bool = False


EMPTY_BATCH = Batch({}, [], [], [], [], {}, [], 0)


class Scheduler:
    """`bulk_decode`: advance steady decodes without per-request work (`cruise.py`; same steps,
    same records) where the engine has one full-attention group and no model runner; callers that
    read a request's counters between steps turn it off (`running` lists them all either way)."""

    def __init__(self, config: EngineConfig, model_runner: ModelRunner | None = None,
                 bulk_decode: bool = False) -> None:
        config.validate()
        self.config = config
        self.model_runner = model_runner
        release = config.release
        assert config.scheduling is not None  # EngineConfig resolves it
        self._batch_queue_size = BATCHES_IN_FLIGHT[config.scheduling]
        self._async = self._batch_queue_size > 1
        self.kv_cache_manager = KVCacheManager(
            config.num_gpu_blocks, config.block_size, config.max_model_len,
            enable_caching=config.enable_prefix_caching, kv_cache_groups=config.kv_cache_groups,
            enable_chunked_prefill=config.enable_chunked_prefill, release=release,
            max_in_flight_tokens=self._batch_queue_size * config.max_num_batched_tokens,
        )
        self._full_prompt_gate = WHOLE_PROMPT_FIRST[release.admission]
        # Oldest first; at the start of a step it holds at most batch_queue_size - 1 batches.
        self._batch_queue: deque[Batch] = deque()
        # vLLM's `has_finished_requests`: an update finished a request and no schedule ran since.
        self._finished_since_schedule = False
        # what the cruising requests take in the last schedule (`Cruise.scheduled`): count, context
        self._cruise_load = (0, 0)
        # Mamba "align" caching: prefill chunks end on block boundaries (vLLM's aligned split).
        self._mamba_chunk = MAMBA_CHUNK_END[release.mamba_chunk_ends] if config.mamba_cache_mode == "align" else None
        self._checkpoint_alignment = internal_checkpoint_alignment(config)
        # vLLM 0.34.0's `update_from_output` also caches a Mamba hybrid's blocks at output time in sync
        # mode with prefix caching ("publish finalized states before retirement or completion",
        # docs/vllm/changes-0.34.md section 6.1); async already does it for every model
        self._cache_at_sync_output = (release.mamba_sync_output_caching and not self._async
                                      and config.enable_prefix_caching
                                      and any(group.spec is MambaSpec for group in config.groups))
        self.block_pool = self.kv_cache_manager.block_pool
        self.waiting: deque[Request] = deque()
        # The running requests that are not cruising, in running order (after the cruising ones).
        self._active: list[Request] = []
        self.requests: dict[str, Request] = {}
        self.prefix_cache_stats = PrefixCacheStats()
        self.num_steps = 0
        self.total_preemptions = 0
        self.num_admissions_short_of_blocks = 0   # the head of the queue waited for free blocks
        self._block_hasher = (
            RequestBlockHasher(config.block_size, config.hash_seed) if config.enable_prefix_caching else None
        )
        # Hybrids (several groups, windows, Mamba) always run per step.
        bulk = (bulk_decode and model_runner is None and self._mamba_chunk is None
                and self.kv_cache_manager.is_full_attention)
        self._cruise = (Cruise(self.kv_cache_manager, self._block_hasher, config.block_size, self._async,
                               config.max_model_len) if bulk else None)
        self._rejoined: dict[str, int] | None = None

    @property
    def running(self) -> list[Request]:
        """Every running request, in running order, with its counters as the per-step path keeps
        them (cruising requests land first: reading them costs the fast path a few steps)."""
        if self._cruise is not None and self._cruise.cruisers:
            self._land()
        return self._active

    @property
    def num_running(self) -> int:
        return len(self._active) + (len(self._cruise.cruisers) if self._cruise is not None else 0)

    def _land(self) -> None:
        """Every cruising request back to per-step work before step `num_steps`; under async
        scheduling, listed in the batch in flight that holds its token."""
        assert self._cruise is not None
        step = self.num_steps
        landed = self._cruise.land(step)
        if self._async and self._batch_queue:
            batch = self._batch_queue[-1]
            assert len(self._batch_queue) == 1 and batch.step == step - 1
            if batch.cruising:
                members = [c.request for c in landed if c.promoted_at < step - 1]
                scheduled = dict.fromkeys([r.request_id for r in members], 1)
                scheduled.update(batch.scheduled)
                batch.scheduled = scheduled
                batch.requests = members + batch.requests
                batch.samples = [True] * len(members) + batch.samples
                batch.cruising = False
        rejoined = self._rejoined if self._rejoined is not None else {}
        for cruiser in landed:
            rejoined[cruiser.request.request_id] = cruiser.request.num_computed_tokens
        self._rejoined = rejoined
        self._active = [c.request for c in landed] + self._active

    def add_request(self, request: Request) -> None:
        """Append a new request to the waiting queue."""
        if request.request_id in self.requests:
            raise KvplanError(f"request id {request.request_id!r} is already in the scheduler")
        if request.num_prompt_tokens >= self.config.max_model_len:
            raise KvplanError(
                f"request {request.request_id!r}: the prompt ({request.num_prompt_tokens} tokens) must be "
                f"shorter than max_model_len ({self.config.max_model_len})"
            )
        if self._block_hasher is not None:
            request.install_block_hasher(self._block_hasher)
        request.status = RequestStatus.WAITING
        self.waiting.append(request)
        self.requests[request.request_id] = request

    def has_unfinished(self) -> bool:
        """Requests wait or run, or a batch with tokens is still in flight (async)."""
        # `num_running`, inline: the driver asks several times a step
        if self._active or self.waiting or (self._cruise is not None and self._cruise.cruisers):
            return True
        return self.has_tokens_in_flight()

    def has_tokens_in_flight(self) -> bool:
        """A scheduled batch with tokens whose output is not processed yet."""
        return any(batch.num_tokens for batch in self._batch_queue)

    def is_stalled(self, step: StepResult, more_arrivals: bool) -> bool:
        """The stall rule, exactly: a step that scheduled nothing and finished nothing, with no
        tokens in flight, while requests wait or run and none is still to arrive. Such a request
        cannot progress even alone; vLLM would livelock."""
        return (step.num_scheduled_tokens == 0 and not step.finished and not more_arrivals
                and bool(self.num_running or self.waiting) and not self.has_tokens_in_flight())

    @property
    def pool_was_short(self) -> bool:
        """The pool refused an allocation, or a lookup missed a block it had evicted: a larger pool
        would have scheduled differently. While False, every larger pool runs exactly these steps."""
        return bool(self.total_preemptions or self.num_admissions_short_of_blocks
                    or self.block_pool.num_misses_on_evicted)

    def step(self) -> StepResult:
        pool = self.block_pool
        kv = self.kv_cache_manager
        queue = self._batch_queue
        finished: list[str] = []
        processed = EMPTY_BATCH
        bulk_scheduled = bulk_context = 0
        if self.num_running or self.waiting or self._finished_since_schedule:
            batch = self._schedule()
            if batch.cruising:
                # `Cruise.scheduled(batch.step)`, as the schedule read it (nothing changed it since)
                bulk_scheduled, bulk_context = self._cruise_load
            free_blocks_after_schedule = len(pool.free_queue)
            step_stats = kv.make_prefix_cache_stats()
            if self.model_runner is not None:
                self.model_runner(self, batch.scheduled)
            queue.append(batch)
            # Async: the step ends while the new batch runs, unless the queue is full. A batch
            # without tokens runs nothing: its (empty) output is taken at once.
            if not (batch.num_tokens and len(queue) < self._batch_queue_size):
                processed = queue.popleft()
        else:
            batch = EMPTY_BATCH
            free_blocks_after_schedule = len(pool.free_queue)
            step_stats = NO_LOOKUPS
            if queue:
                processed = queue.popleft()
        if processed is not EMPTY_BATCH:
            finished = self._process_output(processed)
        if step_stats is not NO_LOOKUPS:
            self.prefix_cache_stats.add(step_stats)
        step = self.num_steps
        cruise = self._cruise
        if cruise is not None and self._active and step >= cruise.cooldown_until:
            self._start_cruising(cruise, step)
        self.num_steps += 1
        rejoined = self._rejoined
        self._rejoined = None
        return StepResult(
            step=step,
            scheduled=batch.scheduled,
            num_scheduled_tokens=batch.num_tokens,
            admitted=batch.admitted,
            resumed=batch.resumed,
            prefix_hit_tokens=batch.prefix_hit_tokens,
            preempted=batch.preempted,
            finished=finished,
            free_blocks_after_schedule=free_blocks_after_schedule,
            num_free_blocks=len(pool.free_queue),
            num_used_blocks=pool.num_used_blocks,
            num_cached_blocks=pool.num_cached_blocks,
            num_evictable_cached_blocks=pool.num_evictable_cached_blocks,
            prefix_cache=step_stats,
            num_used_blocks_by_group=pool.num_used_blocks_by_group(),
            output_of_earlier_batch=processed is not batch and processed.num_tokens > 0,
            num_bulk_scheduled=bulk_scheduled,
            bulk_context_tokens=bulk_context,
            rejoined=rejoined,
        )

    def _start_cruising(self, cruise: Cruise, step: int) -> None:
        """The leading requests that run per step and decode steadily start cruising after `step`."""
        active = self._active
        count = 0
        for request in active:
            if request.status is not RequestStatus.RUNNING or not cruise.may_join(request, step):
                break
            cruise.join(request, step)
            count += 1
        if count:
            del active[:count]

    def _schedule(self) -> Batch:
        config = self.config
        kv = self.kv_cache_manager
        waiting = self.waiting
        max_model_len = config.max_model_len
        step = self.num_steps
        budget = config.max_num_batched_tokens
        scheduled: dict[str, int] = {}
        scheduled_requests: list[Request] = []
        # Whether each scheduled request samples a token: not after a partial prefill chunk. Under
        # async scheduling the token is a placeholder until the batch's output is processed, and
        # the batch's tokens are in flight until then (sync processes them in this very step).
        samples: list[bool] = []
        is_async = self._async
        preempted: list[str] = []
        block_size = config.block_size
        mamba_chunk = self._mamba_chunk
        max_chunk = config.max_num_batched_tokens
        checkpoint_alignment = self._checkpoint_alignment
        self._finished_since_schedule = False
        kv.new_step_starts()
        cruise = self._cruise
        cruising = False
        if cruise is not None and cruise.cruisers:
            # The cruising requests lead the running order: each takes one token, and their
            # allocate_slots calls come first. They land when the budget or the free queue might
            # not cover them (the per-step loop below would then stop or preempt among them).
            self._cruise_load = cruise.scheduled(step)
            num_cruising = self._cruise_load[0]
            due = cruise.due(step) if num_cruising <= budget else None
            # each call takes at most one block: only a queue shorter than the calls is counted out
            num_free = len(self.block_pool.free_queue)
            if due is None or (len(due) > num_free and cruise.blocks_needed(due, step) > num_free):
                self._land()
            else:
                cruise.allocate(due, step)
                budget -= num_cruising
                cruising = True
        running = self._active
        num_cruisers = len(cruise.cruisers) if cruise is not None else 0
        # Bound once: the loop below runs for every running request in every step.
        schedule_request = scheduled_requests.append
        record_sample = samples.append

        # Preemption pops from the end of `running` (a request not yet scheduled, or this one, and
        # then the scan stops), so iterating the shrinking list visits exactly vLLM's requests.
        for request in running:
            if budget == 0:
                break
            computed = request.num_computed_tokens
            placeholders = request.num_output_placeholders
            if placeholders and computed + 2 - placeholders >= request.num_prompt_tokens + request.max_tokens:
                # Async: the token in flight is its last one; nothing more to schedule.
                continue
            num_tokens = request.num_tokens
            num_new = num_tokens + placeholders - computed
            if num_new > budget:
                num_new = budget
            if num_new > max_model_len - 1 - computed:
                num_new = max_model_len - 1 - computed
            if mamba_chunk is not None:
                num_new = mamba_chunk(request, num_new, 0, block_size, max_chunk, checkpoint_alignment)
            if num_new == 0:
                continue
            # Most decode steps neither need a block nor fill one: the manager says so in advance.
            end = computed + num_new
            if end > request.kv_noop_limit and (end > request.kv_slot_limit
                                                or num_tokens > request.kv_known_noop_limit):
                while True:
                    new_blocks = kv.allocate_slots(request, num_new)
                    if new_blocks is not None:
                        break
                    victim = running.pop()
                    self._preempt(victim)
                    preempted.append(victim.request_id)
                    if victim is request:
                        break
                if new_blocks is None:
                    break
            # vLLM advances num_computed_tokens (and the placeholders) after the whole schedule; doing
            # it now is the same, because FCFS preemption only ever takes requests not yet scheduled
            # in this step.
            computed += num_new
            request.num_computed_tokens = computed
            scheduled[request.request_id] = num_new
            schedule_request(request)
            sampled = computed >= num_tokens + placeholders
            record_sample(sampled)
            if is_async:
                request.num_in_flight_tokens += num_new
                if sampled:
                    request.num_output_placeholders = placeholders + 1
            budget -= num_new

        admitted: list[str] = []
        resumed: list[str] = []
        prefix_hit_tokens: dict[str, int] = {}
        if not preempted:
            max_num_seqs = config.max_num_seqs
            chunked = config.enable_chunked_prefill
            full_prompt_gate = self._full_prompt_gate
            while waiting and budget > 0 and len(running) + num_cruisers < max_num_seqs:
                request = waiting[0]
                looked_up = request.num_computed_tokens == 0
                if looked_up:
                    hit_blocks, num_hit = kv.get_computed_blocks(request)
                else:
                    hit_blocks, num_hit = (), 0
                num_new = request.num_tokens - num_hit
                if not chunked and num_new > budget:
                    break
                num_new = min(num_new, budget)
                if mamba_chunk is not None:
                    num_new = mamba_chunk(request, num_new, num_hit, block_size, max_chunk, checkpoint_alignment)
                    if num_new == 0:
                        break
                if kv.allocate_slots(request, num_new, num_hit, hit_blocks,
                                     full_sequence_must_fit=full_prompt_gate) is None:
                    self.num_admissions_short_of_blocks += 1
                    self.block_pool.stop_tracking_evictions()
                    break
                if looked_up:
                    kv.record_admission(request, num_hit)
                waiting.popleft()
                running.append(request)
                request_id = request.request_id
                (resumed if request.status is RequestStatus.PREEMPTED else admitted).append(request_id)
                request.status = RequestStatus.RUNNING
                computed = num_hit + num_new
                request.num_computed_tokens = computed
                if request.num_cached_tokens is None:
                    request.num_cached_tokens = num_hit
                if request.first_scheduled_step is None:
                    request.first_scheduled_step = step
                prefix_hit_tokens[request_id] = num_hit
                scheduled[request_id] = num_new
                scheduled_requests.append(request)
                sampled = computed >= request.num_tokens + request.num_output_placeholders
                samples.append(sampled)
                if is_async:
                    request.num_in_flight_tokens += num_new
                    if sampled:
                        request.num_output_placeholders += 1
                budget -= num_new

        return Batch(scheduled, scheduled_requests, samples, admitted, resumed, prefix_hit_tokens, preempted,
                     config.max_num_batched_tokens - budget, step, cruising)

    def _process_output(self, batch: Batch) -> list[str]:
        """Give each sampling request of the batch its next token; free finished requests at once,
        in the batch's order: that order is the eviction order. A request preempted since the
        batch was scheduled still gets its token; a request already finished gets nothing."""
        finished: list[str] = []
        if batch.cruising:
            assert self._cruise is not None
            self._cruise.process_batch(batch.step, self._finish_now, finished)
        if batch.requests:
            # (a cruising step often lists none: nothing for the loops below to set up for)
            finished += self._process_async_output(batch) if self._async else self._process_sync_output(batch)
        if finished:
            self._active = [r for r in self._active if r.status is RequestStatus.RUNNING]
            self._finished_since_schedule = True
        return finished

    def _finish_now(self, request: Request) -> None:
        self._finish(request, self.num_steps)

    def _process_sync_output(self, batch: Batch) -> list[str]:
        """The sync loop's output, processed in the step that scheduled it: no request of the batch
        was preempted or finished since. The loop runs once per running request and step, so the
        token is appended here rather than by `Request.append_output_token` (same effect; every
        request of the scheduler hashes with its hasher, installed by `add_request`)."""
        max_model_len = self.config.max_model_len
        hasher = self._block_hasher
        hash_block_size = hasher.block_size if hasher is not None else 0
        finished: list[str] = []
        cache_at_output = self._cache_at_sync_output
        for request, sampled in zip(batch.requests, batch.samples, strict=True):
            if cache_at_output and request.status is RequestStatus.RUNNING:
                self.kv_cache_manager.cache_blocks(request, request.num_computed_tokens - request.num_in_flight_tokens)
            if not sampled:
                continue
            num_tokens = request.num_tokens + 1
            request.num_tokens = num_tokens
            num_outputs = request.num_output_tokens + 1
            request.num_output_tokens = num_outputs
            if hash_block_size and num_tokens % hash_block_size == 0:
                hasher.update(request)  # type: ignore[union-attr]
            if num_outputs >= request.max_tokens or num_tokens >= max_model_len:
                self._finish(request, self.num_steps)
                finished.append(request.request_id)
        return finished

    def _process_async_output(self, batch: Batch) -> list[str]:
        """The async loop's output, a step after its schedule: requests may have been preempted or
        finished since. Hot like the sync loop, so the token is appended here as well."""
        max_model_len = self.config.max_model_len
        hasher = self._block_hasher
        hash_block_size = hasher.block_size if hasher is not None else 0
        running_status = RequestStatus.RUNNING
        finished_status = RequestStatus.FINISHED_LENGTH_CAPPED
        finished: list[str] = []
        # `scheduled` was filled in the order of `requests`: its values are each request's tokens.
        for request, num_tokens_scheduled, sampled in zip(batch.requests, batch.scheduled.values(), batch.samples,
                                                          strict=True):
            request.num_in_flight_tokens -= num_tokens_scheduled
            if not sampled:
                continue
            status = request.status
            if status is finished_status:
                continue
            num_tokens = request.num_tokens + 1
            request.num_tokens = num_tokens
            num_outputs = request.num_output_tokens + 1
            request.num_output_tokens = num_outputs
            if hash_block_size and num_tokens % hash_block_size == 0:
                hasher.update(request)  # type: ignore[union-attr]
            placeholders = request.num_output_placeholders - 1
            request.num_output_placeholders = placeholders
            known = request.num_computed_tokens - placeholders
            if status is running_status and known > request.kv_noop_limit:
                # The blocks this batch filled get their hashes now that their tokens are known
                # (below the no-op limit no block is newly full).
                self.kv_cache_manager.cache_blocks(request, known)
            if num_outputs >= request.max_tokens or num_tokens >= max_model_len:
                if status is RequestStatus.PREEMPTED:
                    self.waiting.remove(request)
                self._finish(request, self.num_steps)
                finished.append(request.request_id)
        return finished

    def _finish(self, request: Request, step: int) -> None:
        request.status = RequestStatus.FINISHED_LENGTH_CAPPED
        request.finish_step = step
        self.kv_cache_manager.free(request)
        del self.requests[request.request_id]

    def _preempt(self, request: Request) -> None:
        # A placeholder stays: its token is still in flight and arrives with its batch's output
        # (0.33.0 zeroes it and counts the token as stale instead, which ends in the same state).
        self.kv_cache_manager.free(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.total_preemptions += 1
        self.block_pool.stop_tracking_evictions()
        self.waiting.appendleft(request)

    def block_tables(self) -> dict[str, list[int]]:
        """Group 0's block ids of every running request, in running order (costly: for full records
        only); 0 is the null block."""
        get_blocks = self.kv_cache_manager.get_blocks
        return {r.request_id: [b.block_id for b in get_blocks(r.request_id)] for r in self.running}

    def block_tables_by_group(self) -> dict[str, list[list[int]]]:
        """Every group's block ids of every running request, in running order."""
        get_ids = self.kv_cache_manager.get_block_ids_by_group
        return {r.request_id: list(get_ids(r.request_id)) for r in self.running}


def internal_checkpoint_alignment(config: EngineConfig) -> int | None:
    """The token alignment of the prefill checkpoints a Mamba "align" chunk can export from inside
    it (vLLM 0.33.0's scheduler: the first Mamba group's, and only when every Mamba group has
    prefill checkpoint blocks); None: every chunk stops where the state must be cached."""
    mamba_groups = [group for group in config.groups if group.spec is MambaSpec]
    if not mamba_groups or not all(group.num_prefill_checkpoint_blocks > 0 for group in mamba_groups):
        return None
    return mamba_groups[0].prefill_checkpoint_alignment


def mamba_aligned_chunk(request: Request, num_new: int, num_hit: int, block_size: int, max_chunk: int = 0,
                        checkpoint_alignment: int | None = None) -> int:
    """vLLM 0.17.1's `_mamba_block_aligned_split`: during prefill a chunk ends on a block boundary, or
    at the request's last block boundary, so that Mamba states are cached at block ends; 0 means the
    budget holds no whole block. (0.17.1 has no prefill checkpoints: `checkpoint_alignment` is None.)"""
    computed = request.num_computed_tokens + num_hit
    if computed < max(request.num_prompt_tokens, request.num_tokens - 1):
        last_boundary = request.num_tokens - request.num_tokens % block_size
        if computed + num_new < last_boundary:
            return num_new // block_size * block_size
        if computed < last_boundary < computed + num_new:
            return last_boundary - computed
    return num_new


def mamba_checkpoint_chunk(request: Request, num_new: int, num_hit: int, block_size: int, max_chunk: int,
                           checkpoint_alignment: int | None = None) -> int:
    """vLLM 0.33.0's `_mamba_block_aligned_split`: during prefill a chunk that ends before the
    prefill's end is cut to a block boundary (unless a block is wider than `max_chunk` and the cut
    would leave nothing); then it stops at the earliest of: the end of the block it started inside,
    the last block boundary before the last token (the state a resent prompt can hit), and the
    block-aligned point of a shared-prefix junction. A chunk reaching the prefill's end that can
    export that state from inside it (prefill checkpoint blocks, `checkpoint_alignment` not None)
    stops at neither of the first two."""
    start = request.num_computed_tokens + num_hit
    end_of_prefill = prefill_end(request)
    if start >= end_of_prefill:
        return num_new
    end = start + num_new
    internal_checkpoint = end >= end_of_prefill and prefill_checkpoint_is_valid(
        start, end, prefill_checkpoint_position(end_of_prefill, block_size), block_size, checkpoint_alignment)
    if end < end_of_prefill:
        aligned_end = end // block_size * block_size
        if aligned_end > start or block_size <= max_chunk:
            end = aligned_end
    junction = request.shared_prefix_boundary
    stops = (
        (start // block_size + 1) * block_size if start % block_size and not internal_checkpoint else 0,
        0 if internal_checkpoint else (request.num_tokens - 1) // block_size * block_size,
        start + (junction - start) // block_size * block_size if start < junction < end else 0,
    )
    end = min((stop for stop in stops if start < stop < end), default=end)
    return max(end - start, 0)


# Where a Mamba "align" prefill chunk ends, by the release's `mamba_chunk_ends`.
MAMBA_CHUNK_END: dict[MambaChunkEnds, Callable[[Request, int, int, int, int, int | None], int]] = {
    "last_boundary": mamba_aligned_chunk,
    "last_checkpoint": mamba_checkpoint_chunk,
}
