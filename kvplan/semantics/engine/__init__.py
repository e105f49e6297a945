"""vLLM's block manager and scheduler in pure Python (no torch), for every release kvplan reproduces
(where releases differ, the engine reads the policy from its `Release`): `kvplan replay` and
`kvplan simulate` run on it.

An engine is `Scheduler(EngineConfig(...))`. `EngineConfig.kv_cache_groups` None is one
full-attention group; otherwise a tuple of `groups.KVCacheGroup` sharing one pool, in group-id
order, each typed by a spec class of `kvplan.semantics.kv.specs.GROUP_TYPES` (full attention,
sliding window, chunked local attention, Mamba), which picks its manager (`coordinator.MANAGERS`);
`groups_from_kv_cache_config` makes them from a planned KV cache config. Layers, bottom up:
`block_pool` (blocks, free queue, prefix cache keyed by hash and group), the per-group managers
(`single_type_manager`, `window_managers`, `mamba_manager`), `coordinator` (all groups, the
cross-group prefix lookup), `kv_cache_manager` (vLLM's `KVCacheManager`), `scheduler`, `replay`
(trace loop). Each step's `StepResult` carries pool-wide counts and `num_used_blocks_by_group`."""
