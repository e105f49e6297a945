"""The light config reader against transformers' AutoConfig, vLLM 0.17.1's facts from the sizing file,
and hand-checked hybrid values."""

from __future__ import annotations

import json
import warnings
from collections import Counter
from pathlib import Path

import pytest

from kvplan.errors import EXIT_BAD_INPUT, ConfigRejected, KvplanError
from kvplan.semantics.models import shape_from_config
from kvplan.semantics.models.shape import HOOK_SSM_DTYPE
from kvplan.semantics.releases import VLLM_0_17_1, VLLM_0_33_0
from kvplan.sources.catalog import CATALOG_DIR, catalog_ids
from kvplan.sources.models import resolve_config

SIZING = Path(__file__).resolve().parents[2] / "data" / "sizing" / "vllm-0.17.1-cases.json"
SPEC_KINDS = {"FullAttentionSpec": "full", "SlidingWindowSpec": "sliding_window", "MLAAttentionSpec": "mla",
              "MambaSpec": "mamba"}


def sizing() -> dict:
    return json.loads(SIZING.read_text())


def _catalog(model_id: str) -> dict:
    return resolve_config(model_id).config


def load_model_shape(model_id: str):
    resolved = resolve_config(model_id)
    return shape_from_config(resolved.config, resolved.model_id)


@pytest.fixture(scope="module")
def autoconfigs():
    transformers = pytest.importorskip("transformers")
    loaded = {}
    for model_id in catalog_ids():
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            loaded[model_id] = transformers.AutoConfig.from_pretrained(
                str(CATALOG_DIR / model_id.replace("/", "--", 1)))
    return loaded


@pytest.mark.parametrize("model_id", catalog_ids())
def test_light_reader_agrees_with_autoconfig(model_id, autoconfigs):
    hf = autoconfigs[model_id]
    text = hf.get_text_config()
    shape = load_model_shape(model_id)
    assert shape.num_hidden_layers == text.num_hidden_layers
    assert shape.num_attention_heads == text.num_attention_heads
    assert shape.hidden_size == text.hidden_size
    assert shape.vocab_size == text.vocab_size
    assert shape.tie_word_embeddings == bool(hf.tie_word_embeddings)
    dtype = hf.dtype or text.dtype
    assert shape.config_dtype == (str(dtype).removeprefix("torch.") if dtype is not None else None)
    if shape.use_mla:
        assert shape.head_size == text.kv_lora_rank + text.qk_rope_head_dim and shape.num_kv_heads == 1
    else:
        assert shape.num_kv_heads == text.num_key_value_heads
        assert shape.head_size == (getattr(text, "head_dim", None) or text.hidden_size // text.num_attention_heads)
    layer_types = getattr(text, "layer_types", None)
    expected_kind = {"sliding_attention": "sliding_window", "full_attention": "full", "linear_attention": "mamba",
                     "mlp": "none", "moe": "none"}
    for layer in shape.layers:
        if layer_types is not None and not shape.use_mla:
            assert layer.kind == expected_kind[layer_types[layer.index]], layer
            if layer.kind == "sliding_window":
                assert layer.sliding_window == text.sliding_window
        elif not shape.use_mla:
            # no layer_types: the config-wide window applies to every layer, as in vLLM's CacheConfig
            window = getattr(text, "sliding_window", None)
            assert layer.sliding_window == window
            assert layer.kind == ("sliding_window" if window else "full")


def _vllm_models():
    return sorted(sizing()["models"].items())


@pytest.mark.parametrize(("model_id", "facts"), _vllm_models(), ids=[m for m, _ in _vllm_models()])
def test_shape_matches_vllm_facts(model_id, facts):
    shape = load_model_shape(model_id)
    assert shape.architecture == facts["architecture"]
    assert shape.head_size == facts["head_size_model_config"]
    assert shape.use_mla == facts["use_mla"]
    assert shape.is_hybrid == facts["is_hybrid"]
    assert shape.max_model_len == facts["vllm_default_max_model_len"]
    assert shape.config_dtype == facts["config_torch_dtype"]
    assert shape.warnings == ()


def _tp1_cases():
    cases = [case for case in sizing()["cases"]
             if case["args"]["tensor_parallel_size"] == 1 and case["args"]["kv_cache_dtype"] == "auto"
             and case["expect"].get("layer_specs")]
    return {case["model"]: case["expect"]["layer_specs"] for case in cases}


def _mamba_shapes(state) -> list[list[int]]:
    """docs/vllm/kv-semantics.md §3.1 at TP 1."""
    if state.mamba_type == "gdn_attention":
        conv_dim = 2 * state.linear_num_key_heads * state.linear_key_head_dim + \
            state.linear_num_value_heads * state.linear_value_head_dim
        return [[state.conv_kernel - 1, conv_dim],
                [state.linear_num_value_heads, state.linear_value_head_dim, state.linear_key_head_dim]]
    conv_dim = state.num_heads * state.head_dim + 2 * state.n_groups * state.state_size
    return [[state.conv_kernel - 1, conv_dim], [state.num_heads, state.head_dim, state.state_size]]


@pytest.mark.parametrize(("model_id", "specs"), sorted(_tp1_cases().items()), ids=sorted(_tp1_cases()))
def test_layer_kinds_match_vllm_specs(model_id, specs):
    shape = load_model_shape(model_id)
    model_dtype = sizing()["models"][model_id]["vllm_model_dtype"]
    counted = Counter()
    for layer in shape.kv_layers:
        counted[(layer.kind, layer.sliding_window)] += 1
    expected = Counter()
    for spec in specs:
        kind = SPEC_KINDS[spec["type"]]
        expected[(kind, spec.get("sliding_window"))] += spec["num_layers"]
        members = [layer for layer in shape.kv_layers if layer.kind == kind]
        if kind == "mamba":
            state = members[0].mamba
            assert _mamba_shapes(state) == spec["shapes"]
            # the goldens are vLLM 0.17.1's, whose Nemotron-H hook keeps the ssm state in float16
            dtypes = [model_dtype if d == "auto" else VLLM_0_17_1.hook_ssm_cache_dtype if d == HOOK_SSM_DTYPE else d
                      for d in (state.conv_dtype, state.ssm_dtype)]
            assert dtypes == spec["dtypes"] and state.mamba_type == spec["mamba_type"]
        else:
            assert {(layer.num_kv_heads, layer.head_size) for layer in members} == \
                {(spec["num_kv_heads"], spec["head_size"])}
    assert counted == expected


def test_nemotron_h_hand_checked():
    shape = load_model_shape("nvidia/Nemotron-H-56B-Base-8K")
    pattern = _catalog("nvidia/Nemotron-H-56B-Base-8K")["hybrid_override_pattern"]
    assert shape.num_hidden_layers == len(pattern) == 118
    assert Counter(layer.kind for layer in shape.layers) == {"mamba": 54, "full": 10, "none": 54}
    assert [layer.index for layer in shape.layers if layer.kind == "full"] == \
        [i for i, block in enumerate(pattern) if block == "*"]
    attention = next(layer for layer in shape.layers if layer.kind == "full")
    assert (attention.num_kv_heads, attention.head_size, attention.name) == \
        (8, 128, f"model.layers.{attention.index}.mixer.attn")
    mamba = shape.layers[0]
    assert mamba.name == "model.layers.0.mixer"
    state = mamba.mamba
    assert (state.mamba_type, state.conv_kernel, state.num_heads, state.head_dim, state.n_groups,
            state.state_size, state.chunk_size) == ("mamba2", 4, 256, 64, 8, 256, 128)
    # vLLM's Nemotron-H hook picks the ssm state dtype (the release's), conv state in the model dtype
    assert (state.conv_dtype, state.ssm_dtype) == ("auto", HOOK_SSM_DTYPE)
    assert _mamba_shapes(state) == [[3, 20480], [256, 64, 256]]
    assert shape.max_model_len == 8192 and shape.is_hybrid


def test_qwen3_next_layer_types_default_to_every_fourth():
    shape = load_model_shape("Qwen/Qwen3-Next-80B-A3B-Thinking")
    assert [layer.index for layer in shape.layers if layer.kind == "full"] == list(range(3, 48, 4))
    assert shape.layers[0].name == "model.layers.0.linear_attn"
    assert shape.layers[3].name == "model.layers.3.self_attn.attn"


def test_qwen35_reads_text_config_and_ssm_dtype():
    shape = load_model_shape("Qwen/Qwen3.5-35B-A3B")
    assert Counter(layer.kind for layer in shape.layers) == {"mamba": 30, "full": 10}
    assert shape.layers[0].name == "language_model.model.layers.0.linear_attn"
    assert shape.layers[0].mamba.ssm_dtype == "float32"
    assert shape.max_model_len == 262144 and shape.config_dtype == "bfloat16"


def test_gemma3_sparse_text_config_uses_class_defaults():
    shape = load_model_shape("google/gemma-3-4b-it")
    assert (shape.num_attention_heads, shape.num_kv_heads, shape.head_size, shape.vocab_size) == (8, 4, 256, 262208)
    # sliding_window_pattern 6: every 6th layer is global
    assert [layer.index for layer in shape.layers if layer.kind == "full"] == [5, 11, 17, 23, 29]
    assert shape.layers[0].name == "language_model.model.layers.0.self_attn.attn"


def test_qwen2_ignores_head_dim_and_disabled_window():
    config = {**_catalog("Qwen/Qwen2-0.5B-Instruct"), "head_dim": 128}
    shape = shape_from_config(config, "qwen2-with-head-dim")
    assert shape.head_size == 896 // 14
    assert {layer.kind for layer in shape.layers} == {"full"}


def test_qwen2_sliding_window_on_some_layers_is_refused_as_vllm_does():
    config = {**_catalog("Qwen/Qwen2-0.5B-Instruct"), "use_sliding_window": True, "max_window_layers": 20}
    with pytest.raises(ConfigRejected, match=r"`max_window_layers` = 20 is less than `num_hidden_layers` = 24"):
        shape_from_config(config, "qwen2-swa")


def test_qwen2_window_on_every_layer_falls_back_to_the_config_wide_window_in_0_17_1_only():
    config = {**_catalog("Qwen/Qwen2-0.5B-Instruct"), "use_sliding_window": True, "max_window_layers": 24}
    assert {layer.sliding_window for layer in shape_from_config(config, "qwen2-swa", VLLM_0_17_1).layers} == {32768}
    # 0.33.0 takes the config's window only without layer_types (Qwen2Config fills them: all full here)
    assert {layer.kind for layer in shape_from_config(config, "qwen2-swa", VLLM_0_33_0).layers} == {"full"}


def test_gpt_oss_window_on_even_layers():
    shape = load_model_shape("openai/gpt-oss-20b")
    assert [layer.sliding_window for layer in shape.layers[:4]] == [128, None, 128, None]
    assert shape.layers[0].name == "model.layers.0.attn.attn"
    assert shape.config_dtype is None and shape.quantization["quant_method"] == "mxfp4"


def test_deepseek_v3_mla_and_quantization():
    shape = load_model_shape("deepseek-ai/DeepSeek-V3")
    assert shape.num_hidden_layers == 61  # the MTP layer holds no KV without speculative decoding
    assert {(layer.kind, layer.num_kv_heads, layer.head_size) for layer in shape.layers} == {("mla", 1, 576)}
    assert shape.qk_nope_head_dim == 128 and not shape.mla_sparse
    assert shape.quantization == {"activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
                                  "weight_block_size": [128, 128]}


@pytest.mark.parametrize(("model_id", "drop", "inside"), [
    ("meta-llama/Llama-3.2-1B-Instruct", "num_hidden_layers", None),
    ("Qwen/Qwen2-0.5B-Instruct", "num_attention_heads", None),
    ("deepseek-ai/DeepSeek-V2-Lite-Chat", "kv_lora_rank", None),
    ("nvidia/Nemotron-H-56B-Base-8K", "mamba_num_heads", None),
    ("Qwen/Qwen3-Next-80B-A3B-Thinking", "linear_num_value_heads", None),
    ("google/gemma-3-4b-it", "hidden_size", "text_config"),
])
def test_missing_required_key_names_it(model_id, drop, inside):
    config = json.loads(json.dumps(_catalog(model_id)))
    del (config[inside] if inside else config)[drop]
    with pytest.raises(KvplanError, match=f"'{drop}'") as error:
        shape_from_config(config, model_id)
    assert error.value.exit_code == EXIT_BAD_INPUT


def test_nemotron_without_pattern_is_bad_input():
    config = {key: value for key, value in _catalog("nvidia/Nemotron-H-56B-Base-8K").items()
              if key != "hybrid_override_pattern"}
    with pytest.raises(KvplanError, match="hybrid_override_pattern"):
        shape_from_config(config, "nemotron")


def test_unknown_layer_kind_is_reported_not_counted():
    config = {**_catalog("meta-llama/Llama-3.2-1B-Instruct"),
              "layer_types": ["full_attention"] * 15 + ["chunked_attention"]}
    shape = shape_from_config(config, "llama-with-chunks")
    assert shape.layers[15].kind == "unsupported"
    assert len(shape.kv_layers) == 15
    assert any("layer 15" in warning for warning in shape.warnings)
