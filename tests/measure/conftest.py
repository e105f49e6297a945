"""A tiny transformers config (2 layers, hidden 64, 4 heads, 2 KV heads, vocab 1024): every
backend runs it in milliseconds, so tests assert on exact tensor-level numbers."""

from __future__ import annotations

from typing import Any

import pytest


def tiny_qwen2_config(**overrides: Any) -> dict[str, Any]:
    config: dict[str, Any] = {
        "architectures": ["Qwen2ForCausalLM"], "model_type": "qwen2", "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 2, "num_attention_heads": 4,
        "num_key_value_heads": 2, "vocab_size": 1024, "max_position_embeddings": 4096,
        "tie_word_embeddings": True, "torch_dtype": "bfloat16", "rms_norm_eps": 1e-6,
    }
    config.update(overrides)
    return config


@pytest.fixture(scope="session")
def tiny_config() -> dict[str, Any]:
    return tiny_qwen2_config()


@pytest.fixture(scope="session")
def make_tiny_config():
    return tiny_qwen2_config
