"""Weight bytes: the stored catalog layouts against a fresh meta-device build, golden parameter counts,
vLLM's TP/PP sharding on tiny layouts, and the quantization schemes."""

from __future__ import annotations

import json

from kvplan.semantics.weights import (
    ParamGroup,
    QuantScheme,
    WeightLayout,
    group_bytes,
    layout_from_json,
    layout_to_json,
    quant_scheme,
    shard_rule,
)
from kvplan.sources.catalog import catalog_layouts
from tests.semantics.factories import BF16, LAYERS, bf16, tiny_layout


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


def test_every_catalog_parameter_has_a_sharding_rule():
    for layout in catalog_layouts().values():
        assert [g.name for g in layout.groups if shard_rule(g, layout) == "unclassified"] == [], layout.model_id
