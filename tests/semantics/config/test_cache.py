"""vLLM 0.17.1's cache settings: block sizes, MLA backends, Mamba hybrids, KV-cache dtype, utilization."""

from __future__ import annotations

import pytest

from kvplan.errors import ConfigRejected
from kvplan.semantics.config import cache
from kvplan.semantics.releases import VLLM_0_17_1

H100 = (9, 0)
B200 = (10, 0)
A100 = (8, 0)


def test_block_sizes() -> None:
    for size in cache.ALLOWED_BLOCK_SIZES:
        cache.check_block_size(size)
    with pytest.raises(ConfigRejected, match="--block-size 48 is not allowed"):
        cache.check_block_size(48)


@pytest.mark.parametrize(
    ("capability", "requested", "sparse", "nope", "expected", "backend", "forced"),
    [
        (H100, None, False, 128, 64, "FLASHMLA", True),        # FlashMLA on Hopper
        (H100, 128, False, 128, 128, "FLASHMLA", False),       # a multiple of 64 is kept
        (B200, None, False, 128, 64, "FLASHINFER_MLA", True),  # DeepSeek V2/V3 on Blackwell
        (B200, 32, False, 128, 32, "FLASHINFER_MLA", False),
        (B200, 64, False, 64, 128, "CUTLASS_MLA", True),       # other MLA models on Blackwell
        (A100, None, False, 128, 16, "FLASHMLA", False),       # no dense FlashMLA kernels: kept
        (None, 32, False, 128, 32, None, False),               # no GPU given: the user's value
        (A100, 16, True, 128, 64, "FLASHMLA_SPARSE", True),    # sparse MLA: 64 on any GPU
        (H100, 128, True, 128, 64, "FLASHMLA_SPARSE", True),
    ],
)
def test_mla_block_size(capability, requested, sparse, nope, expected, backend, forced) -> None:
    choice = cache.mla_block_size(capability, requested, sparse=sparse, qk_nope_head_dim=nope, release=VLLM_0_17_1)
    assert (choice.block_size, choice.backend, choice.log is not None) == (expected, backend, forced)


def test_mla_block_size_log_and_explicit_backend() -> None:
    assert cache.mla_block_size(H100, 16, sparse=False, qk_nope_head_dim=128, release=VLLM_0_17_1).log == (
        "Forcing kv cache block size to 64 for FlashMLA backend."
    )
    cutlass = cache.mla_block_size(H100, 64, sparse=False, qk_nope_head_dim=128, backend="CUTLASS_MLA",
                                   release=VLLM_0_17_1)
    assert cutlass.block_size == 128
    assert cutlass.log == "Forcing kv cache block size to 128 for CUTLASS_MLA backend."
    triton = cache.mla_block_size(H100, 16, sparse=False, qk_nope_head_dim=128, backend="TRITON_MLA",
                                  release=VLLM_0_17_1)
    assert triton.block_size == 16


def test_kernel_block_alignment() -> None:
    assert cache.kernel_block_alignment(H100, 256, use_mla=False) == 16
    assert cache.kernel_block_alignment(B200, 256, use_mla=False) == 32
    assert cache.kernel_block_alignment(B200, 128, use_mla=False) == 16
    assert cache.kernel_block_alignment(H100, 576, use_mla=True) == 64
    assert cache.kernel_block_alignment(B200, 576, use_mla=True, backend="CUTLASS_MLA") == 128


def test_mamba_cache_mode() -> None:
    assert cache.resolve_mamba_cache_mode(False, True, release=VLLM_0_17_1).mode == "none"
    assert cache.resolve_mamba_cache_mode(False, True, "all", release=VLLM_0_17_1).logs == (
        "Mamba cache mode is set to 'none' when prefix caching is disabled",
    )
    assert cache.resolve_mamba_cache_mode(True, True, release=VLLM_0_17_1).mode == "all"     # Nemotron-H
    assert cache.resolve_mamba_cache_mode(True, False, release=VLLM_0_17_1).mode == "align"  # Qwen3-Next
    assert cache.resolve_mamba_cache_mode(True, False, "all", release=VLLM_0_17_1).mode == "align"
    with pytest.raises(ConfigRejected, match="Chunked prefill is required"):
        cache.resolve_mamba_cache_mode(True, False, enable_chunked_prefill=False, release=VLLM_0_17_1)


def test_hybrid_block_size_qwen3_next() -> None:
    # 2 KV heads x 256 x bf16 = 2,048 bytes per token; one GDN state is 1,097,728 bytes
    blocks = cache.hybrid_block_size(
        2048, 1_097_728, block_size=None, mamba_cache_mode="none", alignment=16, max_model_len=262144
    )
    assert (blocks.block_size, blocks.mamba_block_size, blocks.mamba_page_size_padded) == (544, 262144, 1_114_112)
    assert blocks.logs == (
        "Setting attention block size to 544 tokens to ensure that attention page size is >= mamba page size.",
        "Padding mamba page size by 1.49% to ensure that mamba page size and attention page size are "
        "exactly equal.",
    )
    larger = cache.hybrid_block_size(
        2048, 1_097_728, block_size=1024, mamba_cache_mode="none", alignment=16, max_model_len=8192
    )
    assert (larger.block_size, larger.mamba_page_size_padded) == (1024, 1024 * 2048)


def test_hybrid_block_size_with_prefix_caching() -> None:
    # mode "all" (Nemotron-H): chunk lcm(128, 16) = 128, cdiv(cdiv(8,511,488, 4,096), 128) = 17 chunks
    all_mode = cache.hybrid_block_size(
        4096, 8_511_488, block_size=None, mamba_cache_mode="all", alignment=16, max_model_len=8192,
        mamba_chunk_size=128,
    )
    assert (all_mode.block_size, all_mode.mamba_block_size) == (128 * 17, 128 * 17)
    # mode "align" (Qwen3-Next): the Mamba block follows the attention block
    align = cache.hybrid_block_size(
        2048, 1_097_728, block_size=None, mamba_cache_mode="align", alignment=16, max_model_len=8192
    )
    assert (align.block_size, align.mamba_block_size) == (544, 544)


def test_exact_fit_needs_no_padding() -> None:
    blocks = cache.hybrid_block_size(1024, 16 * 1024, block_size=None, mamba_cache_mode="none", alignment=16,
                                     max_model_len=4096)
    assert (blocks.block_size, blocks.mamba_page_size_padded) == (16, None)


def test_kv_cache_dtype() -> None:
    assert cache.kv_cache_dtype("auto", "bfloat16") == "bfloat16"
    assert [cache.kv_cache_dtype(d, "bfloat16") for d in ("fp8", "fp8_e4m3", "fp8_e5m2")] == ["uint8"] * 3
    with pytest.raises(ConfigRejected, match="--kv-cache-dtype 'int8'"):
        cache.kv_cache_dtype("int8", "bfloat16")


def test_hybrid_manager_stays_on_for_chunked_local_attention_unless_the_variable_is_0() -> None:
    # VLLM_ALLOW_CHUNKED_LOCAL_ATTN_WITH_HYBRID_KV_CACHE is 1 unless set (the rules cases confirm it)
    resolve = cache.resolve_disable_hybrid_kv_cache_manager
    assert resolve(None, has_chunked_local_attention=False) == cache.HybridManagerChoice(False)
    assert resolve(None, has_chunked_local_attention=True) == cache.HybridManagerChoice(False)
    assert resolve(None, True, allow_chunked_local_with_hybrid=False) == cache.HybridManagerChoice(
        True, (cache.CHUNKED_LOCAL_HYBRID_WARNING,))
    assert resolve(None, False, allow_chunked_local_with_hybrid=False).disabled is False
    assert resolve(True, has_chunked_local_attention=False).disabled is True
    with pytest.raises(ConfigRejected, match="explicitly enabled"):
        resolve(False, True, allow_chunked_local_with_hybrid=False)


@pytest.mark.parametrize("bad", [0.0, -0.1, 1.01])
def test_utilization_outside_zero_one_is_bad_input(bad):
    assert "(0, 1]" in cache.utilization_problem(bad)
    assert cache.utilization_problem(0.9) is None and cache.utilization_problem(1) is None
