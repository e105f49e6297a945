"""vLLM's profile run (`GPUModelRunner.profile_run`) on a transformers model: a dummy forward of
`max_num_batched_tokens` tokens split over `min(tokens, max_num_seqs)` requests, then the release's
dummy sampler run on one row per request (DUMMY_SAMPLERS). The backends wrap this in their own
measurement (allocator counters, live-tensor tracker, fake tensors)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch

from kvplan.errors import KvplanError
from kvplan.measure.dummy_sampler import run_dummy_sampler, run_v2_dummy_sampler
from kvplan.measure.shard import RankShard
from kvplan.semantics.memory.profile_batch import ProfileBatch
from kvplan.semantics.memory.sampler import SamplerSpec
from kvplan.semantics.releases import ProfileSampler


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


def _v1_one_pass(hidden_states: torch.Tensor, logits_indices: torch.Tensor, lm_head: torch.Tensor,
                 spec: SamplerSpec, tensor_parallel_size: int) -> tuple[torch.Tensor, ...]:
    run_dummy_sampler(hidden_states, logits_indices, lm_head, spec, tensor_parallel_size)
    return ()


def _v2_default_and_warmup(hidden_states: torch.Tensor, logits_indices: torch.Tensor, lm_head: torch.Tensor,
                           spec: SamplerSpec, tensor_parallel_size: int) -> tuple[torch.Tensor, ...]:
    _sampled, scratch = run_v2_dummy_sampler(hidden_states, logits_indices, lm_head, spec, tensor_parallel_size)
    return (scratch,)


# Release.profile_sampler -> the dummy sampler run; it returns what the run leaves allocated
DUMMY_SAMPLERS: dict[ProfileSampler, Callable[..., tuple[torch.Tensor, ...]]] = {
    "v1_one_pass": _v1_one_pass,
    "v2_default_and_warmup": _v2_default_and_warmup,
}


@dataclass
class ProfileStep:
    sampler: SamplerSpec
    retained: tuple[torch.Tensor, ...]      # what the run leaves allocated (vLLM's cached buffers)

    @property
    def retained_bytes(self) -> int:
        return sum(tensor.untyped_storage().nbytes() for tensor in self.retained)


def profile_step(
    model: torch.nn.Module, input_ids: torch.Tensor, logits_indices: torch.Tensor, multiprocessors: int,
    sampler: ProfileSampler | None = "v1_one_pass", shard: RankShard | None = None,
) -> ProfileStep:
    """The forward and the release's dummy sampler run (None: the forward alone, as a CUDA graph of a
    decode batch captures it); every tensor it makes is dead when it returns, except what vLLM keeps.
    On one rank's `shard` the sampler sees the whole vocabulary, and only the last pipeline stage
    samples."""
    backbone, lm_head = backbone_and_lm_head(model)
    vocab = shard.vocab_size if shard is not None else lm_head.shape[0]
    spec = SamplerSpec(vocab_size=vocab, multiprocessors=multiprocessors)
    outputs = backbone(input_ids=input_ids, use_cache=False)
    hidden_states = outputs[0][0]
    retained: tuple[torch.Tensor, ...] = ()
    if sampler is not None and (shard is None or shard.last_stage):
        retained = DUMMY_SAMPLERS[sampler](hidden_states, logits_indices, lm_head, spec,
                                           shard.tensor_parallel_size if shard is not None else 1)
    return ProfileStep(spec, retained)
