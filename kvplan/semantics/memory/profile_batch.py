"""The batch of vLLM 0.17.1's profile run (`GPUModelRunner.profile_run` / `_dummy_run`): a forward of
`max_num_batched_tokens` tokens split over `min(tokens, max_num_seqs)` requests, the sampler then
seeing one row per request."""

from __future__ import annotations

from dataclasses import dataclass

from kvplan.errors import KvplanError


@dataclass(frozen=True)
class ProfileBatch:
    num_tokens: int
    num_reqs: int

    @property
    def tokens_per_request(self) -> tuple[int, ...]:
        """`num_tokens // num_reqs` each, the remainder to the last (as `_dummy_run`)."""
        base = self.num_tokens // self.num_reqs
        return (base,) * (self.num_reqs - 1) + (self.num_tokens - base * (self.num_reqs - 1),)

    @property
    def logits_indices(self) -> tuple[int, ...]:
        """Each request's last token: the rows the sampler sees."""
        end, indices = 0, []
        for count in self.tokens_per_request:
            end += count
            indices.append(end - 1)
        return tuple(indices)


def profile_batch(max_num_batched_tokens: int, max_num_seqs: int) -> ProfileBatch:
    if max_num_batched_tokens < 1 or max_num_seqs < 1:
        raise KvplanError("--max-num-batched-tokens and --max-num-seqs must be at least 1")
    return ProfileBatch(max_num_batched_tokens, min(max_num_batched_tokens, max_num_seqs))
