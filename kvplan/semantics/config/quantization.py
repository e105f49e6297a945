"""The quantization method of a checkpoint and whether the GPU can run it
(`VllmConfig._get_quantization_config`): vLLM refuses a method whose minimum compute capability is
above the device's, before any model exists.

    quantization_method(model_type, quantization_config, release) -> name | None
    check_quantization_capability(method, capability) -> None     (ConfigRejected)
    requested_quantization(checkpoint, resolved, given) -> quantization_config | None

`--quantization` (`ModelConfig._verify_quantization`): a quantized checkpoint takes only its own
method; an unquantized one takes fp8, which vLLM applies at load (online dynamic fp8: each linear
layer's and MoE expert's weights in fp8 with one scale per tensor)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from kvplan.errors import ConfigRejected, KvplanError
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


# the quantization_config vLLM's online fp8 acts as (`Fp8Config` with is_checkpoint_fp8_serialized False)
ONLINE_FP8 = {"quant_method": "fp8", "activation_scheme": "dynamic"}


def requested_quantization(checkpoint: Mapping[str, Any] | None, resolved: str | None,
                           given: str | None) -> dict[str, Any] | None:
    """The quantization_config to size with when --quantization is `given` (None: the checkpoint's
    stays); `resolved` is the checkpoint's method as `quantization_method` names it."""
    if given is None:
        return None
    wanted = given.strip().lower()
    own = str(checkpoint["quant_method"]).lower() if checkpoint and checkpoint.get("quant_method") else None
    if own is not None:
        if wanted not in (own, (resolved or own).lower()):
            raise ConfigRejected(
                f"Quantization method specified in the model config ({own}) does not match the quantization "
                f"method specified in the `quantization` argument ({wanted}). Leave --quantization out to use "
                "the checkpoint's")
        return None
    if wanted != "fp8":
        raise KvplanError(
            f"--quantization {wanted}: the checkpoint is not quantized; vLLM quantizes an unquantized checkpoint "
            f"at load only with fp8 (--quantization fp8), {wanted} needs a checkpoint quantized with it")
    return dict(ONLINE_FP8)
