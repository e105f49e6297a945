"""The JSON Lines records of `kvplan replay` (docs/vllm/replay-contract.md §3).

Queue contents, block tables and the free queue cost time proportional to the batch and the pool,
so they are built here, per printed record, and never by the scheduler. `RecordEncoder` writes
the same text as `json.dumps(step_record(...))` several times faster: a running request's
full-attention block table only grows, so its JSON is kept and extended rather than re-encoded."""

from __future__ import annotations

import json
from collections import deque
from dataclasses import asdict
from typing import Any

from kvplan.semantics.engine.block_pool import KVCacheBlock
from kvplan.semantics.engine.config import EngineConfig
from kvplan.semantics.engine.groups import KVCacheGroup
from kvplan.semantics.engine.replay import ReplaySummary
from kvplan.semantics.engine.scheduler import Scheduler, StepResult
from kvplan.semantics.engine.stats import PrefixCacheStats

SUMMARY_SCHEMA_VERSION = 1


def step_record(result: StepResult, scheduler: Scheduler, arrived: list[str],
                dump_free_queue: bool = False) -> dict[str, Any]:
    """The record of one step as a dict, keys in the documented order."""
    record = _record_head(result, scheduler, arrived, dump_free_queue)
    record["running"] = [r.request_id for r in scheduler.running]
    record["waiting"] = [r.request_id for r in scheduler.waiting]
    record["block_tables"] = scheduler.block_tables()
    if scheduler.config.kv_cache_groups is not None:
        record["block_tables_by_group"] = scheduler.block_tables_by_group()
    return record


def summary_record(summary: ReplaySummary) -> dict[str, Any]:
    body = asdict(summary)
    config = body.pop("config")
    config.pop("kv_cache_groups")
    config.pop("release")
    config["vllm_version"] = summary.config.vllm_version
    if summary.config.kv_cache_groups is not None:
        config.update(groups_summary(summary.config))
    release = {"vllm_semantics": summary.config.vllm_version, "scheduling": summary.config.scheduling}
    return {"summary": {"schema_version": SUMMARY_SCHEMA_VERSION, **release, **body, "config": config}}


def groups_summary(config: EngineConfig) -> dict[str, Any]:
    """The summary's informational group keys, as the vLLM harness writes them."""
    assert config.kv_cache_groups is not None
    given = []
    for group in config.kv_cache_groups:
        entry: dict[str, Any] = {"type": group.spec.kind, **group.parameters}
        if group.block_size is not None:
            entry["block_size"] = group.block_size
        if group.prefill_checkpoint_alignment is not None:
            entry.update(checkpoint_fields(group))
        given.append(entry)
    fields: dict[str, Any] = {
        "kv_cache_groups": given,
        "kv_cache_group_specs": [{"spec": g.spec.__name__, "block_size": g.block_size,
                                  **(checkpoint_fields(g) if g.num_prefill_checkpoint_blocks else {})}
                                 for g in config.groups],
    }
    if config.mamba_cache_mode is not None:
        fields["mamba_cache_mode"] = config.mamba_cache_mode
    return fields


def checkpoint_fields(group: KVCacheGroup) -> dict[str, Any]:
    """A Mamba group's prefill checkpoint fields (vLLM 0.33.0's MambaSpec)."""
    return {"num_prefill_checkpoint_blocks": group.num_prefill_checkpoint_blocks,
            "prefill_checkpoint_alignment": group.prefill_checkpoint_alignment}


class _EncodedIds(dict[str, str]):
    """request id -> its JSON string, encoded once."""

    def __missing__(self, request_id: str) -> str:
        encoded = self[request_id] = json.dumps(request_id)
        return encoded


class RecordEncoder:
    """Encodes the step records of one replay, in order, as JSON text."""

    def __init__(self, dump_free_queue: bool = False) -> None:
        self.dump_free_queue = dump_free_queue
        self._ids = _EncodedIds()
        # request id -> (its block list, how many blocks are encoded, '"id": [ids]')
        self._tables: dict[str, tuple[list[KVCacheBlock], int, str]] = {}
        # The waiting queue as encoded ids, replayed from each step's arrivals, preemptions and
        # admissions: the queue is long and changes only at its ends.
        self._waiting: deque[str] = deque()

    def encode(self, result: StepResult, scheduler: Scheduler, arrived: list[str]) -> str:
        if scheduler.config.kv_cache_groups is not None or not scheduler.kv_cache_manager.is_full_attention:
            # Several tables per request, and window tables change in place (null blocks).
            return json.dumps(step_record(result, scheduler, arrived, self.dump_free_queue))
        head = _record_head(result, scheduler, arrived, self.dump_free_queue)
        ids = self._ids
        running = ", ".join([ids[r.request_id] for r in scheduler.running])
        waiting = ", ".join(self._waiting_json(result, scheduler, arrived))
        tables = ", ".join(self._tables_json(scheduler))
        return (f'{json.dumps(head)[:-1]}, "running": [{running}], "waiting": [{waiting}], '
                f'"block_tables": {{{tables}}}}}')

    def _waiting_json(self, result: StepResult, scheduler: Scheduler, arrived: list[str]) -> deque[str]:
        ids = self._ids
        mirror = self._waiting
        mirror.extend([ids[request_id] for request_id in arrived])
        for request_id in result.preempted:
            mirror.appendleft(ids[request_id])
        for _ in range(len(result.admitted) + len(result.resumed)):
            mirror.popleft()
        waiting = scheduler.waiting
        if len(mirror) != len(waiting) or (waiting and (
                mirror[0] != ids[waiting[0].request_id] or mirror[-1] != ids[waiting[-1].request_id])):
            # Someone else changed the queue (not the replay loop): start again from it.
            self._waiting = mirror = deque([ids[r.request_id] for r in waiting])
        return mirror

    def _tables_json(self, scheduler: Scheduler) -> list[str]:
        previous = self._tables
        current: dict[str, tuple[list[KVCacheBlock], int, str]] = {}
        req_to_blocks = scheduler.kv_cache_manager.managers[0].req_to_blocks
        parts = []
        for request in scheduler.running:
            request_id = request.request_id
            blocks = req_to_blocks[request_id]
            entry = previous.get(request_id)
            if entry is None or entry[0] is not blocks:
                # New, or re-admitted after a preemption (then it has a new block list).
                ids = ", ".join([str(b.block_id) for b in blocks])
                entry = (blocks, len(blocks), f"{self._ids[request_id]}: [{ids}]")
            elif entry[1] != len(blocks):
                added = ", ".join([str(b.block_id) for b in blocks[entry[1]:]])
                entry = (blocks, len(blocks), f"{entry[2][:-1]}, {added}]")
            current[request_id] = entry
            parts.append(entry[2])
        self._tables = current
        return parts


def _record_head(result: StepResult, scheduler: Scheduler, arrived: list[str],
                 dump_free_queue: bool) -> dict[str, Any]:
    usable = scheduler.config.num_gpu_blocks - 1
    record: dict[str, Any] = {
        "step": result.step,
        "arrived": arrived,
        "scheduled": result.scheduled,
        "num_scheduled_tokens": result.num_scheduled_tokens,
        "admitted": result.admitted,
        "resumed": result.resumed,
        "prefix_hit_tokens": result.prefix_hit_tokens,
        "preempted": result.preempted,
        "finished": result.finished,
        "free_blocks_after_schedule": result.free_blocks_after_schedule,
        "num_free_blocks": result.num_free_blocks,
        "num_used_blocks": result.num_used_blocks,
        "usage": 1.0 - result.num_free_blocks / usable,
        "num_cached_blocks": result.num_cached_blocks,
        "num_evictable_cached_blocks": result.num_evictable_cached_blocks,
    }
    if dump_free_queue:
        record["free_queue"] = scheduler.block_pool.free_block_ids()
    record["prefix_cache"] = _step_stats(result.prefix_cache)
    totals = scheduler.prefix_cache_stats
    record["prefix_cache_total"] = {
        "queries": totals.queries,
        "hits": totals.hits,
        "hit_rate": totals.hit_rate,
        "preempted_queries": totals.preempted_queries,
        "preempted_hits": totals.preempted_hits,
    }
    return record


def _step_stats(stats: PrefixCacheStats) -> dict[str, int]:
    return {
        "requests": stats.requests, "queries": stats.queries, "hits": stats.hits,
        "preempted_requests": stats.preempted_requests, "preempted_queries": stats.preempted_queries,
        "preempted_hits": stats.preempted_hits,
    }
