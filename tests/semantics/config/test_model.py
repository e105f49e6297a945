"""vLLM 0.17.1's model settings: max_model_len and the model dtype."""

from __future__ import annotations

import pytest

from kvplan.errors import ConfigRejected
from kvplan.semantics.config import model

H100 = (9, 0)
A100 = (8, 0)
V100 = (7, 0)


def test_max_model_len_defaults_and_limits() -> None:
    assert model.verify_max_model_len(None, 32768.0, "max_position_embeddings") == 32768
    assert model.verify_max_model_len(-1, 32768.0, "max_position_embeddings") == 32768
    assert model.verify_max_model_len(8192, 32768.0, "max_position_embeddings") == 8192
    assert model.verify_max_model_len(8192, 4096.0, "max_position_embeddings", model_max_length=8192) == 8192


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
