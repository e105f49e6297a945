"""The clients of a timed run: when each request is sent, and when the engine sees it.

Three arrangements, as `vllm bench serve` makes them:

* an open loop without a front end: a request reaches the engine when it arrives (kvplan's
  simulation before front ends; its runs are unchanged);
* an open loop through the serving front end (``frontend``): a request is sent when it arrives
  and reaches the engine once the API server has admitted it (``FrontEndQueue.admit``);
* a closed loop of N clients (``max_concurrency``): requests become ready when the arrival process
  says (at t=0 for `--request-rate inf`) and are sent, in order, as soon as one of the N clients is
  free; a client is free again when the last token of its request has reached it. vLLM's
  benchmark holds this with an asyncio semaphore around each request (`vllm/benchmarks/serve.py`,
  `limited_request_func`): every request waits its turn from the start, and the time a request
  waited for a client is not part of its latency (its TTFT counts from the moment it was sent).
"""

from __future__ import annotations

import heapq
from collections import deque

from kvplan.usecases.simulate.frontend import FrontEnd, FrontEndQueue


class Clients:
    """``pending`` is the engine's side: (time it reaches the engine, tie-breaker, ordinal)."""

    def __init__(self, ready: list[tuple[float, int]], max_concurrency: int | None,
                 frontend: FrontEnd | None) -> None:
        self.closed = max_concurrency is not None
        self.front = FrontEndQueue(frontend) if frontend is not None else None
        self.first_ready = min((time for time, _ in ready), default=0.0)
        self.tie = len(ready)
        self.sent: dict[int, float] = {}        # ordinal -> when its current request was sent
        self.offset: dict[int, float] = {}      # ordinal -> how much later its tokens reach the client
        self.sends: list[tuple[float, int, int]] = []   # sent, not yet admitted: (time, tie, ordinal)
        self.queue: deque[tuple[float, int]] = deque()  # ready, waiting for a free client
        self.pending: list[tuple[float, int, int]] = []
        self.direct = self.front is None and not self.closed
        if self.direct:
            self.pending = [(time, ordinal, ordinal) for time, ordinal in ready]
            heapq.heapify(self.pending)
            return
        ordered = sorted(ready)
        free = len(ordered) if max_concurrency is None else max_concurrency
        self.sends = [(time, ordinal, ordinal) for time, ordinal in ordered[:free]]
        heapq.heapify(self.sends)
        self.queue.extend(ordered[free:])

    @property
    def waiting(self) -> bool:
        """Something is still to reach the engine."""
        return bool(self.pending or self.sends or self.queue)

    def admit_until(self, time: float) -> None:
        """Every request the front end has taken up by ``time`` goes through it, in the order sent (a
        request is taken up once sent and once the server is done with the one before)."""
        sends = self.sends
        free = self.front.busy_until if self.front is not None else 0.0
        while sends and max(sends[0][0], free) <= time:
            self._admit(heapq.heappop(sends))
            free = self.front.busy_until if self.front is not None else 0.0

    def admit_next(self) -> None:
        """The engine is idle: the next request to be sent is sent and admitted."""
        if self.sends:
            self._admit(heapq.heappop(self.sends))

    def _admit(self, send: tuple[float, int, int]) -> None:
        time, tie, ordinal = send
        self.sent[ordinal] = time
        reached = time
        if self.front is not None:
            reached, self.offset[ordinal] = self.front.admit(time)
        heapq.heappush(self.pending, (reached, tie, ordinal))

    def sent_at(self, ordinal: int, reached: float) -> tuple[float, float]:
        """When the request that reached the engine at ``reached`` was sent by its client, and how
        much later than streamed its tokens reach the client."""
        return self.sent.pop(ordinal, reached), self.offset.pop(ordinal, 0.0)

    def release(self, time: float) -> None:
        """A client became free at ``time``: it sends the next ready request (a closed loop)."""
        if self.closed and self.queue:
            ready, ordinal = self.queue.popleft()
            self._send(max(ready, time), ordinal)

    def follow_up(self, ordinal: int, time: float) -> None:
        """A conversation's next turn, sent by the client that holds the conversation."""
        if self.direct:
            self.tie += 1
            heapq.heappush(self.pending, (time, self.tie, ordinal))
        else:
            self._send(time, ordinal)

    def _send(self, time: float, ordinal: int) -> None:
        self.tie += 1
        heapq.heappush(self.sends, (time, self.tie, ordinal))

    def finished(self) -> None:
        """A request's last token reached its client."""
        if self.front is not None:
            self.front.finished()

    def stream(self, produced: float, tokens: int) -> float:
        assert self.front is not None
        return self.front.stream(produced, tokens)
