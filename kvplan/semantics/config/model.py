"""vLLM 0.17.1's model settings (`ModelConfig`): the dtype the model runs in and the `max_model_len`
it accepts, with vLLM's refusals (`ConfigRejected`, exit 2) and log lines.

    resolve_model_dtype(requested, config_dtype, model_type, capability=None, ...) -> DtypeChoice
    verify_max_model_len(requested, derived, derived_key, model_max_length=None, allow_long=False) -> int
    long_max_model_len_warning(requested, derived, derived_key) -> str

Capabilities are `(major, minor)` tuples; None means "no GPU given", which for dtypes is read
as kvplan's default reference GPU (H100, capability 9.0)."""

from __future__ import annotations

from dataclasses import dataclass

from kvplan.errors import ConfigRejected
from kvplan.semantics.dtypes import DTYPE_ALIASES

_LONG_LEN_CAUTION = (
    "VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution. If the model uses relative position "
    "encoding (RoPE), positions exceeding derived_max_model_len lead to nan. If the model uses absolute "
    "position encoding, positions exceeding derived_max_model_len will cause a CUDA array out-of-bounds error."
)


def _too_long(requested: int, derived: float, derived_key: str, model_max_length: int | None) -> str:
    return (
        f"User-specified max_model_len ({requested}) is greater than the derived max_model_len "
        f"({derived_key}={derived} or model_max_length={model_max_length} in model's config.json)."
    )


def long_max_model_len_warning(
    requested: int, derived: float, derived_key: str, model_max_length: int | None = None
) -> str:
    """vLLM's warning when VLLM_ALLOW_LONG_MAX_MODEL_LEN lets a longer max_model_len through."""
    return f"{_too_long(requested, derived, derived_key, model_max_length)} {_LONG_LEN_CAUTION}"


def verify_max_model_len(
    requested: int | None, derived: float, derived_key: str, model_max_length: int | None = None,
    allow_long: bool = False,
) -> int:
    """`_get_and_verify_max_len`: None or -1 (auto-fit) take the derived length; a longer request
    is refused unless `allow_long` (VLLM_ALLOW_LONG_MAX_MODEL_LEN=1). `derived` is the value as vLLM
    holds it (a float once RoPE scaling applied)."""
    if requested is None or requested == -1:
        return int(derived)
    too_long = requested > derived and (model_max_length is None or requested > model_max_length)
    if too_long and not allow_long:
        raise ConfigRejected(
            f"{_too_long(requested, derived, derived_key, model_max_length)} To allow overriding this maximum, "
            f"set the env var VLLM_ALLOW_LONG_MAX_MODEL_LEN=1. {_LONG_LEN_CAUTION}"
        )
    return requested


# the names vLLM's --dtype accepts besides "auto", and what each means
_EXPLICIT_DTYPES = {name: DTYPE_ALIASES.get(name, name) for name in ("half", "float16", "float", "float32", "bfloat16")}
_FLOAT16_NOT_SUPPORTED = frozenset({"gemma2", "gemma3", "gemma3_text", "plamo2", "glm4"})
@dataclass(frozen=True)
class DtypeChoice:
    dtype: str
    logs: tuple[str, ...] = ()


def _platform_dtypes(capability: tuple[int, int] | None) -> list[str]:
    major = 9 if capability is None else capability[0]
    if major >= 8:
        return ["bfloat16", "float16", "float32"]
    if major >= 6:
        return ["float16", "float32"]
    return ["float32"]


def check_model_dtype(requested: str) -> None:
    """vLLM's `--dtype` choices (auto and the explicit names), checked before any model is read:
    `kvplan fit` and `kvplan sweep` check every value of a list this way before the first plan."""
    wanted = requested.lower()
    if wanted != "auto" and wanted not in _EXPLICIT_DTYPES:
        raise ConfigRejected(
            f"Unknown dtype: {wanted!r}; --dtype takes auto, bfloat16, float16 (half) or float32 (float)"
        )


def resolve_model_dtype(
    requested: str,
    config_dtype: str | None,
    model_type: str,
    capability: tuple[int, int] | None = None,
    *,
    is_pooling_model: bool = False,
    gpu_name: str = "cuda",
) -> DtypeChoice:
    """`_get_and_verify_dtype`: the dtype the model (and an "auto" KV cache) runs in.

    `config_dtype` None means no dtype in the config and none from the hub: float32."""
    config = config_dtype or "float32"
    logs: list[str] = []
    wanted = requested.lower()
    if wanted == "auto":
        supported = [
            d for d in _platform_dtypes(capability)
            if not (d == "float16" and model_type in _FLOAT16_NOT_SUPPORTED)
        ]
        preferred = "float16" if is_pooling_model and "float16" in supported else supported[0]
        candidate = preferred if config == "float32" else config
        if candidate in supported:
            dtype = candidate
        else:
            device = f"{gpu_name!r}"
            if capability is not None:
                device += f" (with compute capability {capability[0]}.{capability[1]})"
            logs.append(
                f"Your device {device} doesn't support torch.{candidate}. Falling back to "
                f"torch.{preferred} for compatibility."
            )
            dtype = preferred
    else:
        check_model_dtype(requested)
        dtype = _EXPLICIT_DTYPES[wanted]
    if dtype == "float16" and model_type in _FLOAT16_NOT_SUPPORTED:
        raise ConfigRejected(
            f"The model type {model_type!r} does not support float16. Reason: Numerical instability. "
            "Please use bfloat16 or float32 instead."
        )
    if dtype != config:
        verb = "Upcasting" if dtype == "float32" else "Downcasting" if config == "float32" else "Casting"
        logs.append(f"{verb} torch.{config} to torch.{dtype}.")
    return DtypeChoice(dtype, tuple(logs))
