"""Building a transformers model from a config: on the meta device (for prediction), with
dummy weights on a real device (what vLLM's `--load-format dummy` does), or from safetensors.

Pickled checkpoints (`.bin`, `.pt`) are never loaded: unpickling runs code from the file."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from kvplan.errors import KvplanError
from kvplan.measure.attention import register_flashlike_attention
from kvplan.units import round_up

# vLLM's dummy loader fills every parameter uniformly in this range (model_loader/weight_utils.py)
DUMMY_WEIGHT_RANGE = (-1e-3, 1e-3)
_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt", ".pkl")


def torch_dtype(name: str) -> torch.dtype:
    value = getattr(torch, name, None)
    if not isinstance(value, torch.dtype):
        raise KvplanError(f"unknown dtype {name!r}: use bfloat16, float16 or float32")
    return value


def hf_config(config: dict[str, Any], *, path: Path | None = None, trust_remote_code: bool = False) -> Any:
    """The transformers config object for a config.json dict."""
    import transformers
    from transformers import AutoConfig

    model_type = config.get("model_type")
    if not model_type:
        raise KvplanError("the model config has no 'model_type'; pass a config.json from the Hugging Face hub")
    if config.get("auto_map") and trust_remote_code and path is not None:
        return AutoConfig.from_pretrained(str(path), trust_remote_code=True)
    fields = {key: value for key, value in config.items() if key != "model_type"}
    try:
        return AutoConfig.for_model(model_type, **fields)
    except (ValueError, KeyError, TypeError) as error:
        hint = " (it needs --trust-remote-code)" if config.get("auto_map") else ""
        raise KvplanError(
            f"transformers {transformers.__version__} cannot build a {model_type!r} model{hint}: {error}"
        ) from error


@contextmanager
def _no_weight_init() -> Iterator[None]:
    try:
        from transformers.initialization import no_init_weights
    except ImportError:  # transformers 4.x
        from transformers.modeling_utils import no_init_weights  # type: ignore[attr-defined,no-redef]
    with no_init_weights():
        yield


def _instantiate(config: Any, dtype: torch.dtype) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM

    attention = register_flashlike_attention()
    try:
        model = AutoModelForCausalLM.from_config(config, dtype=dtype, attn_implementation=attention)
    except ValueError as error:
        raise KvplanError(f"transformers cannot build a causal LM from this config: {error}") from error
    if getattr(config, "tie_word_embeddings", False):
        model.tie_weights()
    return model.eval().requires_grad_(False)


def build_meta_model(config: Any, dtype: torch.dtype) -> torch.nn.Module:
    """Exact shapes and dtypes, no memory. `torch.device("meta")` keeps tied weights tied
    (accelerate's init_empty_weights unties them)."""
    with torch.device("meta"):
        return _instantiate(config, dtype)


def build_dummy_model(config: Any, dtype: torch.dtype, device: torch.device | str) -> torch.nn.Module:
    """Random weights in vLLM's dummy range, built directly on `device` (no init pass)."""
    with _no_weight_init(), torch.device(device):
        model = _instantiate(config, dtype)
    low, high = DUMMY_WEIGHT_RANGE
    with torch.no_grad():
        for parameter in model.parameters():
            if parameter.is_floating_point():
                parameter.uniform_(low, high)
            else:
                parameter.zero_()
    return model


def safetensors_files(path: Path) -> list[Path]:
    """The checkpoint's safetensors files; refuse a checkpoint that only has pickles."""
    if not path.is_dir():
        raise KvplanError(f"--load-format auto needs a local model directory; {path} is not one")
    files = sorted(path.glob("*.safetensors"))
    if not files:
        pickles = sorted(p.name for p in path.iterdir() if p.suffix in _PICKLE_SUFFIXES)
        found = f" (only pickled weights: {', '.join(pickles[:3])})" if pickles else ""
        raise KvplanError(
            f"no .safetensors weights in {path}{found}; kvplan never unpickles checkpoints. "
            "Convert them to safetensors, or use --load-format dummy"
        )
    return files


def load_safetensors_model(
    path: Path, dtype: torch.dtype, device: torch.device | str, *, trust_remote_code: bool = False
) -> torch.nn.Module:
    from transformers import AutoModelForCausalLM
    from transformers.utils import logging as transformers_logging

    safetensors_files(path)
    attention = register_flashlike_attention()
    transformers_logging.disable_progress_bar()  # stderr belongs to kvplan's own progress display
    model: Any = AutoModelForCausalLM.from_pretrained(
        str(path), dtype=dtype, attn_implementation=attention, use_safetensors=True,
        trust_remote_code=trust_remote_code,
    )
    return model.to(device).eval().requires_grad_(False)


def weight_tensors(model: torch.nn.Module) -> list[torch.Tensor]:
    """Parameters and buffers, one tensor per storage (tied weights count once)."""
    seen: dict[int, torch.Tensor] = {}
    for tensor in [*model.parameters(), *model.buffers()]:
        seen.setdefault(id(tensor.untyped_storage()), tensor)
    return list(seen.values())


def parameter_bytes(model: torch.nn.Module) -> int:
    """Bytes of the parameters (tied ones once): what a weights file holds."""
    return sum(p.numel() * p.element_size() for p in model.parameters())


def weights_bytes(model: torch.nn.Module, round_to: int = 1) -> int:
    """What loading allocates: every parameter and buffer storage, rounded like the allocator."""
    return sum(round_up(t.untyped_storage().nbytes(), round_to) for t in weight_tensors(model))


def materialize_fake(model: torch.nn.Module, fake_mode: Any, device: str = "cpu") -> torch.nn.Module:
    """Swap meta parameters and buffers for fake tensors in place, keeping tied ones tied."""
    made: dict[int, torch.Tensor] = {}

    def fake_like(tensor: torch.Tensor) -> torch.Tensor:
        if id(tensor) not in made:
            with fake_mode:
                fresh = torch.empty(tensor.shape, dtype=tensor.dtype, device=device)
            if isinstance(tensor, torch.nn.Parameter):
                fresh = torch.nn.Parameter(fresh, requires_grad=False)
            made[id(tensor)] = fresh
        return made[id(tensor)]

    for module in model.modules():
        tables: tuple[dict[str, Any], ...] = (module._parameters, module._buffers)
        for table in tables:
            for name, tensor in table.items():
                if tensor is not None:
                    table[name] = fake_like(tensor)
    return model
