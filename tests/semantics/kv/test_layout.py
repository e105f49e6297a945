"""How attention backends lay out one layer's KV cache: the shape the plan reports is the shape
the tensors get."""

from __future__ import annotations

import pytest

from kvplan.errors import KvplanError
from kvplan.semantics.kv.layout import kernel_block_size, kv_cache_shape, mla_row_width, specs_by_layer, view_shape
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
