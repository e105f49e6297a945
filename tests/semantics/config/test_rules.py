"""vLLM 0.17.1's configuration rules: scheduler defaults, block sizes, parallelism, dtypes."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvplan.errors import ConfigRejected
from kvplan.semantics.config import cache, model, parallel, scheduler

GiB = 1 << 30
H100 = (9, 0)
B200 = (10, 0)
A100 = (8, 0)
V100 = (7, 0)


@pytest.mark.parametrize(
    ("total", "name", "usage", "expected"),
    [
        (80 * GiB, "NVIDIA H100 80GB HBM3", "openai_api_server", (8192, 1024)),
        (80 * GiB, "NVIDIA H100 80GB HBM3", "llm_class", (16384, 1024)),
        (80 * GiB, "NVIDIA A100-SXM4-80GB", "openai_api_server", (2048, 256)),
        (80 * GiB, "NVIDIA A100-SXM4-80GB", "llm_class", (8192, 256)),
        (48 * GiB, "NVIDIA L40S", "openai_api_server", (2048, 256)),
        (None, "", "openai_api_server", (2048, 256)),
    ],
)
def test_batch_defaults(total, name, usage, expected) -> None:
    assert scheduler.batch_defaults(total, name, usage) == expected


def test_batch_limits_adjustments() -> None:
    # chunked prefill off: the batch must hold a whole max_model_len prompt
    assert scheduler.resolve_batch_limits(32768, enable_chunked_prefill=False) == scheduler.BatchLimits(32768, 256)
    # never more than max_num_seqs full-length requests; seqs never above the token budget
    assert scheduler.resolve_batch_limits(4, max_num_seqs=100) == scheduler.BatchLimits(400, 100)
    assert scheduler.resolve_batch_limits(4096, max_num_batched_tokens=128) == scheduler.BatchLimits(128, 128)
    assert scheduler.resolve_batch_limits(4096, performance_mode="throughput") == scheduler.BatchLimits(4096, 512)
    # user values stay as given
    assert scheduler.resolve_batch_limits(8192, 1000, 64) == scheduler.BatchLimits(1000, 64)


def test_scheduler_validation_texts() -> None:
    with pytest.raises(ConfigRejected, match=r"max_num_batched_tokens \(2048\) is smaller than max_model_len"):
        scheduler.verify_batch_limits(2048, 256, 8192, enable_chunked_prefill=False)
    with pytest.raises(ConfigRejected) as rejected:
        scheduler.verify_batch_limits(128, 256, 8192)
    assert str(rejected.value) == "max_num_batched_tokens (128) must be greater than or equal to max_num_seqs (256)."
    assert scheduler.verify_batch_limits(2048, 256, 8192) == ()
    assert scheduler.verify_batch_limits(8192, 1, 4096) == (
        "max_num_batched_tokens (8192) exceeds max_num_seqs * max_model_len (4096). "
        "This may lead to unexpected behavior.",
    )


def test_max_model_len_defaults_and_limits() -> None:
    assert model.verify_max_model_len(None, 32768.0, "max_position_embeddings") == 32768
    assert model.verify_max_model_len(-1, 32768.0, "max_position_embeddings") == 32768
    assert model.verify_max_model_len(8192, 32768.0, "max_position_embeddings") == 8192
    assert model.verify_max_model_len(8192, 4096.0, "max_position_embeddings", model_max_length=8192) == 8192


def test_block_sizes() -> None:
    for size in cache.ALLOWED_BLOCK_SIZES:
        cache.check_block_size(size)
    with pytest.raises(ConfigRejected, match="--block-size 48 is not allowed"):
        cache.check_block_size(48)


@pytest.mark.parametrize(
    ("layers", "stages", "sizes"),
    [(32, 3, (11, 11, 10)), (61, 4, (15, 15, 16, 15)), (80, 3, (27, 27, 26)),
     (28, 8, (3, 3, 3, 4, 4, 4, 4, 3)), (118, 4, (29, 30, 30, 29)), (32, 4, (8, 8, 8, 8))],
)
def test_pipeline_partitions(layers, stages, sizes) -> None:
    partition, log = parallel.pp_partition(layers, stages)
    assert partition == sizes
    assert (log is None) == (layers % stages == 0)
    ranges = [parallel.get_pp_indices(layers, rank, stages) for rank in range(stages)]
    assert [end - start for start, end in ranges] == list(sizes)
    assert ranges[0][0] == 0 and ranges[-1][1] == layers


def test_pipeline_partition_log_and_override() -> None:
    assert parallel.pp_partition(32, 3)[1] == (
        "Hidden layers were unevenly partitioned: [11,11,10]. This can be manually overridden using the "
        "VLLM_PP_LAYER_PARTITION environment variable"
    )
    assert parallel.pp_partition(32, 3, "10,10,12") == ((10, 10, 12), None)
    assert parallel.get_pp_indices(32, 2, 3, "10,10,12") == (20, 32)
    with pytest.raises(ConfigRejected, match=r"len\(partitions\)=2 does not match pp_size=3\."):
        parallel.pp_partition(32, 3, "16,16")
    with pytest.raises(ConfigRejected, match=r"sum\(partitions\)=30 does not match num_hidden_layers=32\."):
        parallel.pp_partition(32, 3, "10,10,10")
    with pytest.raises(ConfigRejected, match="Invalid partition string: a,b"):
        parallel.pp_partition(32, 2, "a,b")


def test_kv_heads_per_rank() -> None:
    assert [parallel.kv_heads_per_rank(8, tp) for tp in (1, 2, 4, 8, 16)] == [8, 4, 2, 1, 1]
    assert parallel.kv_heads_per_rank(2, 4) == 1  # replicated: the page no longer shrinks
    assert parallel.kv_heads_per_rank(8, 16, replicate=False) == 0


def test_tensor_parallel_checks(catalog_shape) -> None:
    parallel.verify_tensor_parallel(catalog_shape("Qwen/Qwen3-Next-80B-A3B-Thinking"), 4)  # 2 KV heads, replicated
    parallel.verify_tensor_parallel(catalog_shape("deepseek-ai/DeepSeek-V3"), 8)  # MLA latent: no KV split
    with pytest.raises(ConfigRejected) as rejected:
        parallel.verify_tensor_parallel(catalog_shape("Qwen/Qwen2-0.5B-Instruct"), 4)
    assert str(rejected.value) == (
        "Total number of attention heads (14) must be divisible by tensor parallel size (4)."
    )
    smol = catalog_shape("HuggingFaceTB/SmolLM2-135M-Instruct")  # 9 heads, 3 KV heads
    parallel.verify_tensor_parallel(smol, 9)  # each KV head replicated on 3 ranks
    with pytest.raises(ConfigRejected, match=r"Total number of KV heads \(3\) must be divisible"):
        parallel.verify_tensor_parallel(replace(smol, num_attention_heads=12), 2)
    with pytest.raises(ConfigRejected, match=r"Tensor parallel size \(14\) must be divisible"):
        parallel.verify_tensor_parallel(catalog_shape("Qwen/Qwen2.5-7B-Instruct"), 14)  # 28 heads, 4 KV heads


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
    choice = cache.mla_block_size(capability, requested, sparse=sparse, qk_nope_head_dim=nope)
    assert (choice.block_size, choice.backend, choice.log is not None) == (expected, backend, forced)


def test_mla_block_size_log_and_explicit_backend() -> None:
    assert cache.mla_block_size(H100, 16, sparse=False, qk_nope_head_dim=128).log == (
        "Forcing kv cache block size to 64 for FlashMLA backend."
    )
    cutlass = cache.mla_block_size(H100, 64, sparse=False, qk_nope_head_dim=128, backend="CUTLASS_MLA")
    assert cutlass.block_size == 128
    assert cutlass.log == "Forcing kv cache block size to 128 for CUTLASS_MLA backend."
    assert cache.mla_block_size(H100, 16, sparse=False, qk_nope_head_dim=128, backend="TRITON_MLA").block_size == 16


def test_kernel_block_alignment() -> None:
    assert cache.kernel_block_alignment(H100, 256, use_mla=False) == 16
    assert cache.kernel_block_alignment(B200, 256, use_mla=False) == 32
    assert cache.kernel_block_alignment(B200, 128, use_mla=False) == 16
    assert cache.kernel_block_alignment(H100, 576, use_mla=True) == 64
    assert cache.kernel_block_alignment(B200, 576, use_mla=True, backend="CUTLASS_MLA") == 128


def test_mamba_cache_mode() -> None:
    assert cache.resolve_mamba_cache_mode(False, True).mode == "none"
    assert cache.resolve_mamba_cache_mode(False, True, "all").logs == (
        "Mamba cache mode is set to 'none' when prefix caching is disabled",
    )
    assert cache.resolve_mamba_cache_mode(True, True).mode == "all"     # Nemotron-H
    assert cache.resolve_mamba_cache_mode(True, False).mode == "align"  # Qwen3-Next
    assert cache.resolve_mamba_cache_mode(True, False, "all").mode == "align"
    with pytest.raises(ConfigRejected, match="Chunked prefill is required"):
        cache.resolve_mamba_cache_mode(True, False, enable_chunked_prefill=False)


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


@pytest.mark.parametrize(
    ("config_dtype", "model_type", "capability", "expected"),
    [
        ("bfloat16", "llama", H100, "bfloat16"),
        ("bfloat16", "llama", V100, "float16"),
        ("float16", "llama", H100, "float16"),
        ("float16", "llama", V100, "float16"),
        ("float32", "llama", H100, "bfloat16"),
        (None, "gpt_oss", H100, "bfloat16"),
        (None, "gpt_oss", V100, "float16"),
        ("float32", "gemma2", V100, "float32"),
        ("bfloat16", "gemma3", V100, "float32"),
        ("bfloat16", "gemma2", A100, "bfloat16"),
        ("bfloat16", "llama", None, "bfloat16"),
    ],
)
def test_auto_dtype(config_dtype, model_type, capability, expected) -> None:
    assert model.resolve_model_dtype("auto", config_dtype, model_type, capability).dtype == expected


def test_dtype_logs_and_errors() -> None:
    assert model.resolve_model_dtype("auto", "float32", "llama", H100).logs == (
        "Downcasting torch.float32 to torch.bfloat16.",
    )
    fallback = model.resolve_model_dtype("auto", "bfloat16", "llama", (7, 5), gpu_name="Tesla T4")
    assert fallback.logs[0] == (
        "Your device 'Tesla T4' (with compute capability 7.5) doesn't support torch.bfloat16. "
        "Falling back to torch.float16 for compatibility."
    )
    assert model.resolve_model_dtype("auto", "float32", "bert", H100, is_pooling_model=True).dtype == "float16"
    casts = [model.resolve_model_dtype(dtype, "bfloat16", "llama").logs for dtype in ("half", "float")]
    assert casts == [("Casting torch.bfloat16 to torch.float16.",), ("Upcasting torch.bfloat16 to torch.float32.",)]
    with pytest.raises(ConfigRejected) as rejected:
        model.resolve_model_dtype("float16", "bfloat16", "gemma2")
    assert str(rejected.value) == (
        "The model type 'gemma2' does not support float16. Reason: Numerical instability. "
        "Please use bfloat16 or float32 instead."
    )
    with pytest.raises(ConfigRejected, match="Unknown dtype: 'int4'"):
        model.resolve_model_dtype("int4", "bfloat16", "llama")


def test_kv_cache_dtype() -> None:
    assert cache.kv_cache_dtype("auto", "bfloat16") == "bfloat16"
    assert [cache.kv_cache_dtype(d, "bfloat16") for d in ("fp8", "fp8_e4m3", "fp8_e5m2")] == ["uint8"] * 3
    with pytest.raises(ConfigRejected, match="--kv-cache-dtype 'int8'"):
        cache.kv_cache_dtype("int8", "bfloat16")


def test_disable_hybrid_kv_cache_manager_default() -> None:
    assert cache.resolve_disable_hybrid_kv_cache_manager(None, has_chunked_local_attention=False) is False
    assert cache.resolve_disable_hybrid_kv_cache_manager(None, has_chunked_local_attention=True) is True
    assert cache.resolve_disable_hybrid_kv_cache_manager(True, has_chunked_local_attention=False) is True
