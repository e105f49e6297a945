"""Dtype names as torch spells them ("bfloat16", "uint8"), the aliases configs and flags use, and
bytes per element: one table for every byte count kvplan computes."""

from __future__ import annotations

from typing import Any

DTYPE_SIZE = {
    "float32": 4, "float16": 2, "bfloat16": 2,
    "uint8": 1, "float8_e4m3fn": 1, "float8_e5m2": 1, "int8": 1,
}
# what transformers and vLLM accept for a dtype besides torch's own names
DTYPE_ALIASES = {"half": "float16", "float": "float32", "bf16": "bfloat16", "fp16": "float16", "fp32": "float32"}


def dtype_size(dtype: str) -> int:
    return DTYPE_SIZE[dtype]


def normalize_dtype(value: Any) -> str | None:
    """'torch.bfloat16' / 'bfloat16' / 'bf16' -> 'bfloat16'; None stays None."""
    if value is None:
        return None
    text = str(value).removeprefix("torch.")
    return DTYPE_ALIASES.get(text, text)
