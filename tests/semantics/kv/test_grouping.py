"""Grouping layers as vLLM 0.17.1's `get_kv_cache_groups` does."""

from __future__ import annotations

import pytest

from kvplan.semantics.kv.grouping import (
    HYBRID_DISABLED_WARNING,
    GroupingError,
    get_kv_cache_groups,
    merge_specs,
    unify_kv_cache_spec_page_size,
)
from kvplan.semantics.kv.layer_specs import CacheSettings, build_worker_specs
from kvplan.semantics.kv.sizing import size_kv_cache
from kvplan.semantics.kv.specs import FullAttentionSpec, MambaSpec, SizingLimits, SlidingWindowSpec
from kvplan.semantics.releases import VLLM_0_17_1

FULL = FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128, dtype="bfloat16")
WINDOW = SlidingWindowSpec(block_size=16, num_kv_heads=8, head_size=128, dtype="bfloat16", sliding_window=1024)


def test_ten_full_and_twenty_window_layers_make_three_groups() -> None:
    specs = {}
    for i in range(30):  # the pattern (full, sw, sw) ten times
        specs[f"layer_{i}"] = FULL if i % 3 == 0 else WINDOW
    grouping = get_kv_cache_groups(specs, release=VLLM_0_17_1)
    windows = [f"layer_{i}" for i in range(30) if i % 3]
    assert [(g.layer_names, g.kv_cache_spec) for g in grouping.groups] == [
        (tuple(f"layer_{i}" for i in range(0, 30, 3)), FULL),
        (tuple(windows[0::2]), WINDOW),
        (tuple(windows[1::2]), WINDOW),
    ]
    assert grouping.logs == ()
    result = size_kv_cache([specs], [10 * 3 * 65536 * 100], SizingLimits(4096, 2048), release=VLLM_0_17_1)
    assert result.num_blocks == 300
    assert [len(t.shared_by) for t in result.config.kv_cache_tensors] == [3] * 10
    assert {t.size for t in result.config.kv_cache_tensors} == {65536 * 300}


def test_nearly_balanced_types_pad_the_smaller_one() -> None:
    # gpt-oss-20b + eagle: 12 sw + 13 full -> groups of 13 instead of 12
    specs = {f"layer_{i}": WINDOW if i % 2 == 0 and i < 24 else FULL for i in range(25)}
    grouping = get_kv_cache_groups(specs, release=VLLM_0_17_1)
    assert [len(g.layer_names) for g in grouping.groups] == [12, 13]
    assert grouping.logs == ("Add 1 padding layers, may waste at most 8.33% KV cache memory",)
    result = size_kv_cache([specs], [1 << 30], SizingLimits(4096, 2048), release=VLLM_0_17_1)
    assert [len(t.shared_by) for t in result.config.kv_cache_tensors] == [2] * 12 + [1]


def test_round_robin_split_keeps_pipeline_stages_balanced() -> None:
    # vLLM's own example: stage 0 holds full.0, sw.0, sw.1 and stage 1 full.1, sw.2, sw.3
    names = ["full.0", "sw.0", "sw.1", "full.1", "sw.2", "sw.3"]
    specs = {name: FULL if name.startswith("full") else WINDOW for name in names}
    groups = get_kv_cache_groups(specs, release=VLLM_0_17_1).groups
    assert [g.layer_names for g in groups] == [("full.0", "full.1"), ("sw.0", "sw.2"), ("sw.1", "sw.3")]
    stages = [{name: specs[name] for name in names[:3]}, {name: specs[name] for name in names[3:]}]
    result = size_kv_cache(stages, [1 << 30, 1 << 30], SizingLimits(4096, 2048), release=VLLM_0_17_1)
    assert [len(c.kv_cache_tensors) for c in result.worker_configs] == [1, 1]


def test_full_attention_layers_that_only_record_a_window_merge() -> None:
    recorded = FullAttentionSpec(
        block_size=16, num_kv_heads=8, head_size=128, dtype="bfloat16", sliding_window=4096
    )
    (group,) = get_kv_cache_groups({"a": FULL, "b": recorded}, release=VLLM_0_17_1).groups
    assert group.kv_cache_spec == recorded
    other = FullAttentionSpec(block_size=16, num_kv_heads=8, head_size=128, dtype="bfloat16", sliding_window=512)
    with pytest.raises(GroupingError, match="same window size"):
        merge_specs([recorded, other])


def test_disabled_hybrid_manager_treats_windows_as_full_attention(catalog_shape) -> None:
    workers = build_worker_specs(catalog_shape("google/gemma-2-9b-it"), CacheSettings(max_model_len=8192,
        release=VLLM_0_17_1))
    grouping = get_kv_cache_groups(workers[0], disable_hybrid_kv_cache_manager=True, release=VLLM_0_17_1)
    (group,) = grouping.groups
    assert len(group.layer_names) == 42
    assert group.kv_cache_spec == FullAttentionSpec(
        block_size=16, num_kv_heads=8, head_size=256, dtype="bfloat16", sliding_window=4096
    )
    assert grouping.logs == (HYBRID_DISABLED_WARNING,)
    # every layer now keeps all 8192 tokens: 42 layers x 512 blocks x 131072 bytes
    result = size_kv_cache(workers, [1 << 34], SizingLimits(8192, 8192), disable_hybrid_kv_cache_manager=True,
        release=VLLM_0_17_1)
    assert result.bytes_needed_for_one_max_len_request == 42 * 512 * 131072


def test_disabled_hybrid_manager_cannot_unify_mamba_layers(catalog_shape) -> None:
    shape = catalog_shape("Qwen/Qwen3-Next-80B-A3B-Thinking")
    workers = build_worker_specs(shape, CacheSettings(max_model_len=8192, release=VLLM_0_17_1))
    with pytest.raises(GroupingError, match="failed to convert the KV cache specs to one unified type"):
        get_kv_cache_groups(workers[0], disable_hybrid_kv_cache_manager=True, release=VLLM_0_17_1)


def test_page_sizes_unify_by_raising_the_block_size() -> None:
    small = SlidingWindowSpec(block_size=16, num_kv_heads=4, head_size=128, dtype="bfloat16", sliding_window=1024)
    unified = unify_kv_cache_spec_page_size({"full": FULL, "sw": small}, VLLM_0_17_1)
    assert unified["full"] is FULL
    assert unified["sw"].block_size == 32 and unified["sw"].page_size_bytes == FULL.page_size_bytes
    odd = SlidingWindowSpec(block_size=16, num_kv_heads=3, head_size=128, dtype="bfloat16", sliding_window=1024)
    with pytest.raises(GroupingError, match="not divisible by the maximum page size"):
        unify_kv_cache_spec_page_size({"full": FULL, "sw": odd}, VLLM_0_17_1)


def test_mamba_layers_group_apart_from_attention() -> None:
    mamba = MambaSpec(block_size=4096, shapes=((3, 1024), (8, 64, 64)), dtypes=("bfloat16", "bfloat16"),
                      page_size_padded=FULL.page_size_bytes * 16)
    attention = FullAttentionSpec(block_size=256, num_kv_heads=8, head_size=128, dtype="bfloat16")
    assert mamba.page_size_bytes == attention.page_size_bytes
    specs = {f"l{i}": attention if i % 4 == 3 else mamba for i in range(8)}
    groups = get_kv_cache_groups(specs, release=VLLM_0_17_1).groups
    # group 0 is Mamba: its bucket holds layer 0; six Mamba layers split three ways, round robin
    assert [g.layer_names for g in groups] == [("l0", "l4"), ("l1", "l5"), ("l2", "l6"), ("l3", "l7")]
    assert [type(g.kv_cache_spec) for g in groups] == [MambaSpec] * 3 + [FullAttentionSpec]


def test_workers_must_agree_on_a_layers_spec() -> None:
    other = FullAttentionSpec(block_size=16, num_kv_heads=4, head_size=128, dtype="bfloat16")
    with pytest.raises(GroupingError, match="different across workers"):
        size_kv_cache([{"a": FULL}, {"a": other}], [1 << 30, 1 << 30], SizingLimits(4096, 2048), release=VLLM_0_17_1)
