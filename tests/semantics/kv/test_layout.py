"""How attention backends lay out one layer's KV cache: the shape the plan reports is the shape
the tensors get, and where the kernels address a token's K and V in it (docs/vllm/kv-semantics.md
§5): the backend's logical shape stored in its stride order."""

from __future__ import annotations

import pytest

from kvplan.errors import KvplanError
from kvplan.semantics.kv.layout import (
    element_offset,
    kernel_block_size,
    kv_addressing,
    kv_cache_shape,
    kv_cache_stride_order,
    mla_row_width,
    specs_by_layer,
    view_shape,
)
from kvplan.semantics.kv.specs import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    MambaSpec,
    MLAAttentionSpec,
    UniformTypeKVCacheSpecs,
)


def test_flash_attention_keeps_k_and_v_first():
    spec = FullAttentionSpec(16, 2, 64, "bfloat16")
    assert view_shape(spec, 131_928) == (2, 131_928, 16, 2, 64) == kv_cache_shape("flash_attn", 131_928, 16, 2, 64)
    assert view_shape(spec, 5, "flashinfer") == (5, 2, 16, 2, 64)


def test_mla_rows_are_the_latent_or_the_packed_fp8_format():
    latent = MLAAttentionSpec(64, 1, 576, "bfloat16")
    packed = MLAAttentionSpec(64, 1, 576, "uint8", cache_dtype_str="fp8_ds_mla")
    assert mla_row_width(latent) == 576 and view_shape(latent, 10) == (10, 64, 576)
    # DeepSeek V3.2's packed fp8 token: 512 fp8 values, 4 float32 scales, 64 bfloat16 RoPE values
    assert mla_row_width(packed) == 512 + 4 * 4 + 64 * 2 == 656 and view_shape(packed, 10) == (10, 64, 656)


def test_state_and_unequal_pages_have_no_attention_view():
    mamba = MambaSpec(block_size=1, shapes=((3, 8),), dtypes=("bfloat16",))
    uniform = UniformTypeKVCacheSpecs(16, {"a": FullAttentionSpec(16, 2, 64, "bfloat16")})
    assert view_shape(mamba, 4) is None and view_shape(uniform, 4) is None


def test_kernel_blocks_and_bad_backends():
    assert kernel_block_size("flashinfer", 128) == 64 and kernel_block_size("flash_attn", 32) == 32
    with pytest.raises(KvplanError, match="multiple of 16"):
        kernel_block_size("triton", 8)
    with pytest.raises(KvplanError, match="unknown attention backend 'xformers'"):
        kv_cache_shape("xformers", 1, 16, 1, 64)


def test_each_layer_gets_its_own_spec():
    small, large = FullAttentionSpec(16, 2, 64, "bfloat16"), FullAttentionSpec(16, 4, 64, "bfloat16")
    config = KVCacheConfig(3, (), (
        KVCacheGroupSpec(("a", "b"), UniformTypeKVCacheSpecs(16, {"a": small, "b": large})),
        KVCacheGroupSpec(("c",), small),
    ))
    assert specs_by_layer(config) == {"a": small, "b": large, "c": small}


# --- where the kernels address a slot -----------------------------------------------------------------

SPEC = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype="bfloat16")
ROW = 64 * 2        # one head's 64 bf16 elements
HALF = 16 * ROW * 2  # one block's K (or V): 16 tokens x 2 heads


def test_element_offset_is_row_major_in_the_stride_order():
    assert element_offset((2, 3, 4), (0, 1, 2), (1, 2, 3)) == 1 * 12 + 2 * 4 + 3
    # the same logical index, stored with dims 1 and 2 swapped
    assert element_offset((2, 3, 4), (0, 2, 1), (1, 2, 3)) == 1 * 12 + 3 * 3 + 2
    with pytest.raises(IndexError):
        element_offset((2, 3, 4), (0, 1, 2), (2, 0, 0))


@pytest.mark.parametrize(("backend", "k_rows", "v_rows"), [
    # slot 37 = block 2, offset 5, of a 10-block pool
    ("flash_attn", (2 * HALF + 5 * 2 * ROW, 2 * HALF + 5 * 2 * ROW + ROW),
     (10 * HALF + 2 * HALF + 5 * 2 * ROW, 10 * HALF + 2 * HALF + 5 * 2 * ROW + ROW)),
    ("flex", (2 * HALF + 10 * ROW, 2 * HALF + 11 * ROW), (12 * HALF + 10 * ROW, 12 * HALF + 11 * ROW)),
    # (blocks, 2, ...): a block's K and V together
    ("flashinfer", (4 * HALF + 10 * ROW, 4 * HALF + 11 * ROW), (5 * HALF + 10 * ROW, 5 * HALF + 11 * ROW)),
    ("triton", (4 * HALF + 10 * ROW, 4 * HALF + 11 * ROW), (5 * HALF + 10 * ROW, 5 * HALF + 11 * ROW)),
    # (2, blocks, heads, block_size, head): each head's tokens together
    ("cpu", (2 * HALF + 5 * ROW, 2 * HALF + 16 * ROW + 5 * ROW),
     (12 * HALF + 5 * ROW, 12 * HALF + 16 * ROW + 5 * ROW)),
])
def test_each_backend_puts_a_slot_where_its_layout_says(backend, k_rows, v_rows):
    addressing = kv_addressing(SPEC, backend, 10)
    assert addressing.rows(0, 37) == k_rows and addressing.rows(1, 37) == v_rows
    assert addressing.row_bytes == ROW and addressing.sides == (0, 1)


def test_with_mamba_layers_a_blocks_k_and_v_sit_together():
    assert kv_cache_stride_order("flash_attn", hybrid=True) == (1, 0, 2, 3, 4)
    addressing = kv_addressing(SPEC, "flash_attn", 10, hybrid=True)
    assert addressing.rows(0, 37)[0] == 4 * HALF + 10 * ROW
    assert addressing.rows(1, 37)[0] == 5 * HALF + 10 * ROW
    with pytest.raises(KvplanError, match="only modelled"):
        kv_cache_stride_order("triton", hybrid=True)


def test_flashinfer_splits_a_manager_block_into_kernel_blocks_with_the_same_slots():
    spec = FullAttentionSpec(block_size=128, num_kv_heads=1, head_size=8, dtype="uint8")
    addressing = kv_addressing(spec, "flashinfer", 3)
    assert addressing.shape == (6, 2, 64, 1, 8) and addressing.kernel_block_size == 64
    # slot 200 = manager block 1, position 72 = kernel block 3, offset 8
    assert addressing.rows(0, 200) == ((3 * 2 * 64 + 8) * 8,)


def test_mla_keeps_one_latent_row_per_token():
    spec = MLAAttentionSpec(block_size=64, num_kv_heads=1, head_size=576, dtype="bfloat16")
    addressing = kv_addressing(spec, "flash_attn", 4)
    assert addressing.sides == (0,) and addressing.rows_per_token == 1
    assert addressing.rows(0, 65) == ((64 + 1) * 576 * 2,)
