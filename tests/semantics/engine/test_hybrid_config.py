"""KV cache groups in the engine config and in traces: what vLLM derives, what it refuses (exit 2
with one line), and what the summary says (docs/vllm/replay-hybrid.md §1 and §5)."""

from __future__ import annotations

import json

import pytest

from kvplan.errors import KvplanError
from kvplan.report.replay_records import summary_record
from kvplan.semantics.engine.config import EngineConfig
from kvplan.semantics.engine.coordinator import KVCacheCoordinator
from kvplan.semantics.engine.groups import KVCacheGroup, groups_from_kv_cache_config
from kvplan.semantics.engine.replay import replay
from kvplan.semantics.engine.trace import parse_trace
from kvplan.semantics.kv.layer_specs import CacheSettings, build_worker_specs
from kvplan.semantics.kv.sizing import size_kv_cache
from kvplan.semantics.kv.specs import (
    ChunkedLocalAttentionSpec,
    FullAttentionSpec,
    KVCacheGroupSpec,
    MambaSpec,
    MLAAttentionSpec,
    SizingLimits,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
)
from kvplan.semantics.releases import VLLM_0_17_1, VLLM_0_33_0

FULL = KVCacheGroup()
WINDOW = KVCacheGroup(SlidingWindowSpec, sliding_window=64)
# The rules below are 0.17.1's unless a test names 0.33.0.
HYBRID_RELEASE = {"release": VLLM_0_17_1}


def config(*groups: KVCacheGroup, **settings) -> EngineConfig:
    return EngineConfig(num_gpu_blocks=40, kv_cache_groups=groups, **{**HYBRID_RELEASE, **settings})


def trace(groups, **settings) -> dict:
    return {"config": {"num_gpu_blocks": 40, "kv_cache_groups": groups,
                       "vllm_version": HYBRID_RELEASE["release"].version,
                       **settings},
            "requests": [{"request_id": "a", "max_tokens": 3, "unique_len": 40}]}


def test_without_groups_the_engine_has_one_full_attention_group() -> None:
    assert EngineConfig(num_gpu_blocks=40, block_size=32).groups == (KVCacheGroup(block_size=32),)


def test_mamba_blocks_follow_the_caching_setting() -> None:
    with_caching = config(FULL, KVCacheGroup(MambaSpec), max_model_len=512)
    assert with_caching.groups[1] == KVCacheGroup(MambaSpec, mamba_cache_mode="align", block_size=16)
    assert with_caching.mamba_cache_mode == "align"
    # Caching off: one state block per request, as long as the model length, whatever was asked.
    without = config(FULL, KVCacheGroup(MambaSpec, mamba_cache_mode="all"), max_model_len=512,
                     enable_prefix_caching=False)
    assert without.groups[1] == KVCacheGroup(MambaSpec, mamba_cache_mode="none", block_size=512)
    # "none" with caching on stands for vLLM's default.
    assert config(FULL, KVCacheGroup(MambaSpec, mamba_cache_mode="none")).mamba_cache_mode == "align"
    assert config(FULL, WINDOW).mamba_cache_mode is None


@pytest.mark.parametrize(("groups", "settings", "message"), [
    ((), {}, "non-empty"),
    ((KVCacheGroup(SlidingWindowSpec),), {}, "needs sliding_window"),
    ((KVCacheGroup(ChunkedLocalAttentionSpec, attention_chunk_size=0),), {}, "positive integer"),
    ((KVCacheGroup(sliding_window=8),), {}, "only to sliding_window"),
    ((KVCacheGroup(MLAAttentionSpec),), {}, "must be one of"),
    ((FULL, KVCacheGroup(mamba_cache_mode="all")), {}, "mamba groups only"),
    ((FULL, KVCacheGroup(MambaSpec)), {"enable_chunked_prefill": False, "max_num_batched_tokens": 4096},
     "requires chunked prefill"),
    ((FULL, KVCacheGroup(MambaSpec, mamba_cache_mode="all"), KVCacheGroup(MambaSpec, mamba_cache_mode="align")), {},
     "one mamba_cache_mode"),
    ((WINDOW, WINDOW), {}, "two kinds of group"),
    ((KVCacheGroup(block_size=32),), {}, "single KV cache group"),
    ((FULL, KVCacheGroup(block_size=24)), {}, "multiple of the block size"),
    ((FULL, KVCacheGroup(block_size=32), KVCacheGroup(ChunkedLocalAttentionSpec, attention_chunk_size=64)), {},
     "chunked local attention needs"),
])
def test_configurations_vllm_refuses(groups, settings, message) -> None:
    with pytest.raises(KvplanError, match=message):
        config(*groups, **settings)


def test_0_33_0_runs_mamba_all_as_align_and_keeps_one_block_size() -> None:
    # 0.33.0 has no "all": a model that ran it under 0.17.1 runs "align" (MambaModelConfig).
    mamba_all = KVCacheGroup(MambaSpec, mamba_cache_mode="all")
    assert config(FULL, mamba_all).mamba_cache_mode == "all"
    assert config(FULL, mamba_all, release=VLLM_0_33_0).mamba_cache_mode == "align"
    with pytest.raises(KvplanError, match=r"the only Mamba cache mode with prefix caching in vLLM 0\.33\.0"):
        config(FULL, mamba_all, release=VLLM_0_33_0, enable_chunked_prefill=False, max_num_batched_tokens=4096)
    # Groups of their own block size are 0.17.1's alone; caching off, a Mamba block spans the model.
    assert [g.block_size for g in config(FULL, KVCacheGroup(block_size=32)).groups] == [16, 32]
    with pytest.raises(KvplanError, match=r"own block sizes \(16, 32\) are not reproduced for vLLM 0.33.0.*"
                                          r"or use vllm_version 0.17.1"):
        config(FULL, KVCacheGroup(SlidingWindowSpec, sliding_window=64, block_size=32), release=VLLM_0_33_0)
    caching_off = config(FULL, KVCacheGroup(MambaSpec), release=VLLM_0_33_0, enable_prefix_caching=False)
    assert caching_off.groups[1].block_size == caching_off.max_model_len


def test_what_needs_caching_is_allowed_without_it() -> None:
    # Identical groups and a lone bigger block only trouble the prefix lookup.
    assert len(config(WINDOW, WINDOW, enable_prefix_caching=False).groups) == 2
    assert config(KVCacheGroup(block_size=32), enable_prefix_caching=False).groups[0].block_size == 32


def test_a_trace_lists_groups_by_type() -> None:
    parsed = parse_trace(trace([
        {"type": "full_attention"}, {"type": "sliding_window", "sliding_window": 64},
        {"type": "chunked_local_attention", "attention_chunk_size": 128},
        {"type": "mamba", "mamba_cache_mode": "all", "conv_dim": 4, "ssm_dim": 32, "mamba_type": "mamba1"},
    ]))
    assert [g.spec.kind for g in parsed.config.groups] == [
        "full_attention", "sliding_window", "chunked_local_attention", "mamba"]
    assert parsed.config.groups[2].attention_chunk_size == 128
    assert parsed.config.groups[3].layout == "mamba1 conv 4 ssm 32"
    bigger = parse_trace(trace([{"type": "full_attention"}, {"type": "sliding_window", "sliding_window": 64,
                                                            "block_size": 32}]))
    assert [g.block_size for g in bigger.config.groups] == [16, 32]


@pytest.mark.parametrize(("groups", "message"), [
    ([], r"kv_cache_groups: expected a list of 1 to 1,024 items, got 0 items"),
    ({"type": "full_attention"}, "expected a list of 1 to 1,024 items, got an object"),
    ([{"type": "mla"}], r"kv_cache_groups\[0\]\.type: expected one of: full_attention, .*got 'mla'"),
    (["full_attention"], r"kv_cache_groups\[0\]: expected an object with type one of"),
    ([{"type": "sliding_window"}], r"\[0\]\.sliding_window: required key is missing"),
    ([{"type": "sliding_window", "sliding_window": True}], "expected an integer from 1 to 10\\*\\*8, got true"),
    ([{"type": "chunked_local_attention", "attention_chunk_size": -8}], "attention_chunk_size: -8 is out of range"),
    ([{"type": "full_attention", "sliding_window": 64}], r"\[0\]\.sliding_window: unknown key"),
    ([{"type": "mamba", "mamba_cache_mod": "all"}], "did you mean mamba_cache_mode"),
    ([{"type": "mamba", "mamba_cache_mode": "some"}], "mamba_cache_mode: expected one of: none, align, all"),
    ([{"type": "mamba", "conv_dim": 0}], "conv_dim: 0 is out of range"),
    ([{"type": "full_attention"}, {"type": "mamba"}], "requires chunked prefill"),
    ([{"type": "full_attention", "block_size": 0}], "block_size: 0 is out of range"),
    ([{"type": "full_attention"}, {"type": "full_attention", "block_size": 24}], "multiple of the block size"),
])
def test_trace_mistakes_are_one_line_errors(groups, message) -> None:
    document = trace(groups, enable_chunked_prefill=False, max_num_batched_tokens=4096)
    with pytest.raises(KvplanError, match=message) as error:
        parse_trace(document, source="t.json")
    assert str(error.value).startswith("t.json: config") and "\n" not in str(error.value)


def test_the_summary_names_the_groups_as_the_harness_does() -> None:
    parsed = parse_trace(trace([{"type": "full_attention"}, {"type": "mamba"}], max_model_len=512))
    summary = json.loads(json.dumps(summary_record(replay(parsed))))["summary"]["config"]
    assert summary["kv_cache_groups"] == [{"type": "full_attention"}, {"type": "mamba"}]
    assert summary["kv_cache_group_specs"] == [{"spec": "FullAttentionSpec", "block_size": 16},
                                               {"spec": "MambaSpec", "block_size": 16}]
    assert summary["mamba_cache_mode"] == "align"
    plain = summary_record(replay(parse_trace({"config": {"num_gpu_blocks": 40}, "requests": []})))
    assert "kv_cache_groups" not in plain["summary"]["config"]


def test_a_planned_kv_cache_config_gives_the_engine_its_groups() -> None:
    full = FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=256, dtype="bfloat16")
    window = SlidingWindowSpec(block_size=16, num_kv_heads=8, head_size=256, dtype="bfloat16", sliding_window=1024)
    gemma3 = [KVCacheGroupSpec(("l5", "l11"), full)] + [
        KVCacheGroupSpec((f"l{i}", f"l{i + 6}"), window) for i in range(5)]
    groups = groups_from_kv_cache_config(gemma3)
    assert [g.spec.kind for g in groups] == ["full_attention"] + ["sliding_window"] * 5
    assert groups[1].sliding_window == 1024 and groups[1].num_layers == 2 and groups[1].block_size == 16
    # The five window groups share one spec: looked up together, as vLLM batches them.
    engine = EngineConfig(num_gpu_blocks=100, kv_cache_groups=groups, **HYBRID_RELEASE)
    coordinator = KVCacheCoordinator(engine.groups, 100, 16, True)
    assert coordinator.lookup_order == [[0], [1, 2, 3, 4, 5]]

    state = MambaSpec(block_size=544, shapes=((8, 3), (64,)), dtypes=("bfloat16", "bfloat16"),
                      mamba_cache_mode="align")
    qwen3_next = [KVCacheGroupSpec(("l3",), FullAttentionSpec(block_size=544, num_kv_heads=2, head_size=256,
                                                              dtype="bfloat16")),
                  KVCacheGroupSpec(("l0",), state), KVCacheGroupSpec(("l1",), state)]
    planned = groups_from_kv_cache_config(qwen3_next, VLLM_0_17_1)
    assert [(g.spec.kind, g.mamba_cache_mode, g.block_size) for g in planned] == [
        ("full_attention", None, 544), ("mamba", "align", 544), ("mamba", "align", 544)]
    assert EngineConfig(num_gpu_blocks=100, block_size=544, max_model_len=4096, **HYBRID_RELEASE,
                        kv_cache_groups=planned).mamba_cache_mode == "align"

    # A group of unequal pages runs with its first layer's spec.
    small = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype="bfloat16")
    uniform = UniformTypeKVCacheSpecs(block_size=16, kv_cache_specs={"l0": full, "l1": small})
    (only,) = groups_from_kv_cache_config([KVCacheGroupSpec(("l0", "l1"), uniform)])
    assert only.spec is FullAttentionSpec and only.layout == "FullAttentionSpec 8x256 bfloat16" and only.num_layers == 2


@pytest.mark.parametrize(("model", "alignment"), [("nvidia/Nemotron-H-56B-Base-8K", 1),
                                                  ("Qwen/Qwen3-Next-80B-A3B-Thinking", "block size")])
def test_planned_mamba2_and_gdn_groups_take_prefill_checkpoint_blocks_in_0_33_0(catalog_shape, model,
                                                                               alignment) -> None:
    shape = catalog_shape(model)
    knobs = CacheSettings(max_model_len=8192, enable_prefix_caching=True, mamba_cache_mode="align",
                          release=VLLM_0_33_0)
    sized = size_kv_cache(build_worker_specs(shape, knobs), [20 << 30], SizingLimits(8192, 8192), release=VLLM_0_33_0)
    mamba_specs = [g.kv_cache_spec for g in sized.groups if isinstance(g.kv_cache_spec, MambaSpec)]
    assert mamba_specs and all(spec.mamba_type in ("mamba2", "gdn_attention") for spec in mamba_specs)

    groups = groups_from_kv_cache_config(sized.groups, VLLM_0_33_0)
    mamba = [g for g in groups if g.spec.kind == "mamba"]
    assert len(mamba) == len(mamba_specs)
    # MambaMixer2 exports any position (alignment 1); a gated delta net keeps its checkpoints on
    # the prefix-cache grid, the Mamba block size.
    assert {(g.num_prefill_checkpoint_blocks, g.prefill_checkpoint_alignment) for g in mamba} == {
        (1, g.block_size if alignment == "block size" else alignment) for g in mamba}
    assert all(g.num_prefill_checkpoint_blocks == 0 for g in groups if g.spec.kind != "mamba")
    # vLLM 0.17.1's MambaSpec has no such field.
    old = groups_from_kv_cache_config(sized.groups, VLLM_0_17_1)
    assert all((g.num_prefill_checkpoint_blocks, g.prefill_checkpoint_alignment) == (0, None) for g in old)
    # The bridge's groups run in the engine of their release.
    block_size = mamba[0].block_size
    assert EngineConfig(num_gpu_blocks=100, block_size=block_size, max_model_len=8192, release=VLLM_0_33_0,
                        kv_cache_groups=groups).groups == groups


def test_a_mamba1_layer_takes_no_prefill_checkpoint_block() -> None:
    jamba = MambaSpec(block_size=16, shapes=((8, 3), (64,)), dtypes=("bfloat16", "bfloat16"),
                      mamba_type="mamba1", mamba_cache_mode="align")
    full = FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128, dtype="bfloat16")
    groups = groups_from_kv_cache_config([KVCacheGroupSpec(("l0",), full), KVCacheGroupSpec(("l1",), jamba)],
                                         VLLM_0_33_0)
    assert groups[1].num_prefill_checkpoint_blocks == 0 and groups[1].prefill_checkpoint_alignment is None


CHECKPOINTED = {"type": "mamba", "num_prefill_checkpoint_blocks": 1}


def test_trace_checkpoint_keys_default_to_a_mamba2_mixer_and_are_refused_where_vllm_lacks_them() -> None:
    with_release = {"vllm_version": "0.33.0", "max_model_len": 512}
    parsed = parse_trace({**trace([{"type": "full_attention"}, CHECKPOINTED]),
                          "config": {**trace([{"type": "full_attention"}, CHECKPOINTED])["config"], **with_release}})
    group = parsed.config.groups[1]
    assert (group.num_prefill_checkpoint_blocks, group.prefill_checkpoint_alignment) == (1, 1)
    with pytest.raises(KvplanError, match=r"not a field of vLLM 0\.17\.1's MambaSpec.*vllm_version 0\.33\.0"):
        parse_trace(trace([{"type": "full_attention"}, CHECKPOINTED], max_model_len=512))
    with pytest.raises(KvplanError, match="prefill_checkpoint_alignment needs num_prefill_checkpoint_blocks"):
        parse_trace(trace([{"type": "full_attention"}, {"type": "mamba", "prefill_checkpoint_alignment": 4}]))
    with pytest.raises(KvplanError, match=r"prefill_checkpoint_alignment: 0 is out of range: expected an integer"):
        parse_trace(trace([{"type": "full_attention"}, {**CHECKPOINTED, "prefill_checkpoint_alignment": 0}]))
    with pytest.raises(KvplanError, match=r"kv_cache_groups\[0\]\.num_prefill_checkpoint_blocks: unknown key"):
        parse_trace(trace([{"type": "full_attention", "num_prefill_checkpoint_blocks": 1}, {"type": "mamba"}]))
    with pytest.raises(KvplanError, match="mamba groups only"):
        KVCacheGroup(num_prefill_checkpoint_blocks=1).validate()


def test_the_summary_echoes_the_checkpoint_fields_as_the_harness_does(traces_dir) -> None:
    golden = json.loads((traces_dir / "hybrid-801.vllm-0.33.0.sync.jsonl").read_text().splitlines()[-1])
    parsed = parse_trace({**json.loads((traces_dir / "hybrid-801.json").read_text()),
                          "requests": []}, {"vllm_version": "0.33.0", "scheduling": "sync"})
    ours = summary_record(replay(parsed))["summary"]["config"]
    for key in ("kv_cache_groups", "kv_cache_group_specs", "mamba_cache_mode"):
        assert ours[key] == golden["summary"]["config"][key]
