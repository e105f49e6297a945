#!/usr/bin/env python3
"""Differential peer: replay a request trace through vLLM's REAL v1 KV cache manager.

[replay_async17.py] = the 0.17.1 harness (replay.py, beside it) plus
`--scheduling async`: vLLM 0.17.1's real AsyncScheduler driven the way
EngineCore.step_with_batch_queue drives it (batch queue of 2 = UniProc/Multiproc
executor max_concurrent_batches with async_scheduling and pp=1).  See
docs/vllm/replay-async-0.17.1.md.  `--scheduling sync` (default) is byte-for-byte the
old harness (drivers minimal / vllm-scheduler / both).

Run it with the interpreter of the peer venv (see README.md next to this file):

    VENV/bin/python replay.py example_trace.json

Nothing here re-implements vLLM's block management: `KVCacheManager`,
`BlockPool`, `FreeKVCacheBlockQueue`, block hashing and `Request` are imported
from the installed vLLM (reference version 0.17.1).  Only the scheduler loop is
ours (driver "minimal"); it is a line-by-line transcription of the subset of
`vllm/v1/core/sched/scheduler.py::Scheduler.schedule()` / `update_from_output()`
that a text-only, FCFS, synchronous, no-spec-decode, no-KV-connector engine
executes.  Driver "vllm-scheduler" instead drives vLLM's real `Scheduler` class
(synchronous variant) with a fake model runner, and driver "both" runs the two
and checks that they produce identical per-step logs.

Trace semantics (the contract another implementation must reproduce)
--------------------------------------------------------------------
Trace file: JSON object
  {
    "config": {                       # all optional except num_gpu_blocks
      "num_gpu_blocks": 64,           # size of the block pool INCLUDING the null block (id 0)
      "block_size": 16,
      "enable_prefix_caching": true,
      "max_num_batched_tokens": 2048, # per-step token budget
      "max_num_seqs": 128,            # max running requests
      "max_model_len": 4096,
      "enable_chunked_prefill": true,
      "hash_algo": "sha256",          # sha256 | sha256_cbor | xxhash | xxhash_cbor
      "hash_seed": "0"                # value used as PYTHONHASHSEED for NONE_HASH
    },
    "requests": [ {request}, ... ]
  }
  request:
    "request_id": str
    "arrival_step": int >= 0          # added to the waiting queue at the start of that step
    "max_tokens": int >= 1            # number of tokens to generate (EOS is never produced)
    and EITHER "prompt_token_ids": [int, ...]
    OR "prefix_id": int >= 0, "prefix_len": int >= 0, "unique_len": int >= 0
       -> prompt = [PREFIX_BASE + prefix_id*STRIDE + j for j in range(prefix_len)]
                 + [UNIQUE_BASE + ordinal*STRIDE + k for k in range(unique_len)]
    optional "output_token_ids": [int, ...]  # tokens to "sample"; default
       output token n = OUTPUT_BASE + ordinal*STRIDE + n
  where ordinal = 0-based position of the request in the "requests" array,
  PREFIX_BASE = 1_000_000_000, UNIQUE_BASE = 2_000_000_000,
  OUTPUT_BASE = 3_000_000_000, STRIDE = 1_000_000.

Step loop (driver "minimal"; identical to vLLM 0.17.1 synchronous Scheduler):
  for step = 0, 1, 2, ...:
   1. ARRIVALS: requests with arrival_step == step are appended to the tail of
      the FIFO waiting queue, in trace order.
   2. SCHEDULE, token_budget = max_num_batched_tokens:
      a. RUNNING requests, in running-list order, while budget > 0:
           n = num_tokens - num_computed_tokens          (decode: 1)
           n = min(n, budget, max_model_len - 1 - num_computed_tokens)
           if n == 0: skip request
           loop: blocks = KVCacheManager.allocate_slots(req, n)
                 if blocks: break
                 victim = running.pop()   # LAST element of running (FCFS policy)
                 PREEMPT victim: kv.free(victim); victim.num_computed_tokens = 0;
                   status = PREEMPTED; victim.num_preemptions += 1;
                   waiting.appendleft(victim)     # front of the waiting queue
                 if victim is req: break
           if req could not be scheduled: stop scanning running requests
           budget -= n
      b. WAITING requests (only if NO preemption happened in this step), FIFO:
           while waiting and budget > 0 and len(running) < max_num_seqs:
             req = waiting[0]
             hit_blocks, hit_tokens = KVCacheManager.get_computed_blocks(req)
             n = num_tokens - hit_tokens
             if not chunked_prefill and n > budget: stop
             n = min(n, budget)
             blocks = allocate_slots(req, n, hit_tokens, hit_blocks)
             if blocks is None: stop (the head request stays at the head)
             pop it; append to running; num_computed_tokens = hit_tokens;
             budget -= n
      c. every scheduled request: num_computed_tokens += n
   3. EXECUTE/UPDATE, in scheduling order (running first, then admitted):
      a request whose num_computed_tokens == num_tokens (prefill complete or
      decode) receives ONE output token (partial prefill chunks receive none).
      It finishes when num_output_tokens >= max_tokens or num_tokens >=
      max_model_len; a finished request is removed from running and its blocks
      are freed immediately (kv.free, in this order).
   4. LOG one JSON line for the step (after step 3).
  The run ends when no request is waiting, running or yet to arrive.  If a
  step schedules nothing while requests are present and none will arrive, the
  run stops with "stalled": a request cannot fit even alone.

Output: one JSON object per line (JSONL) per step, then a {"summary": ...}
line.  Fields are documented in README.md.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections import deque
from dataclasses import dataclass, field
from typing import Any

PREFIX_BASE = 1_000_000_000
UNIQUE_BASE = 2_000_000_000
OUTPUT_BASE = 3_000_000_000
STRIDE = 1_000_000

DEFAULT_CONFIG: dict[str, Any] = {
    "num_gpu_blocks": None,
    "block_size": 16,
    "enable_prefix_caching": True,
    "max_num_batched_tokens": 2048,  # vllm SchedulerConfig.DEFAULT_MAX_NUM_BATCHED_TOKENS
    "max_num_seqs": 128,  # vllm SchedulerConfig.DEFAULT_MAX_NUM_SEQS
    "max_model_len": 4096,
    "enable_chunked_prefill": True,
    "hash_algo": "sha256",  # vllm CacheConfig.prefix_caching_hash_algo default
    "hash_seed": "0",
    # Only used to build the (irrelevant to block accounting) attention spec;
    # defaults are Qwen2-0.5B-Instruct.
    "num_kv_heads": 2,
    "head_size": 64,
    "dtype": "bfloat16",
}


# --------------------------------------------------------------------------
# vLLM import (quiet) -------------------------------------------------------
# --------------------------------------------------------------------------
def _import_vllm(hash_seed: str):
    # NONE_HASH (the parent hash of the first block) is derived from
    # PYTHONHASHSEED when set; fix it so block hashes are reproducible.
    os.environ["PYTHONHASHSEED"] = str(hash_seed)
    os.environ.setdefault("VLLM_LOGGING_LEVEL", "ERROR")
    os.environ.setdefault("VLLM_CONFIGURE_LOGGING", "1")
    import torch  # noqa: F401

    import vllm  # noqa: F401
    from vllm.sampling_params import SamplingParams
    from vllm.utils.hashing import get_hash_fn_by_name
    from vllm.v1.core.kv_cache_manager import KVCacheManager
    from vllm.v1.core.kv_cache_utils import get_request_block_hasher, init_none_hash
    from vllm.v1.kv_cache_interface import (
        FullAttentionSpec,
        KVCacheConfig,
        KVCacheGroupSpec,
    )
    from vllm.v1.request import Request, RequestStatus

    return dict(
        vllm=vllm,
        torch=torch,
        SamplingParams=SamplingParams,
        get_hash_fn_by_name=get_hash_fn_by_name,
        KVCacheManager=KVCacheManager,
        get_request_block_hasher=get_request_block_hasher,
        init_none_hash=init_none_hash,
        FullAttentionSpec=FullAttentionSpec,
        KVCacheConfig=KVCacheConfig,
        KVCacheGroupSpec=KVCacheGroupSpec,
        Request=Request,
        RequestStatus=RequestStatus,
    )


# --------------------------------------------------------------------------
# Trace handling -------------------------------------------------------------
# --------------------------------------------------------------------------
@dataclass
class TraceRequest:
    ordinal: int
    request_id: str
    arrival_step: int
    max_tokens: int
    prompt_token_ids: list[int]
    output_token_ids: list[int] | None = None

    def output_token(self, n: int) -> int:
        if self.output_token_ids is not None and n < len(self.output_token_ids):
            return int(self.output_token_ids[n])
        return OUTPUT_BASE + self.ordinal * STRIDE + n


def build_prompt(ordinal: int, spec: dict[str, Any]) -> list[int]:
    if "prompt_token_ids" in spec:
        return [int(t) for t in spec["prompt_token_ids"]]
    prefix_id = int(spec.get("prefix_id", 0))
    prefix_len = int(spec.get("prefix_len", 0))
    unique_len = int(spec.get("unique_len", 0))
    if not (0 <= prefix_len < STRIDE and 0 <= unique_len < STRIDE and prefix_id >= 0):
        raise ValueError(f"bad prefix description in request #{ordinal}: {spec}")
    prefix = [PREFIX_BASE + prefix_id * STRIDE + j for j in range(prefix_len)]
    unique = [UNIQUE_BASE + ordinal * STRIDE + k for k in range(unique_len)]
    return prefix + unique


def load_trace(path: str) -> tuple[dict[str, Any], list[TraceRequest]]:
    with open(path) as f:
        data = json.load(f)
    cfg = dict(DEFAULT_CONFIG)
    cfg.update(data.get("config", {}))
    reqs = []
    seen = set()
    for i, r in enumerate(data["requests"]):
        rid = str(r["request_id"])
        if rid in seen:
            raise ValueError(f"duplicate request_id {rid}")
        seen.add(rid)
        prompt = build_prompt(i, r)
        if len(prompt) == 0:
            raise ValueError(f"request {rid} has an empty prompt")
        reqs.append(
            TraceRequest(
                ordinal=i,
                request_id=rid,
                arrival_step=int(r.get("arrival_step", 0)),
                max_tokens=int(r["max_tokens"]),
                prompt_token_ids=prompt,
                output_token_ids=r.get("output_token_ids"),
            )
        )
    return cfg, reqs


# --------------------------------------------------------------------------
# Common helpers ------------------------------------------------------------
# --------------------------------------------------------------------------
class Env:
    """Holds the imported vLLM symbols and the per-run objects shared by drivers."""

    def __init__(self, cfg: dict[str, Any]):
        self.cfg = cfg
        self.v = _import_vllm(cfg["hash_seed"])
        v = self.v
        torch = v["torch"]
        self.block_size = int(cfg["block_size"])
        self.spec = v["FullAttentionSpec"](
            block_size=self.block_size,
            num_kv_heads=int(cfg["num_kv_heads"]),
            head_size=int(cfg["head_size"]),
            dtype=getattr(torch, cfg["dtype"]),
        )
        self.kv_cache_config = v["KVCacheConfig"](
            num_blocks=int(cfg["num_gpu_blocks"]),
            kv_cache_tensors=[],
            kv_cache_groups=[v["KVCacheGroupSpec"](["model.layers.0.self_attn"], self.spec)],
        )
        self.block_hasher = None
        if cfg["enable_prefix_caching"]:
            # Exactly what vllm/v1/engine/core.py does at engine start-up.
            hash_fn = v["get_hash_fn_by_name"](cfg["hash_algo"])
            v["init_none_hash"](hash_fn)
            self.block_hasher = v["get_request_block_hasher"](self.block_size, hash_fn)

    def make_request(self, tr: TraceRequest):
        v = self.v
        sp = v["SamplingParams"](max_tokens=tr.max_tokens, ignore_eos=True)
        return v["Request"](
            request_id=tr.request_id,
            prompt_token_ids=list(tr.prompt_token_ids),
            sampling_params=sp,
            pooling_params=None,
            arrival_time=float(tr.arrival_step) + tr.ordinal * 1e-6,
            block_hasher=self.block_hasher,
        )


def pool_snapshot(kvm, dump_free_queue: bool) -> dict[str, Any]:
    bp = kvm.block_pool
    snap = {
        "num_free_blocks": bp.get_num_free_blocks(),
        "num_used_blocks": bp.num_gpu_blocks - 1 - bp.get_num_free_blocks(),
        "usage": kvm.usage,
        # blocks that currently carry a prefix-cache hash (in use or evictable)
        "num_cached_blocks": sum(1 for b in bp.blocks if b.block_hash is not None),
        "num_evictable_cached_blocks": sum(
            1 for b in bp.blocks if b.block_hash is not None and b.ref_cnt == 0
        ),
    }
    if dump_free_queue:
        snap["free_queue"] = [b.block_id for b in bp.free_block_queue.get_all_free_blocks()]
    return snap


def stats_dict(st) -> dict[str, int]:
    if st is None:
        return {"requests": 0, "queries": 0, "hits": 0, "preempted_requests": 0,
                "preempted_queries": 0, "preempted_hits": 0}
    return {
        "requests": st.requests,
        "queries": st.queries,
        "hits": st.hits,
        "preempted_requests": st.preempted_requests,
        "preempted_queries": st.preempted_queries,
        "preempted_hits": st.preempted_hits,
    }


class Totals:
    def __init__(self):
        self.q = self.h = self.pq = self.ph = 0

    def add(self, s: dict[str, int]) -> dict[str, Any]:
        self.q += s["queries"]
        self.h += s["hits"]
        self.pq += s["preempted_queries"]
        self.ph += s["preempted_hits"]
        return {
            "queries": self.q,
            "hits": self.h,
            "hit_rate": (self.h / self.q) if self.q else 0.0,
            "preempted_queries": self.pq,
            "preempted_hits": self.ph,
        }


# --------------------------------------------------------------------------
# Driver 1: minimal scheduler loop over the real KVCacheManager -------------
# --------------------------------------------------------------------------
def run_minimal(cfg, trace, dump_free_queue=False, max_steps=100000):
    env = Env(cfg)
    v = env.v
    RS = v["RequestStatus"]
    kvm = v["KVCacheManager"](
        kv_cache_config=env.kv_cache_config,
        max_model_len=int(cfg["max_model_len"]),
        hash_block_size=env.block_size,
        enable_caching=bool(cfg["enable_prefix_caching"]),
        use_eagle=False,
        log_stats=True,
    )
    max_model_len = int(cfg["max_model_len"])
    max_num_seqs = int(cfg["max_num_seqs"])
    chunked = bool(cfg["enable_chunked_prefill"])

    by_step: dict[int, list[TraceRequest]] = {}
    for tr in trace:
        by_step.setdefault(tr.arrival_step, []).append(tr)
    last_arrival = max(by_step) if by_step else -1
    tmeta = {tr.request_id: tr for tr in trace}

    waiting: deque = deque()
    running: list = []
    totals = Totals()
    per_req: dict[str, dict[str, Any]] = {}
    out_lines = []
    step = 0
    stalled = False
    while True:
        # 1. arrivals
        arrived = []
        for tr in by_step.get(step, []):
            req = env.make_request(tr)
            waiting.append(req)
            arrived.append(tr.request_id)
            per_req[tr.request_id] = {"arrival_step": step, "first_scheduled_step": None,
                                      "finish_step": None, "num_preemptions": 0,
                                      "num_cached_tokens": None}
        if not waiting and not running and step > last_arrival:
            break
        if step >= max_steps:
            break

        # 2. schedule
        kvm.new_step_starts()
        budget = int(cfg["max_num_batched_tokens"])
        scheduled: dict[str, int] = {}
        sched_reqs: list = []
        admitted, resumed, preempted = [], [], []
        hit_tokens: dict[str, int] = {}
        i = 0
        while i < len(running) and budget > 0:
            req = running[i]
            n = req.num_tokens - req.num_computed_tokens
            n = min(n, budget)
            n = min(n, max_model_len - 1 - req.num_computed_tokens)
            if n == 0:
                i += 1
                continue
            while True:
                new_blocks = kvm.allocate_slots(req, n, num_lookahead_tokens=0)
                if new_blocks is not None:
                    break
                victim = running.pop()
                kvm.free(victim)
                victim.status = RS.PREEMPTED
                victim.num_computed_tokens = 0
                victim.num_preemptions += 1
                waiting.appendleft(victim)
                preempted.append(victim.request_id)
                if victim is req:
                    break
            if new_blocks is None:
                break
            scheduled[req.request_id] = n
            sched_reqs.append(req)
            budget -= n
            i += 1

        if not preempted:
            while waiting and budget > 0:
                if len(running) == max_num_seqs:
                    break
                req = waiting[0]
                assert req.num_computed_tokens == 0
                hit_blocks, n_hit = kvm.get_computed_blocks(req)
                n = req.num_tokens - n_hit
                if not chunked and n > budget:
                    break
                n = min(n, budget)
                new_blocks = kvm.allocate_slots(
                    req, n, num_new_computed_tokens=n_hit,
                    new_computed_blocks=hit_blocks, num_lookahead_tokens=0,
                )
                if new_blocks is None:
                    break
                waiting.popleft()
                running.append(req)
                (resumed if req.status == RS.PREEMPTED else admitted).append(req.request_id)
                req.status = RS.RUNNING
                req.num_computed_tokens = n_hit
                if req.num_cached_tokens < 0:
                    req.num_cached_tokens = n_hit
                hit_tokens[req.request_id] = n_hit
                scheduled[req.request_id] = n
                sched_reqs.append(req)
                budget -= n
        for req in sched_reqs:
            req.num_computed_tokens += scheduled[req.request_id]
        after_sched = pool_snapshot(kvm, False)

        # 3. execute + update
        finished = []
        for req in sched_reqs:
            if req.num_computed_tokens < req.num_tokens:
                continue  # partial prefill chunk: no sampled token
            tr = tmeta[req.request_id]
            req.append_output_token_ids(tr.output_token(req.num_output_tokens))
            if req.num_tokens >= max_model_len or req.num_output_tokens >= req.max_tokens:
                req.status = RS.FINISHED_LENGTH_CAPPED
                running.remove(req)
                kvm.free(req)
                finished.append(req.request_id)

        # 4. log
        st = stats_dict(kvm.make_prefix_cache_stats())
        rec = make_record(step, arrived, scheduled, admitted, resumed, preempted,
                          finished, hit_tokens, st, totals, after_sched,
                          pool_snapshot(kvm, dump_free_queue), running, waiting, kvm)
        update_per_req(per_req, rec, running, waiting)
        out_lines.append(rec)
        if not scheduled and (running or waiting) and step >= last_arrival:
            stalled = True
            break
        step += 1
    return out_lines, make_summary(cfg, out_lines, per_req, totals, stalled)


def make_record(step, arrived, scheduled, admitted, resumed, preempted, finished,
                hit_tokens, st, totals, after_sched, end, running, waiting, kvm):
    rec: dict[str, Any] = {"step": step}
    rec["arrived"] = arrived
    rec["scheduled"] = scheduled
    rec["num_scheduled_tokens"] = sum(scheduled.values())
    rec["admitted"] = admitted
    rec["resumed"] = resumed
    rec["prefix_hit_tokens"] = hit_tokens
    rec["preempted"] = preempted
    rec["finished"] = finished
    rec["free_blocks_after_schedule"] = after_sched["num_free_blocks"]
    rec.update(end)
    rec["prefix_cache"] = st
    rec["prefix_cache_total"] = totals.add(st)
    rec["running"] = [r.request_id for r in running]
    rec["waiting"] = [r.request_id for r in waiting]
    rec["block_tables"] = {
        r.request_id: kvm.get_block_ids(r.request_id)[0] for r in running
    }
    return rec


def update_per_req(per_req, rec, running, waiting):
    for rid in list(rec["admitted"]) + list(rec["resumed"]):
        if per_req[rid]["first_scheduled_step"] is None:
            per_req[rid]["first_scheduled_step"] = rec["step"]
            per_req[rid]["num_cached_tokens"] = rec["prefix_hit_tokens"].get(rid)
    for rid in rec["preempted"]:
        per_req[rid]["num_preemptions"] += 1
    for rid in rec["finished"]:
        per_req[rid]["finish_step"] = rec["step"]


def make_summary(cfg, lines, per_req, totals, stalled):
    return {
        "summary": {
            "config": {k: cfg[k] for k in DEFAULT_CONFIG},
            "num_steps": len(lines),
            "stalled": stalled,
            "num_finished": sum(1 for r in per_req.values() if r["finish_step"] is not None),
            "num_requests": len(per_req),
            "total_preemptions": sum(r["num_preemptions"] for r in per_req.values()),
            "prefix_cache_queries": totals.q,
            "prefix_cache_hits": totals.h,
            "prefix_cache_hit_rate": (totals.h / totals.q) if totals.q else 0.0,
            "preempted_queries": totals.pq,
            "preempted_hits": totals.ph,
            "max_used_blocks": max(
                [(cfg["num_gpu_blocks"] - 1 - l["free_blocks_after_schedule"]) for l in lines]
                or [0]
            ),
            "requests": per_req,
        }
    }


# --------------------------------------------------------------------------
# Driver 2: vLLM's real Scheduler (synchronous) + fake model runner ---------
# --------------------------------------------------------------------------
def run_vllm_scheduler(cfg, trace, dump_free_queue=False, max_steps=100000):
    from types import SimpleNamespace

    env = Env(cfg)
    from vllm.config import CacheConfig, DeviceConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.scheduler import Scheduler
    from vllm.v1.outputs import ModelRunnerOutput

    max_model_len = int(cfg["max_model_len"])
    sc = SchedulerConfig(
        max_model_len=max_model_len,
        is_encoder_decoder=False,
        max_num_batched_tokens=int(cfg["max_num_batched_tokens"]),
        max_num_seqs=int(cfg["max_num_seqs"]),
        enable_chunked_prefill=bool(cfg["enable_chunked_prefill"]),
        async_scheduling=False,
    )
    cc = CacheConfig(block_size=env.block_size,
                     enable_prefix_caching=bool(cfg["enable_prefix_caching"]),
                     prefix_caching_hash_algo=cfg["hash_algo"])
    vc = VllmConfig(scheduler_config=sc, cache_config=cc,
                    device_config=DeviceConfig(device="cpu"))
    vc.cache_config.num_gpu_blocks = int(cfg["num_gpu_blocks"])
    # Narrow stubs: no model is loaded; the scheduler only reads these fields.
    object.__setattr__(vc, "model_config", SimpleNamespace(
        is_encoder_decoder=False, max_model_len=max_model_len,
        enable_return_routed_experts=False))
    sched = Scheduler(
        vllm_config=vc,
        kv_cache_config=env.kv_cache_config,
        structured_output_manager=SimpleNamespace(should_advance=lambda r: False),
        block_size=env.block_size,
        mm_registry=SimpleNamespace(supports_multimodal_inputs=lambda m: False),
        log_stats=True,
    )
    kvm = sched.kv_cache_manager

    by_step: dict[int, list[TraceRequest]] = {}
    for tr in trace:
        by_step.setdefault(tr.arrival_step, []).append(tr)
    last_arrival = max(by_step) if by_step else -1
    tmeta = {tr.request_id: tr for tr in trace}
    totals = Totals()
    per_req: dict[str, dict[str, Any]] = {}
    out_lines = []
    step = 0
    stalled = False
    while True:
        arrived = []
        for tr in by_step.get(step, []):
            sched.add_request(env.make_request(tr))
            arrived.append(tr.request_id)
            per_req[tr.request_id] = {"arrival_step": step, "first_scheduled_step": None,
                                      "finish_step": None, "num_preemptions": 0,
                                      "num_cached_tokens": None}
        if not sched.running and not sched.waiting and step > last_arrival:
            break
        if step >= max_steps:
            break
        so = sched.schedule()
        scheduled = dict(so.num_scheduled_tokens)
        admitted = [r.req_id for r in so.scheduled_new_reqs]
        resumed = [rid for rid in so.scheduled_cached_reqs.req_ids
                   if rid in so.scheduled_cached_reqs.resumed_req_ids]
        # Preempted requests were prepended one by one to the waiting queue
        # (and no waiting request is admitted in a step with preemptions), so
        # the first k waiting entries are the victims in reverse order.
        k = len(so.preempted_req_ids)
        preempted = [r.request_id for r in list(sched.waiting)[:k]][::-1]
        assert set(preempted) == set(so.preempted_req_ids)
        hit_tokens = {rid: sched.requests[rid].num_computed_tokens - scheduled[rid]
                      for rid in admitted + resumed}
        after_sched = pool_snapshot(kvm, False)
        ids = list(scheduled)
        sampled = []
        for rid in ids:
            req = sched.requests[rid]
            if req.num_computed_tokens >= req.num_tokens:
                sampled.append([tmeta[rid].output_token(req.num_output_tokens)])
            else:
                sampled.append([])
        mro = ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                sampled_token_ids=sampled)
        outs = sched.update_from_output(so, mro)
        finished, st = [], None
        for eco in outs.values():
            for o in eco.outputs:
                if o.finish_reason is not None:
                    finished.append(o.request_id)
            if eco.scheduler_stats is not None:
                st = eco.scheduler_stats.prefix_cache_stats
        # order finished by scheduling order (outputs may be grouped per client)
        finished.sort(key=ids.index)
        st = stats_dict(st)
        rec = make_record(step, arrived, scheduled, admitted, resumed, preempted,
                          finished, hit_tokens, st, totals, after_sched,
                          pool_snapshot(kvm, dump_free_queue), sched.running,
                          sched.waiting, kvm)
        update_per_req(per_req, rec, sched.running, sched.waiting)
        out_lines.append(rec)
        if not scheduled and (sched.running or sched.waiting) and step >= last_arrival:
            stalled = True
            break
        step += 1
    return out_lines, make_summary(cfg, out_lines, per_req, totals, stalled)




# --------------------------------------------------------------------------
# Driver 3: vLLM 0.17.1's real AsyncScheduler + batch queue (async scheduling)
# --------------------------------------------------------------------------
ASYNC_BATCH_QUEUE_SIZE = 2  # UniProcExecutor/MultiprocExecutor.max_concurrent_batches
                            # with async_scheduling and pp_size == 1 (vLLM 0.17.1)


def build_async_scheduler(cfg, env):
    from types import SimpleNamespace

    from vllm.config import CacheConfig, DeviceConfig, SchedulerConfig, VllmConfig
    from vllm.v1.core.sched.async_scheduler import AsyncScheduler

    max_model_len = int(cfg["max_model_len"])
    sc = SchedulerConfig(
        max_model_len=max_model_len,
        is_encoder_decoder=False,
        max_num_batched_tokens=int(cfg["max_num_batched_tokens"]),
        max_num_seqs=int(cfg["max_num_seqs"]),
        enable_chunked_prefill=bool(cfg["enable_chunked_prefill"]),
        async_scheduling=True,
    )
    cc = CacheConfig(block_size=env.block_size,
                     enable_prefix_caching=bool(cfg["enable_prefix_caching"]),
                     prefix_caching_hash_algo=cfg["hash_algo"])
    vc = VllmConfig(scheduler_config=sc, cache_config=cc,
                    device_config=DeviceConfig(device="cpu"))
    assert vc.scheduler_config.async_scheduling is True
    # what EngineCore would instantiate for this config
    assert vc.scheduler_config.get_scheduler_cls() is AsyncScheduler
    vc.cache_config.num_gpu_blocks = int(cfg["num_gpu_blocks"])
    object.__setattr__(vc, "model_config", SimpleNamespace(
        is_encoder_decoder=False, max_model_len=max_model_len,
        enable_return_routed_experts=False))
    sched = AsyncScheduler(
        vllm_config=vc,
        kv_cache_config=env.kv_cache_config,
        structured_output_manager=SimpleNamespace(should_advance=lambda r: False),
        block_size=env.block_size,
        mm_registry=SimpleNamespace(supports_multimodal_inputs=lambda m: False),
        log_stats=True,
    )
    assert sched.num_lookahead_tokens == 0 and sched.num_spec_tokens == 0
    return sched


def run_async(cfg, trace, dump_free_queue=False, max_steps=100000):
    """EngineCore.step_with_batch_queue (vLLM 0.17.1), one call = one trace step:

      if scheduler.has_requests():
          B = schedule(); push B (newest at the left)
          if B scheduled >0 tokens and len(queue) < 2 and the OLDEST queued batch's
             output is not ready yet: return            # no update this step
      elif queue empty: return
      pop the OLDEST batch and update_from_output(it, its output)

    The readiness test (`not batch_queue[-1][0].done()`) is GPU timing; here the
    just-launched batch is never ready (GPU slower than the CPU scheduler: the
    pipelined steady state async scheduling is built for).  The fake model output
    of batch B gives one sampled token to every request of B that was not a
    partial prefill chunk right after B's schedule (Request.is_prefill_chunk,
    which counts output placeholders), preempted requests included.
    """
    from vllm.v1.outputs import ModelRunnerOutput

    env = Env(cfg)
    sched = build_async_scheduler(cfg, env)
    kvm = sched.kv_cache_manager
    RS = env.v["RequestStatus"]

    by_step: dict[int, list[TraceRequest]] = {}
    for tr in trace:
        by_step.setdefault(tr.arrival_step, []).append(tr)
    last_arrival = max(by_step) if by_step else -1
    tmeta = {tr.request_id: tr for tr in trace}
    totals = Totals()
    per_req: dict[str, dict[str, Any]] = {}
    reqobj: dict[str, Any] = {}
    out_lines = []
    batch_queue: deque = deque()  # (scheduler_output, sampler ids); left = newest
    step = 0
    stalled = False

    def do_update(so, samplers):
        ids = list(so.num_scheduled_tokens)
        sampled = []
        for rid in ids:
            req = sched.requests.get(rid)
            if rid in samplers and req is not None:
                sampled.append([tmeta[rid].output_token(req.num_output_tokens)])
            else:
                sampled.append([])
        mro = ModelRunnerOutput(req_ids=ids, req_id_to_index={r: i for i, r in enumerate(ids)},
                                sampled_token_ids=sampled)
        outs = sched.update_from_output(so, mro)
        fin = []
        for eco in outs.values():
            for o in eco.outputs:
                if o.finish_reason is not None:
                    fin.append(o.request_id)
            if eco.scheduler_stats is not None:
                ps = eco.scheduler_stats.prefix_cache_stats
                # lookups are only made by schedule(); they were taken right after it
                assert ps is None or (ps.requests == 0 and ps.preempted_requests == 0), ps
        fin.sort(key=ids.index)
        return fin

    while True:
        arrived = []
        for tr in by_step.get(step, []):
            reqobj[tr.request_id] = env.make_request(tr)
            sched.add_request(reqobj[tr.request_id])
            arrived.append(tr.request_id)
            per_req[tr.request_id] = {"arrival_step": step, "first_scheduled_step": None,
                                      "finish_step": None, "num_preemptions": 0,
                                      "num_cached_tokens": None}
        inflight = any(so.total_num_scheduled_tokens > 0 for so, _ in batch_queue)
        if not sched.running and not sched.waiting and not inflight and step > last_arrival:
            break
        if step >= max_steps:
            break
        scheduled: dict[str, int] = {}
        admitted, resumed, preempted, hit_tokens = [], [], [], {}
        st = stats_dict(None)
        after_sched = None
        do_pop = True
        assert len(batch_queue) < ASYNC_BATCH_QUEUE_SIZE
        if sched.has_requests():
            so = sched.schedule()
            # lookups recorded by this schedule() (0.17.1: every lookup, incl. failed ones)
            st = stats_dict(kvm.make_prefix_cache_stats())
            scheduled = dict(so.num_scheduled_tokens)
            admitted = [r.req_id for r in so.scheduled_new_reqs]
            resumed = [rid for rid in so.scheduled_cached_reqs.req_ids
                       if rid in so.scheduled_cached_reqs.resumed_req_ids]
            k = len(so.preempted_req_ids)
            preempted = [r.request_id for r in list(sched.waiting)[:k]][::-1]
            assert set(preempted) == set(so.preempted_req_ids), (preempted, so.preempted_req_ids)
            hit_tokens = {rid: sched.requests[rid].num_computed_tokens - scheduled[rid]
                          for rid in admitted + resumed}
            samplers = {rid for rid in scheduled if not sched.requests[rid].is_prefill_chunk}
            after_sched = pool_snapshot(kvm, False)
            model_executed = so.total_num_scheduled_tokens > 0
            batch_queue.appendleft((so, samplers))
            if model_executed and len(batch_queue) < ASYNC_BATCH_QUEUE_SIZE:
                do_pop = False  # oldest batch's future assumed not done
        elif not batch_queue:
            do_pop = False
        if after_sched is None:
            after_sched = pool_snapshot(kvm, False)
        finished = []
        if do_pop:
            so_old, samplers_old = batch_queue.pop()
            finished = do_update(so_old, samplers_old)
        rec = make_record(step, arrived, scheduled, admitted, resumed, preempted,
                          finished, hit_tokens, st, totals, after_sched,
                          pool_snapshot(kvm, dump_free_queue), sched.running,
                          sched.waiting, kvm)
        update_per_req(per_req, rec, sched.running, sched.waiting)
        out_lines.append(rec)
        inflight = any(so.total_num_scheduled_tokens > 0 for so, _ in batch_queue)
        if (not scheduled and not inflight and not finished
                and (sched.running or sched.waiting) and step >= last_arrival):
            stalled = True
            break
        step += 1
    summ = make_summary(cfg, out_lines, per_req, totals, stalled)
    summ["summary"]["engine"] = {"scheduler_cls": type(sched).__name__,
                                 "batch_queue_size": ASYNC_BATCH_QUEUE_SIZE,
                                 "oldest_batch_ready_at_check": False}
    bad = []
    for rid, r in reqobj.items():
        if per_req[rid]["finish_step"] is None:
            continue
        tr = tmeta[rid]
        want_n = min(tr.max_tokens, int(cfg["max_model_len"]) - len(tr.prompt_token_ids))
        if list(r.output_token_ids) != [tr.output_token(n) for n in range(want_n)]:
            bad.append(rid)
    summ["summary"]["token_check"] = "ok" if not bad else {"mismatch": bad}
    return out_lines, summ

# --------------------------------------------------------------------------
def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace", nargs="+", help="trace JSON file (several with --batch)")
    ap.add_argument("--batch", metavar="OUTDIR",
                    help="replay every trace in one process, write OUTDIR/NAME.vllm-0.17.1[.SUFFIX].jsonl")
    ap.add_argument("--suffix", default="", help="with --batch, e.g. async")
    ap.add_argument("--driver", choices=["minimal", "vllm-scheduler", "both"], default="minimal",
                    help="sync mode only")
    ap.add_argument("--scheduling", choices=["sync", "async"], default="sync",
                    help="sync = the 0.17.1 goldens; async = vllm serve 0.17.1 default "
                         "(AsyncScheduler + batch queue of 2)")
    ap.add_argument("--num-gpu-blocks", type=int)
    ap.add_argument("--block-size", type=int)
    ap.add_argument("--prefix-caching", choices=["on", "off"])
    ap.add_argument("--max-num-batched-tokens", type=int)
    ap.add_argument("--max-num-seqs", type=int)
    ap.add_argument("--max-model-len", type=int)
    ap.add_argument("--no-chunked-prefill", action="store_true")
    ap.add_argument("--hash-algo")
    ap.add_argument("--dump-free-queue", action="store_true",
                    help="add the full free-queue order (eviction order) to every step")
    ap.add_argument("--max-steps", type=int, default=100000)
    ap.add_argument("--summary-only", action="store_true")
    ap.add_argument("-o", "--output", help="write JSONL here instead of stdout")
    a = ap.parse_args(argv)
    def process(trace_path, output):

        cfg, trace = load_trace(trace_path)
        for key, val in [("num_gpu_blocks", a.num_gpu_blocks), ("block_size", a.block_size),
                         ("max_num_batched_tokens", a.max_num_batched_tokens),
                         ("max_num_seqs", a.max_num_seqs), ("max_model_len", a.max_model_len),
                         ("hash_algo", a.hash_algo)]:
            if val is not None:
                cfg[key] = val
        if a.prefix_caching is not None:
            cfg["enable_prefix_caching"] = a.prefix_caching == "on"
        if a.no_chunked_prefill:
            cfg["enable_chunked_prefill"] = False
        if cfg["num_gpu_blocks"] is None:
            ap.error("num_gpu_blocks must be given in the trace config or with --num-gpu-blocks")
        # vLLM's SchedulerConfig.verify_max_model_len() rejects these configs.
        if int(cfg["max_num_batched_tokens"]) < int(cfg["max_num_seqs"]):
            ap.error("max_num_batched_tokens must be >= max_num_seqs (vLLM config rule)")
        if (not cfg["enable_chunked_prefill"]
                and int(cfg["max_num_batched_tokens"]) < int(cfg["max_model_len"])):
            ap.error("without chunked prefill, max_num_batched_tokens must be >= max_model_len"
                     " (vLLM config rule)")
        for tr in trace:
            if len(tr.prompt_token_ids) >= int(cfg["max_model_len"]):
                # vLLM's input processor rejects such prompts before scheduling.
                ap.error(f"request {tr.request_id}: prompt length {len(tr.prompt_token_ids)}"
                         f" >= max_model_len {cfg['max_model_len']}")

        rc = 0
        if a.scheduling == "async":
            lines, summary = run_async(cfg, trace, a.dump_free_queue, a.max_steps)
        elif a.driver == "both":
            l1, s1 = run_minimal(cfg, trace, a.dump_free_queue, a.max_steps)
            l2, s2 = run_vllm_scheduler(cfg, trace, a.dump_free_queue, a.max_steps)
            mismatch = None
            for x, y in zip(l1, l2):
                if x != y:
                    keys = [k for k in x if x.get(k) != y.get(k)]
                    mismatch = {"step": x["step"], "fields": keys,
                                "minimal": {k: x.get(k) for k in keys},
                                "vllm_scheduler": {k: y.get(k) for k in keys}}
                    break
            if mismatch is None and (len(l1) != len(l2) or s1 != s2):
                mismatch = {"lengths": [len(l1), len(l2)], "summary_equal": s1 == s2}
            lines, summary = l1, s1
            summary["summary"]["driver_check"] = ("identical" if mismatch is None else mismatch)
            rc = 0 if mismatch is None else 2
        elif a.driver == "vllm-scheduler":
            lines, summary = run_vllm_scheduler(cfg, trace, a.dump_free_queue, a.max_steps)
        else:
            lines, summary = run_minimal(cfg, trace, a.dump_free_queue, a.max_steps)
        import vllm

        summary["summary"]["vllm_version"] = vllm.__version__
        if a.scheduling == "async":
            summary["summary"]["driver"] = "vllm-async-scheduler"
            summary["summary"]["scheduling"] = "async"
        else:
            summary["summary"]["driver"] = a.driver
        out = open(output, "w") if output else sys.stdout
        try:
            if not a.summary_only:
                for rec in lines:
                    out.write(json.dumps(rec) + "\n")
            out.write(json.dumps(summary) + "\n")
        finally:
            if output:
                out.close()
        if summary["summary"]["stalled"]:
            rc = rc or 3
        return rc


    if a.batch:
        os.makedirs(a.batch, exist_ok=True)
        rc_all = 0
        for t in a.trace:
            name = os.path.basename(t)[:-5] if t.endswith(".json") else os.path.basename(t)
            sfx = f".{a.suffix}" if a.suffix else ""
            outp = os.path.join(a.batch, f"{name}.vllm-0.17.1{sfx}.jsonl")
            rc_t = process(t, outp)
            with open(outp) as f:
                s_ = json.loads(f.read().splitlines()[-1])["summary"]
            print(f"{name}: rc={rc_t} steps={s_['num_steps']} preempt={s_['total_preemptions']}"
                  f" hits={s_['prefix_cache_hits']} max_used={s_['max_used_blocks']}"
                  f" stalled={s_['stalled']}", file=sys.stderr, flush=True)
            rc_all = rc_all or (rc_t if rc_t != 3 else 0)
        return rc_all
    if len(a.trace) != 1:
        ap.error("one trace unless --batch")
    return process(a.trace[0], a.output)

if __name__ == "__main__":
    sys.exit(main())
