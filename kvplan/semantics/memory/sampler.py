"""The buffers of vLLM 0.17.1's dummy sampler run (`GPUModelRunner._dummy_sampler_run`), which is
part of the profiled activation peak: logits for one row per request, their float32 copy,
top-k/top-p, softmax and the exponential noise of random sampling (`vllm-kv-semantics.md` 2.2).

`kvplan.measure.dummy_sampler` runs the ops for real on whatever tensors it gets (CUDA, CPU or
fake), so every backend measures them its own way; here are the sizes they depend on."""

from __future__ import annotations

from dataclasses import dataclass

from kvplan.semantics.weights import VOCAB_PADDING
from kvplan.units import round_up

# H100 SXM's count, used (and reported as assumed) for a GPU missing from the table
ASSUMED_MULTIPROCESSORS = 132
# Below this many requests the sampler takes the PyTorch sort path instead of the Triton kernel
TRITON_TOPK_MIN_ROWS = 8


def padded_vocab_size(vocab_size: int, pad_to: int = VOCAB_PADDING) -> int:
    """vLLM pads the vocabulary of its lm_head / embedding to a multiple of `pad_to`."""
    return round_up(vocab_size, pad_to)


def next_power_of_2(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 0 else 1


def topk_topp_scratch_rows(num_reqs: int, multiprocessors: int) -> int:
    """Rows of the Triton kernel's float32 scratch buffer: one per program, at most one per SM."""
    return min(next_power_of_2(min(multiprocessors, num_reqs)), multiprocessors)


@dataclass(frozen=True)
class SamplerSpec:
    vocab_size: int                 # V: the model's vocabulary (org_vocab_size)
    multiprocessors: int            # SMs of the GPU the run plans for

    @property
    def padded_vocab_size(self) -> int:
        return padded_vocab_size(self.vocab_size)
