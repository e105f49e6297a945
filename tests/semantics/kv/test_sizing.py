"""Pool sizing against the golden vectors of vLLM 0.17.1 (its own functions and its own tests)."""

from __future__ import annotations

from kvplan.semantics.kv.grouping import get_kv_cache_groups
from kvplan.semantics.kv.layer_specs import CacheSettings, build_worker_specs
from kvplan.semantics.kv.sizing import (
    CANNOT_AUTO_FIT,
    LOG_FORMATS,
    estimate_max_model_len_from_groups,
    kv_bytes_per_token,
    kv_capacity,
    size_kv_cache,
)
from kvplan.semantics.kv.specs import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheTensor,
    SizingLimits,
    SlidingWindowSpec,
    UniformTypeKVCacheSpecs,
)
from kvplan.semantics.releases import VLLM_0_17_1

NO_MEMORY = LOG_FORMATS[VLLM_0_17_1.log_format].no_memory


def max_concurrency(config: KVCacheConfig, limits: SizingLimits) -> float:
    return kv_capacity(config, limits, VLLM_0_17_1)[1]

GiB = 1 << 30
QWEN2_AVAILABLE = 25_938_100_224  # "Available KV cache memory: 24.16 GiB"


def qwen2_specs(dtype: str = "bfloat16", block_size: int = 16) -> dict[str, FullAttentionSpec]:
    spec = FullAttentionSpec(block_size=block_size, num_kv_heads=2, head_size=64, dtype=dtype)
    return {f"model.layers.{i}.self_attn.attn": spec for i in range(24)}


def llama_like(layers: int = 32, heads: int = 32, dtype: str = "float16") -> dict[str, FullAttentionSpec]:
    spec = FullAttentionSpec(block_size=16, num_kv_heads=heads, head_size=128, dtype=dtype)
    return {f"layer_{i}": spec for i in range(layers)}


def test_qwen2_golden_case() -> None:
    result = size_kv_cache([qwen2_specs()], [QWEN2_AVAILABLE], SizingLimits(32768, 2048), release=VLLM_0_17_1)
    config = result.config
    assert config is not None and result.fits
    assert config.num_blocks == 131_928
    assert config.kv_cache_tensors == tuple(
        KVCacheTensor(size=1_080_754_176, shared_by=(name,)) for name in qwen2_specs()
    )
    assert result.page_size_bytes == 8192
    assert result.gpu_kv_cache_tokens == 2_110_848
    assert result.log_lines == (
        "GPU KV cache size: 2,110,848 tokens",
        "Maximum concurrency for 32,768 tokens per request: 64.42x",
    )
    assert result.bytes_needed_for_one_max_len_request == 402_653_184
    assert kv_bytes_per_token(qwen2_specs()) == 12_288


def test_qwen2_block_count_edges() -> None:
    limits = SizingLimits(32768, 2048)
    blocks = {
        avail: size_kv_cache([qwen2_specs()], [avail], limits, release=VLLM_0_17_1).num_blocks
        for avail in (QWEN2_AVAILABLE - 1, QWEN2_AVAILABLE, 25_938_296_831, 25_938_296_832)
    }
    assert blocks == {
        QWEN2_AVAILABLE - 1: 131_927, QWEN2_AVAILABLE: 131_928, 25_938_296_831: 131_928, 25_938_296_832: 131_929
    }


def test_qwen2_fp8() -> None:
    result = size_kv_cache([qwen2_specs("uint8")], [QWEN2_AVAILABLE], SizingLimits(32768, 2048), release=VLLM_0_17_1)
    assert (result.page_size_bytes, result.num_blocks) == (4096, 263_856)
    assert result.log_lines[-1] == "Maximum concurrency for 32,768 tokens per request: 128.84x"


def test_not_enough_memory_gives_vllms_error_and_estimate() -> None:
    result = size_kv_cache([qwen2_specs()], [300 * 2**20], SizingLimits(32768, 2048), release=VLLM_0_17_1)
    assert not result.fits and result.config is None
    assert result.finding == (
        "To serve at least one request with the models's max seq len (32768), (0.38 GiB KV cache is needed, "
        "which is larger than the available KV cache memory (0.29 GiB). Based on the available memory, the "
        "estimated maximum model length is 25600. Try increasing `gpu_memory_utilization` or decreasing "
        "`max_model_len` when initializing the engine. See "
        "https://docs.vllm.ai/en/latest/configuration/conserving_memory/ for more details."
    )
    assert result.estimated_max_model_len == 25600


def test_no_estimate_sentence_when_not_one_token_fits() -> None:
    result = size_kv_cache([qwen2_specs()], [1000], SizingLimits(32768, 2048), release=VLLM_0_17_1)
    assert result.estimated_max_model_len == 0
    assert result.finding is not None and "Based on" not in result.finding
    assert "(0.0 GiB)" in result.finding


def test_no_memory_at_all() -> None:
    result = size_kv_cache([qwen2_specs()], [0], SizingLimits(32768, 2048), release=VLLM_0_17_1)
    assert result.finding == NO_MEMORY
    assert NO_MEMORY.startswith("No available memory for the cache blocks. Try increasing")


def test_minimum_pool_is_exactly_one_request() -> None:
    # vLLM accepts exactly 4 x 8192 x 24 bytes at max_model_len 64; one byte less raises
    limits = SizingLimits(64, 2048)
    assert size_kv_cache([qwen2_specs()], [4 * 8192 * 24], limits, release=VLLM_0_17_1).num_blocks == 4
    assert not size_kv_cache([qwen2_specs()], [4 * 8192 * 24 - 1], limits, release=VLLM_0_17_1).fits


def test_estimate_max_model_len_from_vllm_tests() -> None:
    # 32 layers x 32 KV heads x 128 x fp16: 16384 tokens need 8 GiB
    groups = get_kv_cache_groups(llama_like(), release=VLLM_0_17_1).groups
    assert estimate_max_model_len_from_groups(groups, 8 * GiB, SizingLimits(16385, 32768), release=VLLM_0_17_1) == 16384
    assert estimate_max_model_len_from_groups(groups, 8 * GiB, SizingLimits(16383, 32768), release=VLLM_0_17_1) == 16383


def test_max_concurrency_from_vllm_tests() -> None:
    limits = SizingLimits(max_model_len=16384, max_num_batched_tokens=1024)
    full = FullAttentionSpec(block_size=16, num_kv_heads=32, head_size=128, dtype="float16")
    window = SlidingWindowSpec(block_size=16, num_kv_heads=32, head_size=128, dtype="float16", sliding_window=1024)
    first, second = tuple(f"layer_{i}" for i in range(32)), tuple(f"layer_{i}" for i in range(32, 64))

    def config(num_blocks: int, *groups: KVCacheGroupSpec) -> KVCacheConfig:
        return KVCacheConfig(num_blocks=num_blocks, kv_cache_tensors=(), kv_cache_groups=groups)

    assert max_concurrency(config(1536, KVCacheGroupSpec(first, full)), limits) == 1.5
    # a 1,024-token window with 1,024 batched tokens holds 129 blocks per request
    assert window.max_memory_usage_bytes(limits) == 129 * window.page_size_bytes
    assert max_concurrency(config(129 * 3, KVCacheGroupSpec(first, window)), limits) == 3
    hybrid = config((1024 + 129) * 3, KVCacheGroupSpec(first, full), KVCacheGroupSpec(second, window))
    assert max_concurrency(hybrid, limits) == 3


def test_pipeline_stages_take_the_smallest_pool(catalog_shape) -> None:
    shape = catalog_shape("meta-llama/Llama-3.1-8B-Instruct")
    workers = build_worker_specs(shape, CacheSettings(max_model_len=131072, pipeline_parallel_size=3,
        release=VLLM_0_17_1))
    assert [len(specs) for specs in workers] == [11, 11, 10]
    limits = SizingLimits(131072, 2048)

    even = size_kv_cache(workers, [20 * GiB] * 3, limits, release=VLLM_0_17_1)
    assert [config.num_blocks for config in even.worker_configs] == [29_789] * 3
    assert [len(config.kv_cache_tensors) for config in even.worker_configs] == [11, 11, 10]
    assert {t.size for c in even.worker_configs for t in c.kv_cache_tensors} == {65_536 * 29_789}

    middle_small = size_kv_cache(workers, [20 * GiB, 10 * GiB, 20 * GiB], limits, release=VLLM_0_17_1)
    assert [config.num_blocks for config in middle_small.worker_configs] == [14_894] * 3
    assert middle_small.log_lines == (
        "GPU KV cache size: 238,304 tokens",
        "Maximum concurrency for 131,072 tokens per request: 1.82x",
    )


def test_num_gpu_blocks_override() -> None:
    result = size_kv_cache([qwen2_specs()], [QWEN2_AVAILABLE], SizingLimits(32768, 2048), num_gpu_blocks_override=1000,
        release=VLLM_0_17_1)
    assert result.num_blocks == 1000
    assert {t.size for t in result.config.kv_cache_tensors} == {8192 * 1000}
    assert result.log_lines[0] == "Overriding num_gpu_blocks=131928 with num_gpu_blocks_override=1000"


def test_auto_fit_reduces_max_model_len() -> None:
    result = size_kv_cache([qwen2_specs()], [300 * 2**20], SizingLimits(32768, 2048), auto_fit=True,
        release=VLLM_0_17_1)
    assert result.fits and result.max_model_len == 25600
    assert result.log_lines[0] == (
        "Auto-fit max_model_len: reduced from 32768 to 25600 to fit in available GPU memory "
        "(0.29 GiB available for KV cache)"
    )
    assert result.log_lines[-1].startswith("Maximum concurrency for 25,600 tokens per request: ")


def test_auto_fit_keeps_a_length_that_fits_and_refuses_when_nothing_fits() -> None:
    kept = size_kv_cache([qwen2_specs()], [QWEN2_AVAILABLE], SizingLimits(32768, 2048), auto_fit=True,
        release=VLLM_0_17_1)
    assert kept.max_model_len == 32768
    assert kept.log_lines[0] == "Auto-fit max_model_len: full model context length 32768 fits in available GPU memory"
    nothing = size_kv_cache([qwen2_specs()], [1000], SizingLimits(32768, 2048), auto_fit=True, release=VLLM_0_17_1)
    assert not nothing.fits and nothing.finding == CANNOT_AUTO_FIT


def test_attention_free_model_gets_only_the_null_block() -> None:
    result = size_kv_cache([{}], [GiB], SizingLimits(4096, 2048), release=VLLM_0_17_1)
    assert result.fits and result.config == KVCacheConfig(num_blocks=1, kv_cache_tensors=(), kv_cache_groups=())
    assert result.log_lines == () and result.gpu_kv_cache_tokens is None


def test_uniform_type_layers_get_one_tensor_each() -> None:
    small = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=64, dtype="bfloat16")
    large = FullAttentionSpec(block_size=16, num_kv_heads=4, head_size=64, dtype="bfloat16")
    specs = {"a": small, "b": large, "c": small}
    limits = SizingLimits(1024, 2048)
    result = size_kv_cache([specs], [4 << 20], limits, release=VLLM_0_17_1)
    (group,) = result.groups
    assert isinstance(group.kv_cache_spec, UniformTypeKVCacheSpecs)
    assert group.kv_cache_spec.page_size_bytes == 8192 + 16384 + 8192
    assert result.num_blocks == (4 << 20) // 32768 == 128
    assert [(t.size, t.shared_by) for t in result.config.kv_cache_tensors] == [
        (8192 * 128, ("a",)), (16384 * 128, ("b",)), (8192 * 128, ("c",))
    ]
    # the memory check sums each layer's own need
    assert result.bytes_needed_for_one_max_len_request == 64 * (8192 + 16384 + 8192)
