"""kvplan's own dense decoders against transformers' classes: the same parameters and buffers, and a
profile run (on meta tensors) that makes tensors of the same sizes in the same order, with the same
bytes alive at each of them, as transformers' forward on fake tensors. The live-tensor peak is the
largest of those figures, so the fake backend predicts the same numbers whichever builds the model."""

from __future__ import annotations

import contextlib
import json
from typing import Any

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from kvplan.measure.decoder import build_decoder, dense_decoder_for
from kvplan.measure.dummy_run import make_inputs, profile_step
from kvplan.measure.hf import (
    build_meta_model,
    hf_config,
    materialize_fake,
    parameter_bytes,
    weight_tensors,
    weights_bytes,
)
from kvplan.measure.tracker import CUDA_ALLOCATOR_ROUNDING, LiveBytes
from kvplan.semantics.memory.profile_batch import profile_batch
from kvplan.sources.catalog import CATALOG_DIR
from tests.measure.conftest import tiny_qwen2_config


class AllocationLog(LiveBytes):
    """The live-tensor tracker, also noting (bytes, bytes alive) at every storage it starts to count."""

    def __init__(self) -> None:
        super().__init__(CUDA_ALLOCATOR_ROUNDING)
        self.allocations: list[tuple[int, int]] = []

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        before = set(self._live)
        out = super().__torch_dispatch__(func, types, args, kwargs)
        self.allocations.extend((size, self.current) for key, size in self._live.items() if key not in before)
        return out


def allocations(model: torch.nn.Module, tokens: int, seqs: int, fake: bool) -> tuple[int, list[tuple[int, int]]]:
    mode: Any = FakeTensorMode() if fake else contextlib.nullcontext()
    if fake:
        materialize_fake(model, mode)
    with mode:
        input_ids, logits_indices = make_inputs(profile_batch(tokens, seqs), "cpu" if fake else "meta")
    with torch.no_grad(), mode, AllocationLog() as log:
        log.register_existing([*weight_tensors(model), input_ids, logits_indices])
        profile_step(model, input_ids, logits_indices, 132)
    return log.peak, log.allocations


def both(config: dict[str, Any]) -> tuple[torch.nn.Module, torch.nn.Module]:
    decoder = dense_decoder_for(config)
    assert decoder is not None
    return build_decoder(decoder, torch.bfloat16), build_meta_model(hf_config(config), torch.bfloat16)


TINY = {
    "llama": tiny_qwen2_config(architectures=["LlamaForCausalLM"], model_type="llama", tie_word_embeddings=False),
    "llama biases": tiny_qwen2_config(architectures=["LlamaForCausalLM"], model_type="llama",
                                      attention_bias=True, mlp_bias=True),
    "llama3 rope": tiny_qwen2_config(architectures=["LlamaForCausalLM"], model_type="llama", rope_scaling={
        "rope_type": "llama3", "factor": 8.0, "low_freq_factor": 1.0, "high_freq_factor": 4.0,
        "original_max_position_embeddings": 1024}),
    "qwen2 tied": tiny_qwen2_config(),
    "qwen3": tiny_qwen2_config(architectures=["Qwen3ForCausalLM"], model_type="qwen3", head_dim=32),
    "mistral window": tiny_qwen2_config(architectures=["MistralForCausalLM"], model_type="mistral",
                                        sliding_window=32, tie_word_embeddings=False),
}


@pytest.mark.parametrize("name", TINY)
@pytest.mark.parametrize(("tokens", "seqs"), [(64, 1), (300, 7), (2048, 256)])
def test_tiny_decoders_allocate_as_transformers_does(name, tokens, seqs):
    ours, theirs = both(TINY[name])
    assert weights_bytes(ours, 512) == weights_bytes(theirs, 512)
    assert parameter_bytes(ours) == parameter_bytes(theirs)
    assert allocations(ours, tokens, seqs, fake=False) == allocations(theirs, tokens, seqs, fake=True)


@pytest.mark.parametrize("model", ["meta-llama--Llama-3.1-8B-Instruct", "Qwen--Qwen3-8B", "Qwen--Qwen2-0.5B-Instruct"])
def test_catalog_decoders_allocate_as_transformers_does(model):
    ours, theirs = both(json.loads((CATALOG_DIR / model / "config.json").read_text()))
    assert (weights_bytes(ours, 512), parameter_bytes(ours)) == (weights_bytes(theirs, 512), parameter_bytes(theirs))
    assert allocations(ours, 8192, 256, fake=False) == allocations(theirs, 8192, 256, fake=True)


@pytest.mark.parametrize(("change", "why"), [
    ({"architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2"}, "another architecture"),
    ({"hidden_act": "gelu"}, "another activation"),
    ({"rope_scaling": {"rope_type": "dynamic", "factor": 2.0}}, "a rope that changes the forward"),
    ({"use_sliding_window": True}, "sliding-window layers"),
    ({"quantization_config": {"quant_method": "fp8"}}, "a quantized checkpoint"),
    ({"auto_map": {"AutoModelForCausalLM": "x.Y"}}, "the model's own code"),
])
def test_anything_else_is_left_to_transformers(change, why):
    assert dense_decoder_for(tiny_qwen2_config(**change)) is None, why
