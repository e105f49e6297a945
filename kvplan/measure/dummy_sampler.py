"""vLLM 0.17.1's dummy sampler run (`GPUModelRunner._dummy_sampler_run`) on real or fake tensors:
the ops run for real, so every backend measures their buffers its own way
(`kvplan.semantics.memory.sampler` holds the same sum in closed form)."""

from __future__ import annotations

import torch

from kvplan.semantics.memory.sampler import TRITON_TOPK_MIN_ROWS, SamplerSpec, topk_topp_scratch_rows


def run_dummy_sampler(
    hidden_states: torch.Tensor, logits_indices: torch.Tensor, lm_head: torch.Tensor, spec: SamplerSpec,
    tensor_parallel_size: int = 1,
) -> torch.Tensor:
    """`_dummy_sampler_run` on `hidden_states` (T x H, kept alive by the caller as in vLLM).
    With tensor parallelism `lm_head` is one rank's share of the padded vocabulary, and the logits
    are gathered from every rank before sampling. Returns the sampled token ids so that nothing is
    optimised away."""
    num_reqs = logits_indices.shape[0]
    last_hidden_states = hidden_states[logits_indices]
    # dummy activations may hold inf/nan, so vLLM samples from random hidden states
    random_hidden = torch.rand_like(last_hidden_states)
    vocab, padded = spec.vocab_size, spec.padded_vocab_size
    if tensor_parallel_size > 1:
        # the all-gather of each rank's logits; the padding rows are cut off after it
        shard = torch.nn.functional.linear(random_hidden, lm_head)
        logits = torch.cat([shard] * tensor_parallel_size, dim=1)
        del shard
    elif padded == vocab:
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
