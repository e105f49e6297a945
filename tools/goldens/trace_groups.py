"""Make the 0.33.0 / 0.34.0 peer harness replay the trace's own KV cache groups.

`vllm-0.33.0/replay33.py` and `vllm-0.34.0/replay34.py` (the project's peer harnesses, kept
unchanged) always build one full-attention group. `install(base)` replaces three functions of such
a harness module so that a trace's `config.kv_cache_groups` is what vLLM runs; the step loop, batch
queue and record fields stay the harness's own:

* `build_scheduler` runs the harness's own `build_scheduler` with two of the vLLM classes it uses
  wrapped: the CacheConfig gets `mamba_cache_mode` (and `mamba_block_size`) as vLLM's
  `MambaModelConfig.verify_and_update_config` sets them (0.33.0 and 0.34.0 alike: prefix caching on ->
  "align", their only caching mode, so a trace's "all" runs "align", and a Mamba block of the cache
  block size; off -> "none" and a Mamba block of max_model_len), and the KVCacheConfig gets one
  KVCacheGroupSpec per group instead of the single full-attention one. The specs are those the 0.17.1
  harness's `Env.make_group_spec` builds (`vllm-0.17.1/replay.py`): FullAttentionSpec,
  SlidingWindowSpec, ChunkedLocalAttentionSpec, and MambaSpec of a Mamba-1 mixer (no speculative
  blocks; prefill checkpoint blocks only when the group gives `num_prefill_checkpoint_blocks`, with
  `prefill_checkpoint_alignment`, default 1, as MambaMixer2 and the gated-delta-net layer declare
  them). Everything else (scheduler and hash block sizes from resolve_kv_cache_block_sizes, the
  cache-hit alignment, the managers from vLLM's spec registry, the scheduler class) is the harness's
  code on vLLM's functions. The engine info then also names the coordinator, the managers,
  `max_in_flight_tokens`, `prefix_cache_retention_interval` and `cache_hit_alignment_tokens`.
* `make_record` adds `block_tables_by_group` (every group's block table; null block = id 0).
* `make_summary` adds `kv_cache_groups`, `kv_cache_group_specs` and, with a Mamba group,
  `mamba_cache_mode` to the summary's config.

Without `kv_cache_groups` the harness's own functions run: the output is the harness's byte for byte.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any


def mamba_mode(cfg: dict[str, Any]) -> str:
    return "align" if cfg["enable_prefix_caching"] else "none"


def group_spec(cfg: dict[str, Any], g: dict[str, Any], mode: str) -> Any:
    import torch
    from vllm.v1.attention.backends.registry import MambaAttentionBackendEnum
    from vllm.v1.kv_cache_interface import (
        ChunkedLocalAttentionSpec,
        FullAttentionSpec,
        MambaSpec,
        SlidingWindowSpec,
    )

    dtype = getattr(torch, cfg["dtype"])
    common = dict(block_size=int(cfg["block_size"]), num_kv_heads=int(cfg["num_kv_heads"]),
                  head_size=int(cfg["head_size"]), dtype=dtype)
    kind = g["type"]
    if kind == "full_attention":
        return FullAttentionSpec(**common)
    if kind == "sliding_window":
        return SlidingWindowSpec(**common, sliding_window=int(g["sliding_window"]))
    if kind == "chunked_local_attention":
        return ChunkedLocalAttentionSpec(**common, attention_chunk_size=int(g["attention_chunk_size"]))
    if kind == "mamba":
        checkpoint = {}
        if "num_prefill_checkpoint_blocks" in g:
            checkpoint = dict(num_prefill_checkpoint_blocks=int(g["num_prefill_checkpoint_blocks"]),
                              prefill_checkpoint_alignment=int(g.get("prefill_checkpoint_alignment", 1)))
        block = int(cfg["block_size"]) if mode == "align" else int(cfg["max_model_len"])
        # The state shapes only size a page, which a pool built directly never uses.
        return MambaSpec(block_size=block, shapes=((int(g.get("conv_dim", 8)), 3), (int(g.get("ssm_dim", 64)),)),
                         dtypes=(dtype, dtype), mamba_type=MambaAttentionBackendEnum.MAMBA1,
                         mamba_cache_mode=mode, num_speculative_blocks=0, **checkpoint)
    raise ValueError(f"unknown kv cache group type {kind!r}")


def spec_entry(g: dict[str, Any], spec: Any) -> dict[str, Any]:
    entry = {"spec": type(spec).__name__, "block_size": spec.block_size}
    if "num_prefill_checkpoint_blocks" in g:
        entry["num_prefill_checkpoint_blocks"] = spec.num_prefill_checkpoint_blocks
        entry["prefill_checkpoint_alignment"] = spec.prefill_checkpoint_alignment
    return entry


def install(base: ModuleType) -> None:
    own_build, own_record, own_summary = base.build_scheduler, base.make_record, base.make_summary
    run: dict[str, Any] = {}  # this trace's groups, their specs and the Mamba mode

    def build_scheduler(cfg, scheduling):
        run.clear()
        groups = cfg.get("kv_cache_groups")
        if groups is None:
            return own_build(cfg, scheduling)
        v = base._import_vllm()
        mode = mamba_mode(cfg)
        mamba = any(g["type"] == "mamba" for g in groups)
        if mamba and mode == "align" and not cfg["enable_chunked_prefill"]:
            raise SystemExit("error: Mamba prefix caching needs chunked prefill (vLLM's MambaModelConfig)")
        specs = [group_spec(cfg, g, mode) for g in groups]
        cache_config_cls, kv_cache_config_cls = v["CacheConfig"], v["KVCacheConfig"]

        def cache_config(**kw):
            cc = cache_config_cls(**kw)
            if mamba:  # MambaModelConfig.verify_and_update_config
                cc.mamba_cache_mode = mode
                cc.mamba_block_size = int(cfg["block_size"]) if mode == "align" else int(cfg["max_model_len"])
            return cc

        def kv_cache_config(**kw):
            kw["kv_cache_groups"] = [v["KVCacheGroupSpec"]([f"model.layers.{i}.{g['type']}"], s)
                                     for i, (g, s) in enumerate(zip(groups, specs, strict=True))]
            return kv_cache_config_cls(**kw)

        v["CacheConfig"], v["KVCacheConfig"] = cache_config, kv_cache_config
        try:
            sched, hasher, info = own_build(cfg, scheduling)
        finally:
            v["CacheConfig"], v["KVCacheConfig"] = cache_config_cls, kv_cache_config_cls
        coordinator = sched.kv_cache_manager.coordinator
        kcc = sched.kv_cache_config
        info.update(coordinator=type(coordinator).__name__,
                    managers=[type(m).__name__ for m in coordinator.single_type_managers],
                    max_in_flight_tokens=int(sched.vllm_config.max_in_flight_tokens),
                    prefix_cache_retention_interval=kcc.prefix_cache_retention_interval,
                    cache_hit_alignment_tokens=kcc.cache_hit_alignment_tokens)
        run.update(groups=groups, specs=specs, mamba=kcc.has_mamba_layers, mode=mode)
        return sched, hasher, info

    def make_record(*args):
        rec = own_record(*args)
        if run:
            sched, kvm = args[-2], args[-1]
            rec["block_tables_by_group"] = {
                r.request_id: [list(ids) for ids in kvm.get_block_ids(r.request_id)] for r in sched.running}
        return rec

    def make_summary(cfg, lines, per_req, totals, stalled):
        summ = own_summary(cfg, lines, per_req, totals, stalled)
        if run:
            config = summ["summary"]["config"]
            config["kv_cache_groups"] = run["groups"]
            pairs = zip(run["groups"], run["specs"], strict=True)
            config["kv_cache_group_specs"] = [spec_entry(g, s) for g, s in pairs]
            if run["mamba"]:
                config["mamba_cache_mode"] = run["mode"]
        return summ

    base.build_scheduler, base.make_record, base.make_summary = build_scheduler, make_record, make_summary
