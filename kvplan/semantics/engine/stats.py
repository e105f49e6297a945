"""Prefix-cache statistics as vLLM records them (`v1/metrics/stats.py::PrefixCacheStats`,
docs/vllm/kv-semantics.md §12); when a lookup is recorded is the release's `prefix_stats`."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass
class PrefixCacheStats:
    """Token counts of prefix-cache lookups; lookups by previously preempted requests apart."""

    requests: int = 0
    queries: int = 0
    hits: int = 0
    preempted_requests: int = 0
    preempted_queries: int = 0
    preempted_hits: int = 0

    def record(self, num_tokens: int, num_hits: int, preempted: bool) -> None:
        if preempted:
            self.preempted_requests += 1
            self.preempted_queries += num_tokens
            self.preempted_hits += num_hits
        else:
            self.requests += 1
            self.queries += num_tokens
            self.hits += num_hits

    def add(self, other: PrefixCacheStats) -> None:
        self.requests += other.requests
        self.queries += other.queries
        self.hits += other.hits
        self.preempted_requests += other.preempted_requests
        self.preempted_queries += other.preempted_queries
        self.preempted_hits += other.preempted_hits

    @property
    def hit_rate(self) -> float:
        """Hits over queries of never-preempted lookups, as vLLM's logged hit rate."""
        return self.hits / self.queries if self.queries else 0.0


# The statistics of an interval without lookups, shared by every such step: never recorded into.
NO_LOOKUPS = PrefixCacheStats()
