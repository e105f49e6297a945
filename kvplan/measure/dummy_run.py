"""vLLM 0.17.1's profile run (`GPUModelRunner.profile_run`) on a transformers model: a dummy
forward of `max_num_batched_tokens` tokens split over `min(tokens, max_num_seqs)` requests,
then the dummy sampler run on one row per request. The backends wrap this in their own
measurement (allocator counters, live-tensor tracker, fake tensors)."""

from __future__ import annotations

from typing import Any

import torch

from kvplan.errors import KvplanError
from kvplan.measure.dummy_sampler import run_dummy_sampler
from kvplan.measure.shard import RankShard
from kvplan.semantics.memory.profile_batch import ProfileBatch
from kvplan.semantics.memory.sampler import SamplerSpec


def backbone_and_lm_head(model: torch.nn.Module) -> tuple[torch.nn.Module, torch.Tensor]:
    """The decoder stack (hidden states out) and the lm_head weight (vocab x hidden)."""
    pretrained: Any = model    # a transformers PreTrainedModel
    head = pretrained.get_output_embeddings()
    if head is None or getattr(head, "weight", None) is None:
        raise KvplanError(f"{type(model).__name__} has no language-model head; kvplan profiles generative models")
    return pretrained.base_model, head.weight


def make_inputs(batch: ProfileBatch, device: torch.device | str) -> tuple[torch.Tensor, torch.Tensor]:
    """Token ids (one packed row, like vLLM's flattened batch) and the sampled positions.
    vLLM keeps these in persistent buffers, so they exist before the measurement starts."""
    input_ids = torch.zeros((1, batch.num_tokens), dtype=torch.long, device=device)
    logits_indices = torch.tensor(batch.logits_indices, dtype=torch.long, device=device)
    return input_ids, logits_indices


def profile_step(
    model: torch.nn.Module, input_ids: torch.Tensor, logits_indices: torch.Tensor, multiprocessors: int,
    sampler_passes: int = 1, shard: RankShard | None = None,
) -> SamplerSpec:
    """The forward and the sampler (run `sampler_passes` times, as the release's profile run does);
    every tensor it makes is dead when it returns. On one rank's `shard` the sampler sees the whole
    vocabulary, and only the last pipeline stage samples."""
    backbone, lm_head = backbone_and_lm_head(model)
    vocab = shard.vocab_size if shard is not None else lm_head.shape[0]
    sampler = SamplerSpec(vocab_size=vocab, multiprocessors=multiprocessors)
    outputs = backbone(input_ids=input_ids, use_cache=False)
    hidden_states = outputs[0][0]
    if shard is None or shard.last_stage:
        for _ in range(sampler_passes):
            run_dummy_sampler(hidden_states, logits_indices, lm_head, sampler,
                              shard.tensor_parallel_size if shard is not None else 1)
    return sampler
