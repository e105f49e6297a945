"""Weight bytes of any model: the catalog's stored layouts (no torch), golden parameter counts, the
layouts read from config.json of dense models outside the catalog (no torch), which agree with a
meta-device build, and the meta-device build of other models, which agrees with the stored layouts."""

from __future__ import annotations

import json
import warnings
from dataclasses import replace
from pathlib import Path

import pytest

from kvplan.measure.hf_config import config_directory, model_shape
from kvplan.measure.meta_build import weights_for
from kvplan.semantics.models.config_file import ResolvedConfig
from kvplan.semantics.models.shape import ModelShape
from kvplan.semantics.weights import QuantScheme, WeightLayout, estimate
from kvplan.semantics.weights_from_config import layout_from_config
from kvplan.sources.catalog import catalog_ids, catalog_layouts
from kvplan.sources.models import resolve_config
from tests.semantics.factories import BF16, bf16, tiny_layout


def load_model_shape(model: str) -> ModelShape:
    """`--model` (hub id, directory or config.json path) -> ModelShape, as `kvplan plan` reads it."""
    resolved = resolve_config(model)
    return model_shape(resolved.config, resolved.model_id, config_dir=config_directory(resolved))


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


TINY_LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama", "num_hidden_layers": 3,
              "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
              "vocab_size": 1000, "torch_dtype": "bfloat16"}
TINY_MIXTRAL = {"architectures": ["MixtralForCausalLM"], "model_type": "mixtral", "num_hidden_layers": 2,
                "hidden_size": 64, "num_attention_heads": 4, "num_key_value_heads": 2, "intermediate_size": 128,
                "vocab_size": 1000, "num_local_experts": 4, "num_experts_per_tok": 2, "torch_dtype": "bfloat16"}
_SIZES = {"num_hidden_layers": 3, "hidden_size": 64, "num_attention_heads": 4, "intermediate_size": 96,
          "vocab_size": 1000}
# configs outside the catalog, each with what it changes in the parameter layout
DENSE_VARIANTS = {
    "llama-biases-tied-head_dim": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **_SIZES,
                                   "attention_bias": True, "mlp_bias": True, "tie_word_embeddings": True,
                                   "head_dim": 32, "num_key_value_heads": 1},
    "llama-null-head_dim-no-kv-heads": {"architectures": ["LlamaForCausalLM"], "model_type": "llama", **_SIZES,
                                        "head_dim": None},
    "mistral-head_dim-default-kv-heads": {"architectures": ["MistralForCausalLM"], "model_type": "mistral",
                                          **_SIZES, "num_attention_heads": 8, "head_dim": 8},
    "qwen2-head_dim-key": {"architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", **_SIZES,
                           "num_key_value_heads": 2, "head_dim": 24},
    "qwen3-attention_bias-default-head_dim": {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3",
                                              **_SIZES, "num_key_value_heads": 2, "attention_bias": True,
                                              "tie_word_embeddings": True},
    # phi3's default pad_token_id (32000) must be inside the vocabulary
    "phi3": {"architectures": ["Phi3ForCausalLM"], "model_type": "phi3", **_SIZES, "num_key_value_heads": 2,
             "vocab_size": 32064},
    "gemma2-attention_bias": {"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", **_SIZES,
                              "num_key_value_heads": 2, "head_dim": 16, "attention_bias": True},
    "gemma3-text-defaults": {"architectures": ["Gemma3ForCausalLM"], "model_type": "gemma3_text",
                             "num_hidden_layers": 2, "hidden_size": 64},
}


def write_config(directory: Path, config: dict) -> ResolvedConfig:
    (directory / "config.json").write_text(json.dumps(config))
    return resolve_config(str(directory))


def meta_build(resolved: ResolvedConfig) -> WeightLayout:
    pytest.importorskip("torch")
    pytest.importorskip("transformers")
    from kvplan.measure.meta_build import build_layout

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return build_layout(resolved)


@pytest.mark.parametrize("name", DENSE_VARIANTS)
def test_config_layout_equals_a_meta_build_outside_the_catalog(tmp_path, name):
    resolved = write_config(tmp_path, DENSE_VARIANTS[name])
    derived, built = layout_from_config(resolved), meta_build(resolved)
    assert derived is not None
    assert derived.groups == built.groups
    assert replace(derived, built_with=built.built_with) == built


def test_model_outside_the_catalog_is_read_from_its_config(tmp_path):
    resolved = write_config(tmp_path, TINY_LLAMA)
    result = weights_for(resolved, "bfloat16", tensor_parallel_size=2)
    expected = tiny_layout()
    assert result.total_params == expected.total_params
    assert result.per_rank_bytes == bf16(expected, tp=2).per_rank_bytes
    assert result.method.startswith("config.json")
    built = estimate(meta_build(resolved), "bfloat16", 2, 1, QuantScheme("none"), "meta-device build")
    assert (result.total_bytes, result.per_stage_bytes) == (built.total_bytes, built.per_stage_bytes)


def test_model_outside_the_catalog_is_built_on_meta(tmp_path):
    pytest.importorskip("torch")
    result = weights_for(write_config(tmp_path, TINY_MIXTRAL), "bfloat16", tensor_parallel_size=2)
    assert result.method.startswith("meta-device build")
    experts = 4 * 3 * 128 * 64
    assert result.total_params > 2 * experts


def test_remote_code_is_built_on_meta(tmp_path, monkeypatch):
    built: list[str] = []
    monkeypatch.setattr("kvplan.measure.meta_build.build_layout",
                        lambda resolved, trust_remote_code: built.append(resolved.model_id) or tiny_layout())
    resolved = write_config(tmp_path, {**TINY_LLAMA, "auto_map": {"AutoConfig": "configuration_x.XConfig"}})
    assert weights_for(resolved, "bfloat16").method.startswith("config.json") and not built
    assert weights_for(resolved, "bfloat16", trust_remote_code=True).method.startswith("meta-device build")
    assert built == [resolved.model_id]


def without_torch(monkeypatch: pytest.MonkeyPatch) -> None:
    import importlib.util

    real_find_spec = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *args: None if name == "torch" else real_find_spec(name, *args))


def test_model_outside_the_catalog_without_torch_says_so(tmp_path, monkeypatch):
    from kvplan.errors import MissingExtraError

    without_torch(monkeypatch)
    with pytest.raises(MissingExtraError, match=r"pip install -e '\.\[profile\]'") as error:
        weights_for(write_config(tmp_path, TINY_MIXTRAL), "bfloat16")
    assert "torch" in str(error.value) and "MixtralForCausalLM" in str(error.value)
    assert "\n" not in str(error.value)


def test_a_dense_model_outside_the_catalog_needs_no_torch(tmp_path, monkeypatch):
    without_torch(monkeypatch)
    result = weights_for(write_config(tmp_path, TINY_LLAMA), "bfloat16")
    assert result.total_bytes == bf16(tiny_layout()).total_bytes
