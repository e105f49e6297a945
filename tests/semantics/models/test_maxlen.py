"""vLLM 0.17.1's derived max_model_len (`_get_and_verify_max_len` with no user value)."""

from __future__ import annotations

import pytest

from kvplan.semantics.models.config_fields import ConfigView, rope_parameter_sets
from kvplan.semantics.models.maxlen import FALLBACK_MAX_LEN, derive_max_model_len


def derived(config: dict, model_type: str = "llama") -> tuple[int, str | None]:
    view = ConfigView.of(config, model_type)
    return derive_max_model_len(view.get, model_type, rope_parameter_sets(view))


@pytest.mark.parametrize(("config", "expected"), [
    # llama3 rope is not scaled again: Llama-3.1 keeps max_position_embeddings
    ({"max_position_embeddings": 131072, "rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, 131072),
    # yarn: original_max_position_embeddings * factor (DeepSeek-V2 spells the key "type")
    ({"max_position_embeddings": 163840,
      "rope_scaling": {"type": "yarn", "factor": 40, "original_max_position_embeddings": 4096}}, 163840),
    ({"max_position_embeddings": 2048,
      "rope_scaling": {"rope_type": "yarn", "factor": 4, "original_max_position_embeddings": 1000}}, 4000),
    # linear and dynamic scaling multiply max_position_embeddings
    ({"max_position_embeddings": 4096, "rope_scaling": {"rope_type": "linear", "factor": 2.0}}, 8192),
    # 5.x rope_parameters with no factor leave the length alone
    ({"max_position_embeddings": 4096, "rope_parameters": {"rope_type": "default", "rope_theta": 1e4}}, 4096),
    # the smallest length key wins; model_max_length overrides them all
    ({"max_position_embeddings": 4096, "seq_length": 2048}, 2048),
    ({"max_position_embeddings": 4096, "model_max_length": 8192}, 8192),
    # LongRoPE defaults to the short context
    ({"max_position_embeddings": 131072, "original_max_position_embeddings": 4096,
      "rope_scaling": {"type": "longrope", "short_factor": [1.0], "long_factor": [1.0]}}, 4096),
])
def test_derived_length(config, expected):
    assert derived(config) == (expected, None)


def test_gemma3_length_is_already_scaled():
    config = {"max_position_embeddings": 131072, "rope_scaling": {"rope_type": "linear", "factor": 8.0}}
    assert derived(config, "gemma3_text")[0] == 131072
    # per-layer-type rope_parameters (transformers 5.x gemma3 form) are read as a set
    per_layer = {"rope_parameters": {"full_attention": {"rope_type": "linear", "factor": 8.0},
                                     "sliding_attention": {"rope_type": "default"}}, "max_position_embeddings": 100}
    assert derived(per_layer, "mistral")[0] == 800


def test_class_default_applies_when_the_key_is_absent():
    assert derived({}, "gemma3_text") == (131072, None)
    assert derived({}, "llama") == (2048, None)


def test_no_length_key_falls_back_with_a_warning():
    length, warning = derived({}, "unknown_type")
    assert length == FALLBACK_MAX_LEN and "max_position_embeddings" in warning
