"""The dummy sampler run of vLLM's profile run on real or fake tensors: the ops run for real, so every
backend measures their buffers its own way (`kvplan.semantics.memory.sampler` holds the same sums in
closed form).

    run_dummy_sampler(...)      Model Runner V1's `_dummy_sampler_run` (0.17.1): one pass
    run_v2_dummy_sampler(...)   Model Runner V2's (0.33.0): the default pass, then the warm-up pass"""

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
    # Soft-capping (Gemma 2) is left out: its temporaries (at most 3 R x V in the model dtype) die
    # before the float32 copies below (3 R x V x 4 bytes) exist, so it never sets the peak.
    logits = _logits(random_hidden, lm_head, spec, tensor_parallel_size)
    vocab = spec.vocab_size

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


def run_v2_dummy_sampler(
    hidden_states: torch.Tensor, logits_indices: torch.Tensor, lm_head: torch.Tensor, spec: SamplerSpec,
    tensor_parallel_size: int = 1,
) -> tuple[torch.Tensor, torch.Tensor]:
    """V2's `_dummy_sampler_run` on the last token of each request: logits in the model dtype, a
    default pass (no logits processing; Gumbel-max sampling is one Triton kernel), then a pass with
    `SamplingParams.for_sampler_warmup()`: an fp32 copy of the logits that penalties, logit bias, bad
    words, min-tokens, temperature and min-p change in place, top-k/top-p filtering in place through
    the Triton kernel's cached scratch buffer, then Gumbel-max sampling and the top-5 logprobs in
    kernels. Returns the sampled ids and the scratch buffer, which vLLM keeps cached after the run."""
    logits = _logits(hidden_states[logits_indices], lm_head, spec, tensor_parallel_size)
    first = logits.argmax(dim=-1)
    warmup = torch.empty_like(logits, dtype=torch.float32).copy_(logits)
    top_k = torch.full((logits.shape[0],), 50, dtype=torch.int64, device=logits.device)
    scratch = _triton_topk_topp(warmup, top_k, spec)
    second = warmup.argmax(dim=-1)
    return torch.maximum(first, second), scratch


def _logits(hidden: torch.Tensor, lm_head: torch.Tensor, spec: SamplerSpec, tensor_parallel_size: int) -> torch.Tensor:
    """`compute_logits`: the lm_head GEMM over the padded vocabulary (one rank's share of it, gathered
    from every rank under tensor parallelism), cut to the vocabulary."""
    vocab, padded = spec.vocab_size, spec.padded_vocab_size
    if tensor_parallel_size > 1:
        # the all-gather of each rank's logits; the padding rows are cut off after it
        shard = torch.nn.functional.linear(hidden, lm_head)
        logits = torch.cat([shard] * tensor_parallel_size, dim=1)
        del shard
    elif padded == vocab:
        logits = torch.nn.functional.linear(hidden, lm_head)
    else:
        logits = hidden.new_zeros((hidden.shape[0], padded))
        logits[:, :vocab] = torch.nn.functional.linear(hidden, lm_head[:vocab])
    return logits[:, :vocab]


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
