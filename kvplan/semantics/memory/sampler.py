"""The buffers of vLLM's dummy sampler run (`GPUModelRunner._dummy_sampler_run`), which is part of
the profiled activation peak, and the sampler state the model runner keeps (RUNNER_STATE).
0.17.1 (V1): logits for one row per request, their float32 copy, top-k/top-p, softmax and the
exponential noise of random sampling (docs/vllm/kv-semantics.md §2.2). 0.33.0 (V2): a default pass and a
warm-up pass whose float32 copy is filtered in place (docs/vllm/changes-0.33.md §1.4).

`kvplan.measure.dummy_sampler` runs the ops for real on whatever tensors it gets (CUDA, CPU or
fake), so every backend measures them its own way; here are the sizes they depend on."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvplan.semantics.releases import ProfileSampler
from kvplan.semantics.weights import VOCAB_PADDING
from kvplan.units import cdiv, round_up

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


def _no_runner_state(max_num_seqs: int, vocab_size: int) -> int:
    return 0


def _v2_sampler_state(max_num_seqs: int, vocab_size: int) -> int:
    """Model Runner V2's penalty statistics, allocated with the runner after start-up and held for
    good (`PenaltiesState`): `prompt_bin_mask` (a bit per vocabulary entry) and `output_bin_counts`
    (an int32 per entry), one row per request slot. The smaller per-request tensors are left out."""
    mask = max_num_seqs * cdiv(vocab_size, 32) * 4
    counts = max_num_seqs * vocab_size * 4
    return round_up(mask, 512) + round_up(counts, 512)


# Release.profile_sampler -> the sampler state the model runner keeps on the GPU, by max_num_seqs and vocab
RUNNER_STATE: dict[ProfileSampler, Callable[[int, int], int]] = {
    "v1_one_pass": _no_runner_state,
    "v2_default_and_warmup": _v2_sampler_state,
}
