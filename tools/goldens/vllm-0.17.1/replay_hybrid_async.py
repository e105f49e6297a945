#!/usr/bin/env python3
"""Replay a trace with several KV cache groups under vLLM 0.17.1's async scheduling.

Run with the 0.17.1 venv (tools/goldens/venv.sh 0.17.1 DIR):

    HF_HUB_OFFLINE=1 DIR/bin/python replay_hybrid_async.py TRACE.json --dump-free-queue -o OUT.jsonl

`replay_async.py --scheduling async` drives vLLM's real AsyncScheduler the way
EngineCore.step_with_batch_queue does, but builds one full-attention group whatever the trace says.
`replay.py` reads `config.kv_cache_groups` (Env.make_group_spec) but only has sync drivers. This
script is the first one's async driver (`run_async`, unchanged) wired to the second one's `Env`,
with three things made to follow the trace's groups:

* the AsyncScheduler's CacheConfig gets `mamba_cache_mode` as `replay.py`'s
  `run_vllm_scheduler` sets it (what MambaModelConfig.verify_and_update_config would set);
* records carry `block_tables_by_group` (`replay.make_record(by_group=True)`);
* the summary's config carries the group keys (`replay.make_summary(..., env)`).

Without `kv_cache_groups` all three are no-ops, so the output is `replay_async.py --scheduling
async`'s byte for byte. Both peer scripts sit beside this one and are imported unchanged.
"""

from __future__ import annotations

import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import replay  # the sync harness: Env with groups, make_record/make_summary by group
import replay_async  # the async driver

_ENVS: list = []


class GroupEnv(replay.Env):
    """replay.py's Env (reads kv_cache_groups); remembers the run's instance for the hooks below."""

    def __init__(self, cfg):
        super().__init__(cfg)
        _ENVS.append(self)


def _env():
    return _ENVS[-1]


def build_async_scheduler(cfg, env):
    """replay_async.build_async_scheduler plus the trace's Mamba cache mode on the CacheConfig."""
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
    if env.groups is not None:
        # What MambaModelConfig.verify_and_update_config would have set (as replay.py does).
        cc.mamba_cache_mode = env.mamba_cache_mode
    vc = VllmConfig(scheduler_config=sc, cache_config=cc, device_config=DeviceConfig(device="cpu"))
    assert vc.scheduler_config.async_scheduling is True
    assert vc.scheduler_config.get_scheduler_cls() is AsyncScheduler
    vc.cache_config.num_gpu_blocks = int(cfg["num_gpu_blocks"])
    object.__setattr__(vc, "model_config", SimpleNamespace(
        is_encoder_decoder=False, max_model_len=max_model_len, enable_return_routed_experts=False))
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


def make_record(*args):
    return replay.make_record(*args, by_group=_env().groups is not None)


def make_summary(cfg, lines, per_req, totals, stalled):
    return replay.make_summary(cfg, lines, per_req, totals, stalled, _env())


replay_async.Env = GroupEnv
replay_async.build_async_scheduler = build_async_scheduler
replay_async.make_record = make_record
replay_async.make_summary = make_summary


def main(argv=None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--scheduling" in argv:
        raise SystemExit("replay_hybrid_async.py is async only (use replay.py for sync records)")
    return replay_async.main(["--scheduling", "async", *argv])


if __name__ == "__main__":
    sys.exit(main())
