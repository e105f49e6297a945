"""vLLM's dummy sampler run: the buffers it allocates, in closed form and as tensors."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from kvplan.measure.dummy_sampler import run_dummy_sampler
from kvplan.measure.tracker import LiveBytes
from kvplan.semantics.memory.sampler import SamplerSpec, padded_vocab_size, topk_topp_scratch_rows
from tests.references import sampler_peak_bytes


def test_scratch_rows_follow_the_triton_kernel():
    # B = min(next_power_of_2(min(SMs, R)), SMs)
    assert topk_topp_scratch_rows(1024, 132) == 132
    assert topk_topp_scratch_rows(100, 132) == 128
    assert topk_topp_scratch_rows(8, 132) == 8
    assert topk_topp_scratch_rows(200, 114) == 114


def test_vocab_is_padded_to_64():
    assert padded_vocab_size(151936) == 151936
    assert padded_vocab_size(32000) == 32000
    assert padded_vocab_size(50257) == 50304


def test_closed_form_matches_the_worked_example_of_section_2_2():
    # Llama-3.1-8B on an H100 SXM, T = 16384, R = 1024: 1,906,397,184 bytes of logits-sized
    # tensors plus 134,217,728 of hidden states plus two R x H copies
    spec = SamplerSpec(vocab_size=128256, multiprocessors=132)
    expected = 1_906_397_184 + 134_217_728 + 2 * 1024 * 4096 * 2
    assert sampler_peak_bytes(16384, 1024, 4096, 2, spec) == expected


@pytest.mark.parametrize(("tokens", "reqs", "vocab"), [(4096, 512, 50257), (64, 4, 1024), (64, 1, 1000)])
def test_tensor_run_matches_the_closed_form(tokens, reqs, vocab):
    spec = SamplerSpec(vocab_size=vocab, multiprocessors=132)
    hidden = 256
    mode = FakeTensorMode()
    with mode:
        lm_head = torch.empty(vocab, hidden, dtype=torch.bfloat16)
        hidden_states = torch.empty(tokens, hidden, dtype=torch.bfloat16)
        indices = torch.arange(reqs) * (tokens // reqs) + (tokens // reqs - 1)
    with torch.no_grad(), mode, LiveBytes(round_to=1) as live:
        live.register_existing([lm_head, indices])
        live.current = live.peak = tokens * hidden * 2  # the caller holds the hidden states
        run_dummy_sampler(hidden_states, indices, lm_head, spec)
    expected = sampler_peak_bytes(tokens, reqs, hidden, 2, spec)
    # the closed form leaves out the length-R vectors (temperature, top-k, ...): a few KiB
    assert expected <= live.peak <= expected + 64 * reqs + 4096
