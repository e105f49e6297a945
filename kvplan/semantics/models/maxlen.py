"""vLLM 0.17.1's default `max_model_len` (`config/model.py::_get_and_verify_max_len` with no user value):
the smallest of the length keys, then the rope scaling factor where vLLM applies it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

LENGTH_KEYS = (
    "max_position_embeddings", "n_positions", "max_seq_len", "seq_length", "model_max_length",
    "max_target_positions", "max_sequence_length", "max_seq_length", "seq_len",
)
FALLBACK_MAX_LEN = 2048


def derive_max_model_len(
    lookup: Callable[[str], Any], model_type: str, rope_sets: list[Mapping[str, Any]]
) -> tuple[int, str | None]:
    """(max_model_len, warning or None). `lookup(key)` reads the text config as an attribute would."""
    lengths = [value for key in LENGTH_KEYS if (value := lookup(key)) is not None]
    derived: float = min(lengths) if lengths else float("inf")
    if lookup("model_max_length"):
        # Command-R / Cohere: vLLM lets this key win over the others
        derived = lookup("model_max_length")
    warning = None
    if derived == float("inf"):
        derived = FALLBACK_MAX_LEN
        warning = (
            f"the config has none of {', '.join(LENGTH_KEYS)}: assuming a maximum length of "
            f"{FALLBACK_MAX_LEN}, as vLLM does"
        )
    # gemma3's max_position_embeddings is already scaled, so vLLM skips the factor for it
    if rope_sets and "gemma3" not in model_type:
        factor = 1.0
        for params in rope_sets:
            if params["rope_type"] not in ("su", "longrope", "llama3"):
                factor = params.get("factor", factor)
                if params["rope_type"] == "yarn":
                    derived = params["original_max_position_embeddings"]
        derived *= factor
    if any(params["rope_type"] == "longrope" for params in rope_sets):
        # vLLM defaults LongRoPE models to their short context to avoid degrading short sequences
        original = lookup("original_max_position_embeddings")
        return int(original if original is not None else derived), warning
    return int(derived), warning
