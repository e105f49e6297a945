"""vLLM 0.17.1's synchronous FCFS scheduler (`v1/core/sched/scheduler.py`) with a model that
generates each request's planned tokens: one `step()` schedules, runs and updates.

Arrivals are the caller's job (`add_request` before `step`). Per step: running requests first,
in order, preempting the last running request when blocks run out (it restarts from zero at the
front of the waiting queue); waiting requests only in a step without preemption, strictly in
order (the head blocks the rest); then every request whose tokens are all computed gets one
token, and finished requests are freed in scheduling order."""

from __future__ import annotations

from collections import deque
from collections.abc import Callable
from dataclasses import dataclass

from kvplan.errors import KvplanError
from kvplan.semantics.engine.config import EngineConfig
from kvplan.semantics.engine.hashing import RequestBlockHasher
from kvplan.semantics.engine.kv_cache_manager import KVCacheManager
from kvplan.semantics.engine.request import Request, RequestStatus
from kvplan.semantics.engine.stats import PrefixCacheStats

# Called where vLLM's model runs, between scheduling and the update, with {request id: tokens}
# scheduled: each scheduled request has its new num_computed_tokens and its whole block table,
# and no finished request has been freed yet (kvplan profile --workload writes K/V here).
ModelRunner = Callable[["Scheduler", dict[str, int]], None]


@dataclass(frozen=True, slots=True)
class StepResult:
    """What one step did; cheap to build (no block tables or queue contents)."""

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


class Scheduler:
    def __init__(self, config: EngineConfig, model_runner: ModelRunner | None = None) -> None:
        config.validate()
        self.config = config
        self.model_runner = model_runner
        self.kv_cache_manager = KVCacheManager(
            config.num_gpu_blocks, config.block_size, config.max_model_len,
            enable_caching=config.enable_prefix_caching, kv_cache_groups=config.kv_cache_groups,
            enable_chunked_prefill=config.enable_chunked_prefill,
        )
        # Mamba "align" caching: prefill chunks end on block boundaries (vLLM's aligned split).
        self._mamba_align = config.mamba_cache_mode == "align"
        self.block_pool = self.kv_cache_manager.block_pool
        self.waiting: deque[Request] = deque()
        self.running: list[Request] = []
        self.requests: dict[str, Request] = {}
        self.prefix_cache_stats = PrefixCacheStats()
        self.num_steps = 0
        self.total_preemptions = 0
        self._block_hasher = (
            RequestBlockHasher(config.block_size, config.hash_seed) if config.enable_prefix_caching else None
        )

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
        return bool(self.running or self.waiting)

    def step(self) -> StepResult:
        config = self.config
        kv = self.kv_cache_manager
        running = self.running
        waiting = self.waiting
        max_model_len = config.max_model_len
        step = self.num_steps
        budget = config.max_num_batched_tokens
        scheduled: dict[str, int] = {}
        scheduled_requests: list[Request] = []
        preempted: list[str] = []
        block_size = config.block_size
        mamba_align = self._mamba_align
        kv.new_step_starts()

        # Preemption pops from the end of `running` (a request not yet scheduled, or this one, and
        # then the scan stops), so iterating the shrinking list visits exactly vLLM's requests.
        for request in running:
            if budget == 0:
                break
            computed = request.num_computed_tokens
            num_new = request.num_tokens - computed
            if num_new > budget:
                num_new = budget
            if num_new > max_model_len - 1 - computed:
                num_new = max_model_len - 1 - computed
            if mamba_align:
                num_new = mamba_aligned_chunk(request, num_new, 0, block_size)
            if num_new == 0:
                continue
            # Most decode steps neither need a block nor fill one: the manager says so in advance.
            if computed + num_new > request.kv_noop_limit:
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
            # vLLM advances num_computed_tokens after the whole schedule; doing it now is the same,
            # because FCFS preemption only ever takes requests not yet scheduled in this step.
            request.num_computed_tokens = computed + num_new
            scheduled[request.request_id] = num_new
            scheduled_requests.append(request)
            budget -= num_new

        admitted: list[str] = []
        resumed: list[str] = []
        prefix_hit_tokens: dict[str, int] = {}
        if not preempted:
            max_num_seqs = config.max_num_seqs
            chunked = config.enable_chunked_prefill
            while waiting and budget > 0 and len(running) < max_num_seqs:
                request = waiting[0]
                if request.num_computed_tokens == 0:
                    hit_blocks, num_hit = kv.get_computed_blocks(request)
                else:
                    hit_blocks, num_hit = (), 0
                num_new = request.num_tokens - num_hit
                if not chunked and num_new > budget:
                    break
                num_new = min(num_new, budget)
                if mamba_align:
                    num_new = mamba_aligned_chunk(request, num_new, num_hit, block_size)
                    if num_new == 0:
                        break
                if kv.allocate_slots(request, num_new, num_hit, hit_blocks) is None:
                    break
                waiting.popleft()
                running.append(request)
                request_id = request.request_id
                (resumed if request.status is RequestStatus.PREEMPTED else admitted).append(request_id)
                request.status = RequestStatus.RUNNING
                request.num_computed_tokens = num_hit + num_new
                if request.num_cached_tokens is None:
                    request.num_cached_tokens = num_hit
                if request.first_scheduled_step is None:
                    request.first_scheduled_step = step
                prefix_hit_tokens[request_id] = num_hit
                scheduled[request_id] = num_new
                scheduled_requests.append(request)
                budget -= num_new

        free_blocks_after_schedule = self.block_pool.num_free_blocks

        if self.model_runner is not None:
            self.model_runner(self, scheduled)
        finished = self._update(scheduled_requests, step)

        step_stats = kv.make_prefix_cache_stats()
        self.prefix_cache_stats.add(step_stats)
        self.num_steps += 1
        pool = self.block_pool
        return StepResult(
            step=step,
            scheduled=scheduled,
            num_scheduled_tokens=config.max_num_batched_tokens - budget,
            admitted=admitted,
            resumed=resumed,
            prefix_hit_tokens=prefix_hit_tokens,
            preempted=preempted,
            finished=finished,
            free_blocks_after_schedule=free_blocks_after_schedule,
            num_free_blocks=pool.num_free_blocks,
            num_used_blocks=pool.num_used_blocks,
            num_cached_blocks=pool.num_cached_blocks,
            num_evictable_cached_blocks=pool.num_evictable_cached_blocks,
            prefix_cache=step_stats,
            num_used_blocks_by_group=pool.num_used_blocks_by_group(),
        )

    def _update(self, scheduled_requests: list[Request], step: int) -> list[str]:
        """Give each fully computed request its next token (a partial prefill chunk gets none);
        free finished requests at once, in scheduling order: that order is the eviction order."""
        max_model_len = self.config.max_model_len
        finished: list[str] = []
        for request in scheduled_requests:
            if request.num_computed_tokens != request.num_tokens:
                continue
            request.append_output_token()
            if request.num_output_tokens >= request.max_tokens or request.num_tokens >= max_model_len:
                self._finish(request, step)
                finished.append(request.request_id)
        if finished:
            self.running = [r for r in self.running if r.status is RequestStatus.RUNNING]
        return finished

    def _finish(self, request: Request, step: int) -> None:
        request.status = RequestStatus.FINISHED_LENGTH_CAPPED
        request.finish_step = step
        self.kv_cache_manager.free(request)
        del self.requests[request.request_id]

    def _preempt(self, request: Request) -> None:
        self.kv_cache_manager.free(request)
        request.status = RequestStatus.PREEMPTED
        request.num_computed_tokens = 0
        request.num_preemptions += 1
        self.total_preemptions += 1
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


def mamba_aligned_chunk(request: Request, num_new: int, num_hit: int, block_size: int) -> int:
    """vLLM's `_mamba_block_aligned_split`: during prefill a chunk ends on a block boundary, or at
    the request's last block boundary, so that Mamba states are cached at block ends; 0 means the
    budget holds no whole block."""
    computed = request.num_computed_tokens + num_hit
    if computed < max(request.num_prompt_tokens, request.num_tokens - 1):
        last_boundary = request.num_tokens - request.num_tokens % block_size
        if computed + num_new < last_boundary:
            return num_new // block_size * block_size
        if computed < last_boundary < computed + num_new:
            return last_boundary - computed
    return num_new
