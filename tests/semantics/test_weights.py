"""Weight bytes: the stored catalog layouts against a fresh meta-device build, golden parameter counts,
vLLM's TP/PP sharding on tiny layouts, and the quantization schemes."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import pytest

from kvplan.measure.hf_config import load_model_shape
from kvplan.measure.meta_build import weights_for
from kvplan.semantics.models import catalog_ids, resolve_config
from kvplan.semantics.weights import (
    ParamGroup,
    QuantScheme,
    WeightLayout,
    catalog_layouts,
    estimate,
    group_bytes,
    layout_from_json,
    layout_to_json,
    quant_scheme,
    shard_rule,
)

LAYERS = (0, 1, 2)
BF16 = 2


def tiny_layout(*, kv_heads: int = 2, tied: bool = False, vocab: int = 1000) -> WeightLayout:
    """A 3-layer Llama: hidden 64, 4 heads of 16, intermediate 128."""
    kv_rows = kv_heads * 16
    groups = [
        ParamGroup("model.embed_tokens.weight", (vocab, 64), "Embedding"),
        ParamGroup("model.layers.{i}.self_attn.q_proj.weight", (64, 64), "Linear", layers=LAYERS),
        ParamGroup("model.layers.{i}.self_attn.k_proj.weight", (kv_rows, 64), "Linear", layers=LAYERS),
        ParamGroup("model.layers.{i}.self_attn.v_proj.weight", (kv_rows, 64), "Linear", layers=LAYERS),
        ParamGroup("model.layers.{i}.self_attn.o_proj.weight", (64, 64), "Linear", layers=LAYERS),
        ParamGroup("model.layers.{i}.mlp.gate_proj.weight", (128, 64), "Linear", layers=LAYERS),
        ParamGroup("model.layers.{i}.mlp.up_proj.weight", (128, 64), "Linear", layers=LAYERS),
        ParamGroup("model.layers.{i}.mlp.down_proj.weight", (64, 128), "Linear", layers=LAYERS),
        ParamGroup("model.layers.{i}.input_layernorm.weight", (64,), "LlamaRMSNorm", layers=LAYERS),
        ParamGroup("model.layers.{i}.post_attention_layernorm.weight", (64,), "LlamaRMSNorm", layers=LAYERS),
        ParamGroup("model.norm.weight", (64,), "LlamaRMSNorm"),
    ]
    if not tied:
        groups.append(ParamGroup("lm_head.weight", (vocab, 64), "Linear"))
    return WeightLayout("tiny", "LlamaForCausalLM", 3, vocab, 64, 4, kv_heads, tied, tuple(groups))


def bf16(layout: WeightLayout, tp: int = 1, pp: int = 1, scheme: QuantScheme = QuantScheme("none")):
    return estimate(layout, "bfloat16", tp, pp, scheme, "test")


def layer_elements(tp: int, kv_rows_per_rank: int) -> int:
    q, o = 64 * 64 // tp, 64 * 64 // tp
    mlp = 3 * 128 * 64 // tp
    return q + 2 * kv_rows_per_rank * 64 + o + mlp + 2 * 64   # norms are replicated


def test_unsharded_totals():
    layout = tiny_layout()
    per_layer = layer_elements(1, 32)
    expected = 2 * 1000 * 64 + 3 * per_layer + 64
    assert layout.total_params == expected
    result = bf16(layout)
    assert result.exact and result.total_params == expected
    # vLLM pads the vocab to a multiple of 64 even on one GPU
    assert result.total_bytes == expected * BF16
    assert result.per_rank_bytes == (expected + 2 * 24 * 64) * BF16


def test_tensor_parallel_shards():
    # vocab 1000 -> 1024 padded -> 512 rows per rank; q/o/MLP halve; 2 KV heads -> 1 per rank
    result = bf16(tiny_layout(), tp=2)
    expected = 2 * 512 * 64 + 3 * layer_elements(2, 16) + 64
    assert result.per_rank_bytes == expected * BF16


def test_kv_projection_replicated_when_fewer_heads_than_ranks():
    # 2 KV heads over 4 ranks: every rank keeps one whole head (16 rows), it does not shrink to 8
    result = bf16(tiny_layout(), tp=4)
    expected = 2 * 256 * 64 + 3 * layer_elements(4, 16) + 64
    assert result.per_rank_bytes == expected * BF16


def test_pipeline_stages_hold_their_layers_and_the_ends():
    # 3 layers over 2 stages -> [2, 1]: embeddings first, final norm and lm_head last
    result = bf16(tiny_layout(vocab=1024), pp=2)
    first = 1024 * 64 + 2 * layer_elements(1, 32)
    last = layer_elements(1, 32) + 64 + 1024 * 64
    assert result.per_stage_bytes == (first * BF16, last * BF16)
    assert result.per_rank_bytes == max(first, last) * BF16


def test_tied_embeddings_counted_once_but_copied_to_the_last_stage():
    tied = tiny_layout(tied=True, vocab=1024)
    assert bf16(tied).total_bytes == bf16(tiny_layout(vocab=1024)).total_bytes - 1024 * 64 * BF16
    stages = bf16(tied, pp=2).per_stage_bytes
    assert stages[1] == (layer_elements(1, 32) + 64 + 1024 * 64) * BF16


def test_float32_parameters_keep_their_dtype():
    layout = tiny_layout(vocab=1024)
    router = ParamGroup("model.layers.{i}.mlp.gate.weight", (8, 64), "DeepseekV3TopkRouter", "float32", LAYERS)
    with_router = WeightLayout(**{**layout.__dict__, "groups": (*layout.groups, router)})
    assert bf16(with_router).total_bytes - bf16(layout).total_bytes == 3 * 8 * 64 * 4


def test_fp8_block_scheme():
    scheme = QuantScheme("fp8", (128, 128))
    linear = ParamGroup("model.layers.{i}.mlp.up_proj.weight", (256, 200), "Linear", layers=(0,))
    assert group_bytes(linear, linear.shape, "bfloat16", scheme) == 256 * 200 + 2 * 2 * 4
    experts = ParamGroup("model.layers.{i}.mlp.experts.gate_up_proj", (4, 256, 128), "DeepseekV3Experts", layers=(0,))
    assert group_bytes(experts, experts.shape, "bfloat16", scheme) == 4 * 256 * 128 + 4 * 2 * 1 * 4
    for unquantized in (ParamGroup("lm_head.weight", (1000, 64), "Linear"),
                        ParamGroup("model.layers.{i}.mlp.gate.weight", (8, 64), "Linear", layers=(0,))):
        assert group_bytes(unquantized, unquantized.shape, "bfloat16", scheme) == unquantized.numel * BF16
    per_tensor = QuantScheme("fp8")
    assert group_bytes(linear, linear.shape, "bfloat16", per_tensor) == 256 * 200 + 4


def test_mxfp4_quantizes_experts_only_and_honours_modules_to_not_convert():
    scheme = quant_scheme({"quantization_config": {"quant_method": "mxfp4",
                                                   "modules_to_not_convert": ["model.layers.*.self_attn"]}})
    experts = ParamGroup("model.layers.{i}.mlp.experts.down_proj", (4, 64, 128), "GptOssExperts", layers=(0,))
    assert group_bytes(experts, experts.shape, "bfloat16", scheme) == 4 * 64 * 128 // 2 + 4 * 64 * 128 // 32
    bias = ParamGroup("model.layers.{i}.mlp.experts.down_proj_bias", (4, 64), "GptOssExperts", layers=(0,))
    attention = ParamGroup("model.layers.{i}.self_attn.q_proj.weight", (64, 64), "Linear", layers=(0,))
    for group in (bias, attention):
        assert group_bytes(group, group.shape, "bfloat16", scheme) == group.numel * BF16


def test_unmodelled_quantization_is_labelled_inexact():
    result = bf16(tiny_layout(), scheme=quant_scheme({"quantization_config": {"quant_method": "awq", "bits": 4}}))
    assert not result.exact and "'awq' not modelled" in result.method and result.notes


def test_layout_json_round_trip():
    layout = tiny_layout()
    assert layout_from_json(json.loads(json.dumps(layout_to_json(layout)))) == layout


def test_golden_qwen2_05b():
    result = weights_for(resolve_config("Qwen/Qwen2-0.5B-Instruct"), "bfloat16")
    assert (result.total_params, result.total_bytes, result.exact) == (494_032_768, 988_065_536, True)
    assert "catalog" in result.method
    # vocab 151,936 is a multiple of 64: one GPU holds exactly the model
    assert result.per_rank_bytes == 988_065_536
    assert weights_for(load_model_shape("Qwen/Qwen2-0.5B-Instruct"), "float32").total_bytes == 4 * 494_032_768


def test_golden_llama3_8b():
    result = weights_for(resolve_config("meta-llama/Meta-Llama-3-8B-Instruct"), "bfloat16", tensor_parallel_size=2)
    assert result.total_params == 8_030_261_248
    assert result.total_bytes == 2 * 8_030_261_248


def test_gpt_oss_mxfp4_from_the_scheme():
    shape = load_model_shape("openai/gpt-oss-20b")
    result = weights_for(shape, "bfloat16")
    layers, experts, hidden, intermediate = 24, 32, 2880, 2880
    expert_params = layers * experts * (hidden * 2 * intermediate + intermediate * hidden)
    assert result.total_bytes == expert_params * 17 // 32 + (result.total_params - expert_params) * BF16
    assert not result.exact and "mxfp4" in result.method


def test_deepseek_v3_fp8_keeps_embeddings_and_routers_wide():
    result = weights_for(resolve_config("deepseek-ai/DeepSeek-V3"), "bfloat16", tensor_parallel_size=8)
    # fp8 weights take one byte per parameter; the excess over that is the bf16 embedding and lm_head,
    # the float32 routers and the block scales (one float32 per 128x128 block: under 2**30 bytes)
    vocab_params, router_params = 2 * 129_280 * 7_168, 58 * 256 * 7_168
    excess = result.total_bytes - result.total_params
    assert result.total_params == 671_026_404_352
    assert vocab_params + 3 * router_params < excess < vocab_params + 3 * router_params + 2**30
    assert not result.exact and "fp8" in result.method


def test_local_copy_of_a_catalog_config_uses_the_stored_layout(tmp_path):
    source = resolve_config("Qwen/Qwen2-0.5B-Instruct")
    (tmp_path / "config.json").write_bytes(Path(source.path).read_bytes())
    result = weights_for(resolve_config(str(tmp_path)), "bfloat16")
    assert result.total_bytes == 988_065_536 and "catalog" in result.method


SMALL_OR_COVERAGE = {"HuggingFaceTB/SmolLM2-135M-Instruct", "Qwen/Qwen2-0.5B-Instruct",
                     "meta-llama/Llama-3.2-1B-Instruct", "google/gemma-3-4b-it", "Qwen/Qwen3-30B-A3B",
                     "openai/gpt-oss-20b"}


@pytest.mark.parametrize("model_id", [
    model if model in SMALL_OR_COVERAGE else pytest.param(model, marks=pytest.mark.slow) for model in catalog_ids()
])
def test_stored_layout_equals_a_fresh_meta_build(model_id):
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from kvplan.measure.meta_build import build_layout

    resolved = resolve_config(model_id)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        fresh = build_layout(resolved)
    stored = catalog_layouts()[resolved.sha256]
    assert fresh.groups == stored.groups
    assert fresh.total_params == stored.total_params
    assert {**fresh.__dict__, "built_with": ""} == {**stored.__dict__, "built_with": ""}


def test_model_outside_the_catalog_is_built_on_meta(tmp_path):
    pytest.importorskip("torch")
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 3, "hidden_size": 64,
              "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128, "vocab_size": 1000,
              "torch_dtype": "bfloat16"}
    (tmp_path / "config.json").write_text(json.dumps(config))
    result = weights_for(load_model_shape(str(tmp_path)), "bfloat16", tensor_parallel_size=2)
    expected = tiny_layout()
    assert result.total_params == expected.total_params
    assert result.per_rank_bytes == bf16(expected, tp=2).per_rank_bytes
    assert result.method.startswith("meta-device build")


def test_model_outside_the_catalog_without_torch_says_so(tmp_path, monkeypatch):
    import importlib.util

    from kvplan.errors import MissingExtraError

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "torch" else real_find_spec(name, *args))
    config = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 2, "hidden_size": 64,
              "num_attention_heads": 4, "vocab_size": 1000}
    (tmp_path / "config.json").write_text(json.dumps(config))
    with pytest.raises(MissingExtraError, match=r"kvplan\[profile\]") as error:
        weights_for(resolve_config(str(tmp_path)), "bfloat16")
    assert "torch" in str(error.value) and "\n" not in str(error.value)


def test_every_catalog_parameter_has_a_sharding_rule():
    for layout in catalog_layouts().values():
        assert [g.name for g in layout.groups if shard_rule(g, layout) == "unclassified"] == [], layout.model_id
