"""The buffers of vLLM 0.17.1's dummy sampler run (`GPUModelRunner._dummy_sampler_run`), which
is part of the profiled activation peak: logits for one row per request, their float32 copy,
top-k/top-p, softmax and the exponential noise of random sampling
(`vllm-kv-semantics.md` section 2.2).

The ops run for real on whatever tensors they get (CUDA, CPU or fake), so every backend
measures them its own way; `sampler_peak_bytes` is the same sum in closed form."""

from __future__ import annotations

from dataclasses import dataclass

import torch

# Streaming multiprocessors per GPU (NVIDIA) or compute units (AMD), from the vendors' data
# sheets and architecture whitepapers; keyed like the GPU catalog. They size the scratch buffer
# of the Triton top-k/top-p kernel. vLLM reads the number from the device at run time.
MULTIPROCESSORS = {
    "t4-16gb": 40, "l4-24gb": 58, "a10g-24gb": 80, "a10-24gb": 72, "rtx3090-24gb": 82,
    "rtx4090-24gb": 128, "rtx5090-32gb": 170, "v100-sxm2-16gb": 80, "v100-sxm2-32gb": 80,
    "a40-48gb": 84, "l40s-48gb": 142, "rtx6000ada-48gb": 142, "a100-pcie-40gb": 108,
    "a100-sxm-40gb": 108, "a100-pcie-80gb": 108, "a100-sxm-80gb": 108, "h100-pcie-80gb": 114,
    "h100-sxm-80gb": 132, "h100-nvl-94gb": 132, "h200-141gb": 132, "h20-96gb": 78,
    "gh200-96gb": 132, "gh200-144gb": 132, "b200-180gb": 148, "mi250x-gcd-64gb": 110,
    "mi300x-192gb": 304, "mi325x-256gb": 304,
}
# H100 SXM's count, used (and reported as assumed) for a GPU missing from the table
ASSUMED_MULTIPROCESSORS = 132
# Below this many requests the sampler takes the PyTorch sort path instead of the Triton kernel
TRITON_TOPK_MIN_ROWS = 8
# vLLM pads the vocabulary of its lm_head / embedding to a multiple of this
VOCAB_PADDING = 64


def padded_vocab_size(vocab_size: int, pad_to: int = VOCAB_PADDING) -> int:
    return -(-vocab_size // pad_to) * pad_to


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


def sampler_peak_bytes(
    num_tokens: int, num_reqs: int, hidden_size: int, dtype_bytes: int, spec: SamplerSpec
) -> int:
    """The tensors alive at the sampler's peak, unrounded (the formula of section 2.2)."""
    vocab, padded = spec.vocab_size, spec.padded_vocab_size
    held = num_tokens * hidden_size * dtype_bytes + 2 * num_reqs * hidden_size * dtype_bytes
    logits = num_reqs * padded * dtype_bytes
    if num_reqs >= TRITON_TOPK_MIN_ROWS:
        scratch = topk_topp_scratch_rows(num_reqs, spec.multiprocessors) * vocab * 4
        return held + logits + 3 * num_reqs * vocab * 4 + scratch
    # sort path: sorted values + int64 indices + softmax, then probs and noise after they die
    return held + logits + max(num_reqs * vocab * (4 + 4 + 8 + 4 + 1), 3 * num_reqs * vocab * 4)


def run_dummy_sampler(
    hidden_states: torch.Tensor, logits_indices: torch.Tensor, lm_head: torch.Tensor, spec: SamplerSpec
) -> torch.Tensor:
    """`_dummy_sampler_run` on `hidden_states` (T x H, kept alive by the caller as in vLLM).
    Returns the sampled token ids so that nothing is optimised away."""
    num_reqs = logits_indices.shape[0]
    last_hidden_states = hidden_states[logits_indices]
    # dummy activations may hold inf/nan, so vLLM samples from random hidden states
    random_hidden = torch.rand_like(last_hidden_states)
    vocab, padded = spec.vocab_size, spec.padded_vocab_size
    if padded == vocab:
        logits = torch.nn.functional.linear(random_hidden, lm_head)
    else:
        logits = random_hidden.new_zeros((num_reqs, padded))
        logits[:, :vocab] = torch.nn.functional.linear(random_hidden, lm_head[:vocab])
    # Soft-capping (Gemma 2) is left out: its temporaries (at most 3 R x V in the model dtype) die
    # before the float32 copies below (3 R x V x 4 bytes) exist, so it never sets the peak.
    logits = logits[:, :vocab]

    device = logits.device
    temperature = torch.full((num_reqs,), 0.5, dtype=torch.float32, device=device)
    top_p = torch.full((num_reqs,), 0.9, dtype=torch.float32, device=device)
    top_k = torch.full((num_reqs,), vocab - 1, dtype=torch.int64, device=device)

    logits_f32 = logits.to(torch.float32)
    greedy = logits_f32.argmax(dim=-1)
    logits_f32.div_(temperature.unsqueeze(1))
    # vLLM keeps the Triton kernel's scratch buffer in a module-level cache: it stays alive
    scratch = None
    if num_reqs >= TRITON_TOPK_MIN_ROWS:
        scratch = _triton_topk_topp(logits_f32, top_k, spec)
    else:
        _pytorch_topk_topp(logits_f32, top_k, top_p)
    probs = logits_f32.softmax(dim=-1, dtype=torch.float32)
    noise = torch.empty_like(probs).exponential_()
    sampled = probs.div_(noise).argmax(dim=-1)
    del scratch
    return torch.where(temperature < 1e-5, greedy, sampled)


def _triton_topk_topp(logits: torch.Tensor, top_k: torch.Tensor, spec: SamplerSpec) -> torch.Tensor:
    """The Triton kernel filters in place; it allocates a B x V float32 scratch buffer and an
    int32 copy of k. Returns the scratch buffer."""
    rows = topk_topp_scratch_rows(logits.shape[0], spec.multiprocessors)
    scratch = logits.new_zeros((rows, logits.shape[1]))
    top_k.to(torch.int32)
    return scratch


def _pytorch_topk_topp(logits: torch.Tensor, top_k: torch.Tensor, top_p: torch.Tensor) -> None:
    values, indices = logits.sort(dim=-1, descending=False)
    kth = values.gather(1, (values.shape[1] - top_k).unsqueeze(1))
    values.masked_fill_(values < kth, float("-inf"))
    cumulative = values.softmax(dim=-1)
    torch.cumsum(cumulative, dim=-1, out=cumulative)
    top_p_mask = cumulative <= 1 - top_p.unsqueeze(1)
    top_p_mask[:, -1] = False
    values.masked_fill_(top_p_mask, float("-inf"))
    logits.scatter_(dim=-1, index=indices, src=values)
