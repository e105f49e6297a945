"""The quantization method of a checkpoint and whether the GPU can run it
(`VllmConfig._get_quantization_config`): vLLM refuses a method whose minimum compute capability is
above the device's, before any model exists.

    quantization_method(model_type, quantization_config, release) -> name | None
    check_quantization_capability(method, capability) -> None     (ConfigRejected)"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvplan.errors import ConfigRejected
from kvplan.semantics.releases import Release

# each method's `get_min_capability()` (major * 10 + minor), the same in 0.17.1 and 0.33.0; methods
# whose minimum depends on the checkpoint's own settings (modelopt's) are left out, and not checked
MIN_CAPABILITY: dict[str, int] = {
    "fp8": 75, "mxfp4": 80, "gpt_oss_mxfp4": 80, "fbgemm_fp8": 80, "experts_int8": 80, "awq": 75, "awq_marlin": 75,
    "gptq": 60, "gptq_marlin": 75, "bitsandbytes": 70, "compressed-tensors": 70, "gguf": 60, "torchao": 75,
    "moe_wna16": 70,
}


def quantization_method(model_type: str, quantization: Mapping[str, Any] | None, release: Release) -> str | None:
    """The method name vLLM resolves the checkpoint's `quant_method` to (`ModelConfig.quantization`)."""
    if not quantization or not isinstance(quantization.get("quant_method"), str):
        return None
    method = str(quantization["quant_method"])
    for overridden_type, checkpoint_method, name in release.quantization_names:
        if model_type == overridden_type and method == checkpoint_method:
            return name
    return method


def check_quantization_capability(method: str | None, capability: tuple[int, int] | None) -> None:
    """vLLM's refusal of a method the GPU's compute capability is below; nothing without a GPU."""
    if method is None or capability is None or method not in MIN_CAPABILITY:
        return
    current, minimum = capability[0] * 10 + capability[1], MIN_CAPABILITY[method]
    if current < minimum:
        raise ConfigRejected(
            f"The quantization method {method} is not supported for the current GPU. Minimum capability: "
            f"{minimum}. Current capability: {current}. Choose a GPU of compute capability "
            f"{minimum // 10}.{minimum % 10} or newer (`kvplan gpus` lists them)"
        )
