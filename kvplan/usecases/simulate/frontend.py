"""The serving front end: what a client of `vllm serve` sees beyond the engine's steps.

`vllm bench serve` times at the client. Between it and the engine core sits vLLM's API server,
one Python process that, for every request, parses the HTTP request, tokenizes the prompt and
hands it to the engine core, and, for every output token, detokenizes it and streams it back.
kvplan models that process as one serial server (first come, first served):

* each request costs ``request_s`` of its time before the engine sees the request;
* each step's output costs ``token_s`` per token before the client sees those tokens;
* every token reaches the client ``latency_s`` after the server sent it (the client's HTTP
  stack, the hop between the engine core and the server: time that occupies no serial resource);
* a stream's tokens reach its client ``stream_wait_s`` later for every stream already in flight
  when it was admitted: the server is one asyncio event loop, and a new stream's await points
  resume only after the output work of the streams in flight (on the L4 results, TTFT grows by
  about 3.5 ms per concurrent client while the engine's share barely moves). The engine does not
  wait for it; the client does.

When requests arrive faster than ``1 / (request_s + output tokens x token_s)``, they queue in the
front end: the throughput limit of the H100 result at ``--request-rate inf`` (docs/accuracy.md,
"Serving front end", gives the defaults and their sources). Streaming comes first: a step's tokens
go out as soon as they are produced, and the admission in progress waits for that work (the event
loop interleaves them; a strict queue would hold every token behind a backlog of admissions).
"""

from __future__ import annotations

import heapq
from dataclasses import dataclass

# defaults from the public `vllm bench serve` results (docs/accuracy.md, "Serving front end")
DEFAULT_REQUEST_MS = 8.5
DEFAULT_TOKEN_MS = 0.007
DEFAULT_LATENCY_MS = 14.5
DEFAULT_STREAM_WAIT_MS = 3.8


@dataclass(frozen=True)
class FrontEnd:
    request_s: float = DEFAULT_REQUEST_MS / 1e3
    token_s: float = DEFAULT_TOKEN_MS / 1e3
    latency_s: float = DEFAULT_LATENCY_MS / 1e3
    stream_wait_s: float = DEFAULT_STREAM_WAIT_MS / 1e3
    source: str = "defaults from public vllm bench serve results (docs/accuracy.md)"

    @property
    def method(self) -> str:
        return (f"serial API server: {self.request_s * 1e3:.3g} ms per request, {self.token_s * 1e3:.3g} ms per "
                f"output token, +{self.stream_wait_s * 1e3:.3g} ms per stream in flight at admission, "
                f"+{self.latency_s * 1e3:.3g} ms to the client ({self.source})")


class FrontEndQueue:
    """The API server's serial work in time order: ``admit`` and ``stream`` each return when that
    work is done (``busy_until``)."""

    __slots__ = ("arriving", "busy_until", "spec", "streaming")

    def __init__(self, spec: FrontEnd) -> None:
        self.spec = spec
        self.busy_until = 0.0
        self.streaming = 0                  # in the engine, their last token not yet at the client
        self.arriving: list[float] = []     # admitted, not yet in the engine: when they get there

    def admit(self, sent: float) -> tuple[float, float]:
        """A request sent at ``sent``: when it reaches the engine, and how much later than the
        server streams them its tokens reach its client."""
        start = max(self.busy_until, sent)     # the server takes the request up
        arriving = self.arriving
        while arriving and arriving[0] <= start:
            heapq.heappop(arriving)
            self.streaming += 1
        self.busy_until = reached = start + self.spec.request_s
        heapq.heappush(arriving, reached)
        return reached, self.spec.stream_wait_s * self.streaming

    def finished(self) -> None:
        """A stream's last token reached its client."""
        if self.streaming:
            self.streaming -= 1
        elif self.arriving:
            heapq.heappop(self.arriving)

    def stream(self, produced: float, tokens: int) -> float:
        """Tokens the engine produced at ``produced`` reach the client at the returned time."""
        work = self.spec.token_s * tokens
        if self.busy_until > produced:
            self.busy_until += work     # the admission in progress waits for the streaming
        return produced + work + self.spec.latency_s
