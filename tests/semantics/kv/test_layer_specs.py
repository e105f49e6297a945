"""Per-layer specs from model shapes, and the hybrid worked cases of vLLM 0.17.1 (docs/vllm/kv-semantics.md §3.1)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvplan.semantics.kv.layer_specs import CacheSettings, build_worker_specs, mamba_state, resolve_cache_layout
from kvplan.semantics.kv.sizing import size_kv_cache
from kvplan.semantics.kv.specs import FullAttentionSpec, MambaSpec, MLAAttentionSpec, SizingLimits
from kvplan.semantics.models.shape import LayerShape
from kvplan.semantics.releases import VLLM_0_17_1

GiB = 1 << 30
QWEN3_NEXT = "Qwen/Qwen3-Next-80B-A3B-Thinking"
NEMOTRON_H = "nvidia/Nemotron-H-56B-Base-8K"


def pages(specs: dict) -> set[int]:
    return {spec.page_size_bytes for spec in specs.values()}


@pytest.mark.parametrize(
    ("model", "tp", "cache_dtype", "block", "page", "padded"),
    [
        (QWEN3_NEXT, 1, "auto", 544, 1_114_112, True),
        (QWEN3_NEXT, 1, "fp8", 1_072, 1_097_728, False),
        (QWEN3_NEXT, 4, "auto", 272, 278_528, True),
        (NEMOTRON_H, 1, "auto", 2_080, 8_519_680, True),
        (NEMOTRON_H, 1, "fp8", 4_160, 8_519_680, True),
        (NEMOTRON_H, 4, "auto", 2_080, 2_129_920, True),
    ],
)
def test_hybrid_block_size_table(catalog_shape, model, tp, cache_dtype, block, page, padded) -> None:
    shape = catalog_shape(model)
    knobs = CacheSettings(max_model_len=shape.max_model_len, cache_dtype=cache_dtype, tensor_parallel_size=tp,
        release=VLLM_0_17_1)
    layout = resolve_cache_layout(shape, knobs)
    assert (layout.block_size, layout.block_size_rule, layout.mamba_cache_mode) == (block, "hybrid", "none")
    assert layout.mamba_block_size == shape.max_model_len and not layout.enable_prefix_caching
    assert (layout.mamba_page_size_padded == page) is padded
    (specs,) = build_worker_specs(shape, knobs)
    assert pages(specs) == {page}


def test_mamba_state_shapes_per_rank(catalog_shape) -> None:
    gdn = catalog_shape(QWEN3_NEXT).layers[0].mamba
    mamba2 = catalog_shape(NEMOTRON_H).layers[0].mamba
    knobs = CacheSettings(max_model_len=8192, release=VLLM_0_17_1)
    assert mamba_state(gdn, 1, "bfloat16", knobs) == (((3, 8192), (32, 128, 128)), ("bfloat16", "bfloat16"))
    assert mamba_state(gdn, 2, "bfloat16", knobs)[0] == ((3, 4096), (16, 128, 128))
    assert mamba_state(gdn, 4, "bfloat16", knobs)[0] == ((3, 2048), (8, 128, 128))
    assert mamba_state(mamba2, 1, "bfloat16", knobs) == (((3, 20480), (256, 64, 256)), ("bfloat16", "float16"))
    assert mamba_state(mamba2, 4, "bfloat16", knobs)[0] == ((3, 5120), (64, 64, 256))
    # an explicit --mamba-ssm-cache-dtype wins over the model hook's float16
    assert mamba_state(mamba2, 1, "bfloat16", replace(knobs, mamba_ssm_cache_dtype="float32"))[1] == (
        "bfloat16", "float32"
    )


@pytest.mark.parametrize(
    ("model", "gib", "cache_dtype", "tp", "blocks", "tokens", "concurrency"),
    [
        (QWEN3_NEXT, 20, "auto", 1, 1_606, 218_144, "3.31x"),
        (QWEN3_NEXT, 70, "auto", 1, 5_621, 764_320, "11.59x"),
        (QWEN3_NEXT, 20, "fp8", 1, 1_630, 436_304, "6.57x"),
        (NEMOTRON_H, 20, "auto", 1, 252, 74_880, "25.20x"),
        (NEMOTRON_H, 70, "auto", 1, 882, 262_080, "88.20x"),
        (NEMOTRON_H, 20, "auto", 4, 1_008, 299_520, "100.80x"),
    ],
)
def test_hybrid_worked_cases(catalog_shape, model, gib, cache_dtype, tp, blocks, tokens, concurrency) -> None:
    shape = catalog_shape(model)
    knobs = CacheSettings(max_model_len=shape.max_model_len, cache_dtype=cache_dtype, tensor_parallel_size=tp,
        release=VLLM_0_17_1)
    result = size_kv_cache(build_worker_specs(shape, knobs), [gib * GiB], SizingLimits(shape.max_model_len, 8192),
        release=VLLM_0_17_1)
    assert (result.num_blocks, result.gpu_kv_cache_tokens) == (blocks, tokens)
    assert result.log_lines[-1].endswith(f"tokens per request: {concurrency}")
    assert result.config.needs_kv_cache_zeroing


def test_nemotron_h_groups_and_memory_check(catalog_shape) -> None:
    shape = catalog_shape(NEMOTRON_H)
    workers = build_worker_specs(shape, CacheSettings(max_model_len=8192, release=VLLM_0_17_1))
    result = size_kv_cache(workers, [20 * GiB], SizingLimits(8192, 8192), release=VLLM_0_17_1)
    assert [len(g.layer_names) for g in result.groups] == [9] * 6 + [10]
    assert isinstance(result.groups[0].kv_cache_spec, MambaSpec)
    # group 0 is Mamba (one state block), so the check needs group_size pages only
    assert result.bytes_needed_for_one_max_len_request == 10 * 8_519_680
    assert result.log_lines[0] == "Add 6 padding layers, may waste at most 11.11% KV cache memory"
    shared = [len(t.shared_by) for t in result.config.kv_cache_tensors]
    assert shared == [7] * 9 + [1]


def test_nemotron_h_pipeline_stages_follow_the_pattern(catalog_shape) -> None:
    shape = catalog_shape(NEMOTRON_H)
    workers = build_worker_specs(shape, CacheSettings(max_model_len=8192, pipeline_parallel_size=4,
        release=VLLM_0_17_1))
    pattern = "".join("M" if layer.kind == "mamba" else "*" if layer.kind == "full" else "-" for layer in shape.layers)
    bounds = [0, 29, 59, 89, 118]  # 118 layers over 4 stages: [29, 30, 30, 29]
    for specs, start, end in zip(workers, bounds, bounds[1:], strict=False):
        stage = pattern[start:end]
        assert len(specs) == stage.count("M") + stage.count("*")
        assert sum(isinstance(s, FullAttentionSpec) for s in specs.values()) == stage.count("*")


def test_attention_pages_under_tensor_parallelism(catalog_shape) -> None:
    llama = catalog_shape("meta-llama/Llama-3.1-70B-Instruct")
    deepseek = catalog_shape("deepseek-ai/DeepSeek-V3")
    for tp, page in ((1, 65_536), (2, 32_768), (4, 16_384)):
        (specs,) = build_worker_specs(llama, CacheSettings(max_model_len=8192, tensor_parallel_size=tp,
            release=VLLM_0_17_1))
        assert pages(specs) == {page}
        # the MLA latent is not split: every rank stores all of it
        (specs,) = build_worker_specs(deepseek, CacheSettings(max_model_len=8192, tensor_parallel_size=tp,
            release=VLLM_0_17_1))
        assert pages(specs) == {18_432}


def test_gpt_oss_divides_kv_heads_plainly(catalog_shape) -> None:
    shape = catalog_shape("openai/gpt-oss-20b")
    (specs,) = build_worker_specs(shape, CacheSettings(max_model_len=8192, tensor_parallel_size=4, release=VLLM_0_17_1))
    assert {spec.num_kv_heads for spec in specs.values()} == {2}
    windows = [spec.sliding_window for spec in specs.values() if hasattr(spec, "sliding_window")]
    assert windows[:4] == [128, None, 128, None]  # even layers slide


def test_mla_block_size_on_hopper_and_without_a_gpu(catalog_shape) -> None:
    shape = catalog_shape("deepseek-ai/DeepSeek-V3")
    on_h100 = resolve_cache_layout(shape, CacheSettings(max_model_len=8192, gpu_capability=(9, 0), release=VLLM_0_17_1))
    assert (on_h100.block_size, on_h100.block_size_rule, on_h100.mla_backend) == (64, "FLASHMLA", "FLASHMLA")
    assert on_h100.logs == ("Forcing kv cache block size to 64 for FlashMLA backend.",)
    (specs,) = build_worker_specs(shape, CacheSettings(max_model_len=8192, gpu_capability=(9, 0), release=VLLM_0_17_1))
    assert pages(specs) == {64 * 576 * 2}  # 73,728 bytes
    # without --gpu the user's block size stands, even one a Hopper GPU would replace
    no_gpu = resolve_cache_layout(shape, CacheSettings(max_model_len=8192, block_size=32, release=VLLM_0_17_1))
    assert (no_gpu.block_size, no_gpu.block_size_rule, no_gpu.mla_backend) == (32, "user", None)
    default = resolve_cache_layout(shape, CacheSettings(max_model_len=8192, release=VLLM_0_17_1))
    assert (default.block_size, default.block_size_rule) == (16, "default")


def test_sparse_mla_uses_the_packed_fp8_format(catalog_shape) -> None:
    shape = replace(catalog_shape("deepseek-ai/DeepSeek-V3"), mla_sparse=True)
    knobs = CacheSettings(max_model_len=8192, cache_dtype="fp8", release=VLLM_0_17_1)
    layout = resolve_cache_layout(shape, knobs)
    assert (layout.cache_dtype, layout.kv_dtype, layout.block_size) == ("fp8_ds_mla", "uint8", 64)
    (specs,) = build_worker_specs(shape, knobs)
    spec = next(iter(specs.values()))
    assert isinstance(spec, MLAAttentionSpec) and spec.page_size_bytes == 64 * 656


def test_layers_without_cache_get_no_spec(catalog_shape) -> None:
    shape = catalog_shape("Qwen/Qwen2-0.5B-Instruct")
    layers = list(shape.layers)
    layers[1] = LayerShape(index=1, name="model.layers.1.mlp", kind="none")
    layers[2] = LayerShape(index=2, name="model.layers.2.odd", kind="unsupported", note="unknown mixer")
    (specs,) = build_worker_specs(replace(shape, layers=tuple(layers)), CacheSettings(max_model_len=4096,
        release=VLLM_0_17_1))
    assert len(specs) == 22 and "model.layers.1.mlp" not in specs and "model.layers.2.odd" not in specs


def test_prefix_caching_on_a_hybrid_changes_the_mamba_mode(catalog_shape) -> None:
    nemotron = resolve_cache_layout(
        catalog_shape(NEMOTRON_H), CacheSettings(max_model_len=8192, enable_prefix_caching=True, release=VLLM_0_17_1)
    )
    assert (nemotron.mamba_cache_mode, nemotron.block_size, nemotron.mamba_block_size) == ("all", 2176, 2176)
    qwen = resolve_cache_layout(catalog_shape(QWEN3_NEXT),
                                CacheSettings(max_model_len=8192, enable_prefix_caching=True, release=VLLM_0_17_1))
    assert (qwen.mamba_cache_mode, qwen.block_size, qwen.mamba_block_size) == ("align", 544, 544)
