"""KV tensors as vLLM's worker allocates and reshapes them, and the slot-mapping round trip."""

from __future__ import annotations

import pytest
import torch

from kvplan.errors import KvplanError
from kvplan.measure.kv_tensors import allocate_kv_cache, slot_mapping_check
from kvplan.semantics.kv.layout import ATTENTION_BACKENDS, kernel_block_size, kv_cache_shape
from kvplan.semantics.kv.sizing import shrink_pool
from kvplan.semantics.kv.specs import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheTensor,
    MambaSpec,
    MLAAttentionSpec,
)

QWEN2_05B = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype="bfloat16")


def uniform_config(spec, num_layers: int, num_blocks: int) -> KVCacheConfig:
    names = tuple(f"model.layers.{i}.self_attn.attn" for i in range(num_layers))
    tensors = tuple(KVCacheTensor(spec.page_size_bytes * num_blocks, (name,)) for name in names)
    return KVCacheConfig(num_blocks, tensors, (KVCacheGroupSpec(names, spec),))


def test_qwen2_worked_example_on_meta_has_vllms_shape_and_bytes():
    # docs/vllm/kv-semantics.md §2.6: 131,928 blocks, 24 tensors of 1,080,754,176 bytes, (2, 131928, 16, 2, 64)
    allocation = allocate_kv_cache(uniform_config(QWEN2_05B, 24, 131928), "flash_attn", "meta")
    assert [t.numel() for t in allocation.raw] == [1_080_754_176] * 24
    view = allocation.views["model.layers.0.self_attn.attn"][0]
    assert tuple(view.shape) == (2, 131928, 16, 2, 64)
    assert view.dtype == torch.bfloat16 and view.is_contiguous()
    assert allocation.layouts[0].strides == ((131928 * 2048, 2048, 128, 64, 1),)


@pytest.mark.parametrize(
    ("backend", "shape"),
    [
        ("flash_attn", (2, 5, 16, 2, 64)),
        ("flex", (2, 5, 16, 2, 64)),
        ("flashinfer", (5, 2, 16, 2, 64)),
        ("triton", (5, 2, 16, 2, 64)),
        ("cpu", (2, 5, 2, 16, 64)),
    ],
)
def test_backend_layouts_of_section_5(backend, shape):
    assert kv_cache_shape(backend, 5, 16, 2, 64) == shape
    allocation = allocate_kv_cache(uniform_config(QWEN2_05B, 2, 5), backend, "cpu")
    assert allocation.layouts[0].shapes == (shape,)


def test_unknown_backend_is_bad_input():
    with pytest.raises(KvplanError, match="unknown attention backend"):
        allocate_kv_cache(uniform_config(QWEN2_05B, 1, 4), "xformers", "meta")


def test_flash_layouts_need_multiples_of_16_and_flashinfer_splits_large_blocks():
    assert kernel_block_size("flashinfer", 128) == 64
    assert kernel_block_size("flashinfer", 32) == 32
    with pytest.raises(KvplanError, match="multiple of 16"):
        kernel_block_size("flash_attn", 8)
    spec = FullAttentionSpec(block_size=128, num_kv_heads=2, head_size=8, dtype="uint8")
    allocation = allocate_kv_cache(uniform_config(spec, 1, 6), "flashinfer", "cpu")
    # one 128-token manager block = two 64-token kernel blocks
    assert allocation.layouts[0].shapes == ((12, 2, 64, 2, 8),)
    assert slot_mapping_check(allocation).passed


def test_mla_layout_is_one_latent_per_token():
    spec = MLAAttentionSpec(block_size=64, num_kv_heads=1, head_size=576, dtype="bfloat16")
    allocation = allocate_kv_cache(uniform_config(spec, 2, 4), "flash_attn", "cpu")
    assert allocation.layouts[0].shapes == ((4, 64, 576),)
    assert allocation.layouts[0].kind == "mla"
    check = slot_mapping_check(allocation)
    assert check.passed and check.layers_checked == 2


@pytest.mark.parametrize("backend", ATTENTION_BACKENDS)
def test_slot_mapping_round_trip_passes_on_every_layout(backend):
    allocation = allocate_kv_cache(uniform_config(QWEN2_05B, 3, 9), backend, "cpu")
    check = slot_mapping_check(allocation, seed=3)
    assert check.passed, check
    assert check.layers_checked == 3
    # three random blocks, never the null block 0, the last one half full
    assert len(check.block_table) == 3 and 0 not in check.block_table
    assert check.tokens == 16 * 2 + 8
    first_block = check.block_table[0]
    assert check.first_slots[:2] == (first_block * 16, first_block * 16 + 1)


def test_round_trip_really_writes_the_raw_bytes():
    allocation = allocate_kv_cache(uniform_config(QWEN2_05B, 1, 6), "flash_attn", "cpu")
    slot_mapping_check(allocation, seed=1)
    written = int((allocation.raw[0] != 0).sum())
    # K and V of 40 tokens: 2 x 40 x 2 heads x 64 x 2 bytes, a few of them zero by chance
    assert 0.9 * 20480 <= written <= 20480


def test_a_view_that_does_not_match_the_raw_bytes_is_caught():
    allocation = allocate_kv_cache(uniform_config(QWEN2_05B, 1, 6), "flash_attn", "cpu")
    name = next(iter(allocation.views))
    (view,) = allocation.views[name]
    # a copy looks right through the view but is not the memory vLLM's kernels would address
    allocation.views[name] = (view.clone(),)
    check = slot_mapping_check(allocation)
    assert check.view_round_trip and not check.raw_bytes_match
    assert not check.shared_storage and not check.passed


def test_tensor_shared_by_layers_of_two_groups_is_one_storage():
    spec = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8, dtype="float16")
    groups = (KVCacheGroupSpec(("a0",), spec), KVCacheGroupSpec(("b0",), spec))
    config = KVCacheConfig(4, (KVCacheTensor(spec.page_size_bytes * 4, ("a0", "b0")),), groups)
    allocation = allocate_kv_cache(config, "flash_attn", "cpu")
    assert len(allocation.raw) == 1
    a, b = allocation.views["a0"][0], allocation.views["b0"][0]
    assert a.data_ptr() == b.data_ptr() == allocation.raw[0].data_ptr()
    check = slot_mapping_check(allocation)
    assert check.passed and check.layers_checked == 1 and check.shared_storage


def test_hybrid_mamba_views_are_strided_per_block():
    conv, ssm = (3, 8), (2, 4, 4)
    mamba = MambaSpec(block_size=64, shapes=(conv, ssm), dtypes=("bfloat16", "float32"), page_size_padded=512)
    attention = FullAttentionSpec(block_size=64, num_kv_heads=1, head_size=2, dtype="bfloat16")
    assert attention.page_size_bytes == 512
    groups = (KVCacheGroupSpec(("m0",), mamba), KVCacheGroupSpec(("a0",), attention))
    config = KVCacheConfig(5, (KVCacheTensor(512 * 5, ("m0", "a0")),), groups)
    allocation = allocate_kv_cache(config, "flash_attn", "cpu")
    conv_view, ssm_view = allocation.views["m0"]
    assert tuple(conv_view.shape) == (5, 3, 8) and conv_view.stride() == (256, 8, 1)
    # the float32 state starts after the 48-byte conv state of the same block
    assert tuple(ssm_view.shape) == (5, 2, 4, 4) and ssm_view.stride()[0] == 128
    assert ssm_view.storage_offset() == 48 // 4
    # with Mamba present, one block's K and V sit together (num_blocks, 2, ...) in memory
    (kv,) = allocation.views["a0"]
    assert tuple(kv.shape) == (2, 5, 64, 1, 2) and kv.stride()[:2] == (128, 256)
    assert slot_mapping_check(allocation).passed


def test_small_pool_keeps_the_layout():
    config = uniform_config(QWEN2_05B, 2, 131928)
    small = shrink_pool(config, 8)
    assert small.num_blocks == 8 and [t.size for t in small.kv_cache_tensors] == [8 * 8192] * 2
    assert small.kv_cache_groups == config.kv_cache_groups


def test_pool_without_a_usable_block_cannot_be_checked():
    check = slot_mapping_check(allocate_kv_cache(uniform_config(QWEN2_05B, 1, 1), "flash_attn", "cpu"))
    assert not check.passed and "null block" in check.detail


def test_meta_pool_is_refused_by_the_check():
    with pytest.raises(ValueError, match="meta"):
        slot_mapping_check(allocate_kv_cache(uniform_config(QWEN2_05B, 1, 4), "flash_attn", "meta"))


# --- the round trip fails on a layout the kernels would not address ------------------------------------

def _interleaved(view: torch.Tensor, backend: str) -> torch.Tensor:
    """The same shape over the same memory, but with the blocks interleaved per token: token
    offsets outside blocks in memory (what a wrong stride order or a wrong reshape gives)."""
    blocks_dim, tokens_dim = {"flash_attn": (1, 2), "flex": (1, 2), "flashinfer": (0, 2), "triton": (0, 2),
                              "cpu": (1, 3), "mla": (0, 1), "lbnhc": (0, 1)}[backend]
    shape = list(view.shape)
    shape[blocks_dim], shape[tokens_dim] = shape[tokens_dim], shape[blocks_dim]
    swapped = view.view(-1).view(shape)
    return swapped.transpose(blocks_dim, tokens_dim)


@pytest.mark.parametrize("backend", [*ATTENTION_BACKENDS, "mla"])
def test_a_view_with_blocks_interleaved_per_token_fails_the_round_trip(backend):
    spec = MLAAttentionSpec(block_size=16, num_kv_heads=1, head_size=576, dtype="bfloat16") \
        if backend == "mla" else QWEN2_05B
    allocation = allocate_kv_cache(uniform_config(spec, 2, 6), "flash_attn" if backend == "mla" else backend, "cpu")
    name = next(iter(allocation.views))
    (view,) = allocation.views[name]
    wrong = _interleaved(view, backend)
    assert wrong.shape == view.shape and wrong.stride() != view.stride()
    assert wrong.untyped_storage().data_ptr() == allocation.raw[0].untyped_storage().data_ptr()
    allocation.views[name] = (wrong,)
    check = slot_mapping_check(allocation)
    # it reads back what it wrote, in memory that is really the pool's: only the layout is wrong
    assert check.view_round_trip and check.shared_storage
    assert not check.raw_bytes_match and not check.passed


@pytest.mark.parametrize("backend", ATTENTION_BACKENDS)
def test_an_off_by_one_slot_index_fails_the_round_trip(backend, monkeypatch):
    import kvplan.measure.kv_tensors as kv_tensors

    right = kv_tensors.slot_index
    monkeypatch.setattr(kv_tensors, "slot_index",
                        lambda layout, backend, which, slots: right(layout, backend, which, slots - 1))
    check = slot_mapping_check(allocate_kv_cache(uniform_config(QWEN2_05B, 2, 6), backend, "cpu"))
    assert check.view_round_trip and not check.raw_bytes_match and not check.passed


# --- vLLM 0.33.0: one backing allocation, per-layer strided views (LBNHC), groups aliasing from byte 0


def shared_backing_config(specs: dict, available: int):
    from kvplan.semantics.kv.sizing import size_kv_cache
    from kvplan.semantics.kv.specs import SizingLimits
    from kvplan.semantics.releases import VLLM_0_33_0

    result = size_kv_cache([specs], [available], SizingLimits(256, 64), release=VLLM_0_33_0)
    assert result.fits and result.config is not None
    return result.config


def test_0_33_0_pool_is_one_backing_allocation_with_per_layer_views():
    specs = {f"model.layers.{i}.self_attn.attn": QWEN2_05B for i in range(3)}
    config = shared_backing_config(specs, 3 * 8192 * 40)
    assert config.tensor_layout == "shared_backing" and config.num_blocks == 40
    allocation = allocate_kv_cache(config, "flash_attn", "cpu")
    (raw,) = allocation.raw
    assert raw.numel() == config.pool_bytes == 3 * 8192 * 40
    # (block, token, head, K|V, head size); layer i starts i x 40 pages in
    views = [allocation.views[name][0] for name in specs]
    assert tuple(views[0].shape) == (40, 16, 2, 2, 64)
    assert views[0].stride() == (4096, 256, 128, 64, 1)
    assert [view.storage_offset() for view in views] == [0, 40 * 4096, 2 * 40 * 4096]
    check = slot_mapping_check(allocation)
    assert check.passed and check.layers_checked == 1 and check.shared_storage


def test_0_33_0_groups_alias_from_byte_zero_and_the_round_trip_passes():
    window = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype="bfloat16")
    from kvplan.semantics.kv.specs import SlidingWindowSpec

    sliding = SlidingWindowSpec(block_size=16, num_kv_heads=2, head_size=64, dtype="bfloat16", sliding_window=32)
    specs = {"model.layers.0.attn": window, "model.layers.1.attn": sliding,
             "model.layers.2.attn": window, "model.layers.3.attn": sliding}
    config = shared_backing_config(specs, 2 * 8192 * 50)
    assert [t.offset for t in config.kv_cache_tensors] == [0, 0]
    allocation = allocate_kv_cache(config, "flash_attn", "cpu")
    first = {region.shared_by[0] for region in config.kv_cache_tensors}
    assert {allocation.views[name][0].storage_offset() for name in first} == {0}
    check = slot_mapping_check(allocation)
    assert check.passed and check.layers_checked == 2


def test_0_33_0_meta_pool_has_the_exact_bytes():
    specs = {f"model.layers.{i}.self_attn.attn": QWEN2_05B for i in range(24)}
    config = shared_backing_config(specs, 25_938_100_224)
    allocation = allocate_kv_cache(config, "flash_attn", "meta")
    assert allocation.total_bytes == 131928 * 24 * 8192 == config.pool_bytes


def test_a_0_33_0_view_with_blocks_interleaved_per_token_fails_the_round_trip():
    specs = {f"model.layers.{i}.self_attn.attn": QWEN2_05B for i in range(2)}
    allocation = allocate_kv_cache(shared_backing_config(specs, 2 * 8192 * 40), "flash_attn", "cpu")
    name = next(iter(allocation.views))
    (view,) = allocation.views[name]
    wrong = _interleaved(view, "lbnhc")
    assert wrong.shape == view.shape and wrong.stride() != view.stride()
    allocation.views[name] = (wrong,)
    check = slot_mapping_check(allocation)
    assert check.view_round_trip and check.shared_storage
    assert not check.raw_bytes_match and not check.passed
