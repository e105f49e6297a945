"""Steady decodes advanced without per-request work (kvplan's bookkeeping, not vLLM's): the
scheduler's bulk fast path.

A running request in steady decode gets exactly one token in every batch: its counters grow by
one per step, and its blocks change only at steps known in advance (the step its next token
needs a block or fills one, the batch whose token completes a block's hash, the batch of its last
token). Such a request *cruises*: its `Request` counters are left as they were when it started
cruising, and only those steps touch it, through the very code the per-step path runs
(`KVCacheManager.allocate_slots`, `Scheduler._finish`), in vLLM's order. Every other step costs
nothing per cruising request; the step's batch counts them as a number and a sum of context lengths.

A cruising request's block hashes are brought up to date only where they are read: before its
`allocate_slots` calls (which cache its full blocks under them), at its finish and at landing. A
hash is a function of the tokens before it alone (`hashing.py`), and only the request's own
caching reads its hashes, so computing them then instead of at each batch's output changes no
value and no hit.

Cruising requests are always the leading requests of the running order (a request starts
cruising only when every request before it does), so vLLM's FCFS loop gives them their tokens
first. The scheduler brings every cruising request back to the per-step path (`Cruise.land`)
before a step in which that could stop being so: a token budget or a free queue that might not
cover them. Where the state of a cruising request stands (B: its computed tokens when it started
cruising, minus the step it started after; sigma: 1 under sync scheduling, where the newest token
is known and not computed at the start of a step, 0 under async, where it is computed, not known):

* schedule of step s: `num_computed_tokens == B + s - 1` before it, `B + s` after, and
  `num_tokens == B + s - 1 + sigma`;
* once its batch of step q is processed: `num_tokens == B + 1 + q`, `num_output_tokens == Ob + q`.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvplan.semantics.engine.hashing import RequestBlockHasher
    from kvplan.semantics.engine.kv_cache_manager import KVCacheManager
    from kvplan.semantics.engine.request import Request

# Steps after a landing before requests may start cruising again: under a pool or budget that
# binds, landings come in every step, and each is one pass over the cruising requests.
LANDING_COOLDOWN_STEPS = 32



class Cruiser:
    """One cruising request and the constants of its linear state."""

    __slots__ = ("base", "done", "last_batch", "output_base", "promoted_at", "request", "seq", "token_base")

    def __init__(self, request: Request, seq: int, step: int, base: int, token_base: int, output_base: int,
                 last_batch: int) -> None:
        self.request = request
        self.seq = seq
        self.promoted_at = step
        self.base = base                # B: computed == B + s - 1 at step s's schedule
        self.token_base = token_base    # B + 1: num_tokens == B + 1 + q once batch q is processed
        self.output_base = output_base  # Ob: num_output_tokens == Ob + q once batch q is processed
        self.last_batch = last_batch    # the batch of its last token
        self.done = False


class Cruise:
    """The cruising requests of one scheduler, in running order, and their pending events."""

    def __init__(self, kv: KVCacheManager, hasher: RequestBlockHasher | None, block_size: int,
                 is_async: bool, max_model_len: int) -> None:
        self.kv = kv
        self.hasher = hasher
        self.block_size = block_size
        self.is_async = is_async
        self.max_model_len = max_model_len
        # sigma: the known tokens past the computed ones at the start of a step
        self.known_ahead = 0 if is_async else 1
        self.cruisers: dict[str, Cruiser] = {}
        self.sum_base = 0
        # (step, seq, cruiser): the step's schedule calls allocate_slots for it
        self._schedule_events: list[tuple[int, int, Cruiser]] = []
        # (batch step, seq, cruiser): processing that batch gives it its last token
        self._output_events: list[tuple[int, int, Cruiser]] = []
        # async: cruising requests left out of a step's schedule (their last token is in flight)
        self._skipped: dict[int, tuple[int, int]] = {}
        self._seq = 0
        self.cooldown_until = 0

    def __len__(self) -> int:
        return len(self.cruisers)

    def requests(self) -> list[Request]:
        return [cruiser.request for cruiser in self.cruisers.values()]

    # ------------------------------------------------------------------------ joining

    def may_join(self, request: Request, step: int) -> bool:
        """Whether the request, leading the requests that run per step, decodes steadily from the
        next step until its last token: its counters are those of a steady decode past its
        prompt, and neither max_model_len nor its end comes within two steps."""
        computed = request.num_computed_tokens
        # Past its prompt: the step of its first token is one that lists it (callers time it).
        if computed + self.known_ahead != request.num_tokens or computed < request.num_prompt_tokens:
            return False
        if self.is_async:
            if request.num_output_placeholders != 1 or request.num_in_flight_tokens != 1:
                return False
        elif request.num_output_placeholders or request.num_in_flight_tokens:
            return False
        if request.num_prompt_tokens + request.max_tokens >= self.max_model_len - 1:
            return False
        return request.max_tokens - request.num_output_tokens >= 3

    def join(self, request: Request, step: int) -> None:
        """Start cruising after `step` (its batch of `step` is the last it is listed in)."""
        shift = 1 if self.is_async else 0
        base = request.num_computed_tokens - step
        output_base = request.num_output_tokens - step + shift
        cruiser = Cruiser(request, self._seq, step, base, base + 1, output_base, request.max_tokens - output_base)
        self._seq += 1
        self.cruisers[request.request_id] = cruiser
        self.sum_base += base
        self._push_schedule_event(cruiser, step + 1)
        heapq.heappush(self._output_events, (cruiser.last_batch, cruiser.seq, cruiser))
        if self.is_async:
            skipped_at = cruiser.last_batch + 1
            count, bases = self._skipped.get(skipped_at, (0, 0))
            self._skipped[skipped_at] = (count + 1, bases + base)

    def _push_schedule_event(self, cruiser: Cruiser, earliest: int) -> None:
        """The first step from `earliest` whose schedule calls allocate_slots for it, by the
        scheduler's own skip rule on the limits the last call left (`Scheduler._schedule`)."""
        request = cruiser.request
        base = cruiser.base
        step = max(earliest, request.kv_noop_limit - base + 1,
                   min(request.kv_slot_limit - base + 1, request.kv_known_noop_limit - base + 2 - self.known_ahead))
        if step <= cruiser.last_batch:
            heapq.heappush(self._schedule_events, (step, cruiser.seq, cruiser))

    # ------------------------------------------------------------------------ a step

    def scheduled(self, step: int) -> tuple[int, int]:
        """How many cruising requests step `step` schedules, and the sum of their computed tokens
        after it (its batch's context)."""
        count, bases = self._skipped.get(step, (0, 0))
        num = len(self.cruisers) - count
        return num, self.sum_base - bases + num * step

    def due(self, step: int) -> list[Cruiser]:
        """The cruising requests whose schedule of `step` calls allocate_slots, in running order."""
        self._skipped.pop(step - 1, None)
        events = self._schedule_events
        due = []
        while events and events[0][0] == step:
            cruiser = heapq.heappop(events)[2]
            if not cruiser.done:
                due.append(cruiser)
        return due

    def blocks_needed(self, due: list[Cruiser], step: int) -> int:
        """Free blocks the calls for `due` take at `step` (one token each: 0 or 1 block)."""
        block_size = self.block_size
        tables = self.kv.get_blocks
        return sum(1 for c in due if (c.base + step + block_size - 1) // block_size > len(tables(c.request.request_id)))

    def allocate(self, due: list[Cruiser], step: int) -> None:
        """The calls of step `step`'s schedule; the caller checked that the free queue covers them."""
        allocate_one_slot = self.kv.allocate_one_slot
        hasher = self.hasher
        for cruiser in due:
            request = cruiser.request
            computed = request.num_computed_tokens = cruiser.base + step - 1
            request.num_tokens = computed + self.known_ahead
            if hasher is not None:
                hasher.update(request)
            allocated = allocate_one_slot(request)
            assert allocated
            self._push_schedule_event(cruiser, step + 1)

    def process_batch(self, batch_step: int, finish: Callable[[Request], None], finished: list[str]) -> None:
        """Processing the batch of `batch_step`: requests that got their last token finish, in
        running order (their hashes brought up to date first, as the per-step path keeps them)."""
        events = self._output_events
        hasher = self.hasher
        while events and events[0][0] == batch_step:
            cruiser = heapq.heappop(events)[2]
            if cruiser.done:
                continue
            request = cruiser.request
            request.num_tokens = cruiser.token_base + batch_step
            if hasher is not None:
                hasher.update(request)
            request.num_output_tokens = request.max_tokens
            computed = request.num_computed_tokens = cruiser.base + batch_step
            request.num_output_placeholders = request.num_in_flight_tokens = 0
            if self.is_async and computed > request.kv_noop_limit:
                # Its last schedule came a step before its last known token: the block that token's
                # predecessor completes is cached now (`Scheduler._process_async_output`).
                self.kv.cache_blocks(request, computed)
            cruiser.done = True
            del self.cruisers[request.request_id]
            self.sum_base -= cruiser.base
            finish(request)
            finished.append(request.request_id)

    # ------------------------------------------------------------------------ landing

    def land(self, step: int) -> list[Cruiser]:
        """Every cruising request back to per-step work at the start of step `step` (counters as
        the per-step path would have them), in running order. Under async scheduling those that
        started cruising before step - 1 have a token in the batch of step - 1, still in flight,
        which lists none of them: the caller adds them there."""
        landed = list(self.cruisers.values())
        shift = 1 if self.is_async else 0
        for cruiser in self.cruisers.values():
            request = cruiser.request
            computed = request.num_computed_tokens = cruiser.base + step - 1
            request.num_tokens = computed + self.known_ahead
            request.num_output_tokens = cruiser.output_base - shift + step - 1
            request.num_output_placeholders = request.num_in_flight_tokens = shift
            if self.hasher is not None:
                self.hasher.update(request)
            cruiser.done = True
        self.cruisers = {}
        self.sum_base = 0
        self._schedule_events = []
        self._output_events = []
        self._skipped = {}
        self.cooldown_until = step + LANDING_COOLDOWN_STEPS
        return landed
