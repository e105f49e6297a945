"""The engine's settings, with vLLM's defaults and the config rules vLLM enforces at start-up."""

from __future__ import annotations

from dataclasses import dataclass
from typing import get_args

from kvplan.errors import KvplanError
from kvplan.semantics.engine.groups import KVCacheGroup, resolve_groups
from kvplan.semantics.releases import NEWEST_RELEASE, Release, Scheduling

# `PrefixCachingHashAlgo` in 0.17.1. The hash function never changes hit/miss behaviour, so every
# name selects kvplan's own exact hash; the name is still validated as vLLM would.
HASH_ALGOS = ("sha256", "sha256_cbor", "xxhash", "xxhash_cbor")


@dataclass(frozen=True)
class EngineConfig:
    """A pool of `num_gpu_blocks` blocks (block 0 is the null block) and the scheduler.

    `kv_cache_groups` None is one full-attention group of `block_size` (the single-group trace
    contract); otherwise the KV cache groups sharing the pool, in group-id order, and records show
    every group's block table. `block_size` is also the block size of the prefix-cache hashes.
    `release` holds the engine policies that differ between vLLM releases (`semantics/releases.py`);
    `scheduling` is the engine loop, by default the one `vllm serve` of that release runs."""

    num_gpu_blocks: int
    # 0: the release's default block size (`Release.default_block_size`: 16, 64 from 0.34.0), what vLLM
    # takes when --block-size is not given
    block_size: int = 0
    enable_prefix_caching: bool = True
    max_num_batched_tokens: int = 2048
    max_num_seqs: int = 128
    max_model_len: int = 4096
    enable_chunked_prefill: bool = True
    hash_algo: str = "sha256"
    hash_seed: str = "0"
    kv_cache_groups: tuple[KVCacheGroup, ...] | None = None
    # the release whose engine policies apply (free-queue order, admission, prefix-cache statistics)
    release: Release = NEWEST_RELEASE
    # "async" (two batches in flight) or "sync" (`--no-async-scheduling`); None: the release's
    # default, what `vllm serve` does
    scheduling: Scheduling | None = None

    def __post_init__(self) -> None:
        if self.scheduling is None:
            object.__setattr__(self, "scheduling", self.release.scheduling)
        if self.block_size == 0:
            object.__setattr__(self, "block_size", self.release.default_block_size)
        self.validate()

    def validate(self) -> None:
        """Raise KvplanError (exit 2) on a configuration vLLM would refuse."""
        if self.scheduling not in get_args(Scheduling):
            raise KvplanError(f"scheduling must be one of {', '.join(get_args(Scheduling))} (async is what "
                              f"`vllm serve` does, sync is --no-async-scheduling), got {self.scheduling!r}")
        for name in ("num_gpu_blocks", "block_size", "max_num_batched_tokens", "max_num_seqs",
                     "max_model_len"):
            value = getattr(self, name)
            if type(value) is not int or value < 1:
                raise KvplanError(f"{name} must be a positive integer, got {value!r}")
        if self.num_gpu_blocks < 2:
            raise KvplanError(
                f"num_gpu_blocks must be at least 2 (block 0 is the null block), got {self.num_gpu_blocks}"
            )
        for name in ("enable_prefix_caching", "enable_chunked_prefill"):
            if type(getattr(self, name)) is not bool:
                raise KvplanError(f"{name} must be true or false, got {getattr(self, name)!r}")
        if self.hash_algo not in HASH_ALGOS:
            raise KvplanError(f"hash_algo must be one of {', '.join(HASH_ALGOS)}, got {self.hash_algo!r}")
        if not isinstance(self.hash_seed, str):
            raise KvplanError(f"hash_seed must be a string, got {self.hash_seed!r}")
        if self.max_num_batched_tokens < self.max_num_seqs:
            raise KvplanError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) must be greater than or equal to "
                f"max_num_seqs ({self.max_num_seqs}): raise max_num_batched_tokens or lower max_num_seqs"
            )
        if not self.enable_chunked_prefill and self.max_num_batched_tokens < self.max_model_len:
            raise KvplanError(
                f"max_num_batched_tokens ({self.max_num_batched_tokens}) is smaller than max_model_len "
                f"({self.max_model_len}) with chunked prefill off, so the longest prompt could never be "
                "scheduled: raise max_num_batched_tokens, lower max_model_len or enable chunked prefill"
            )
        resolve_groups(self.kv_cache_groups, self.block_size, self.enable_prefix_caching,
                       self.max_model_len, self.enable_chunked_prefill, self.release)

    @property
    def vllm_version(self) -> str:
        """The release's version, as trace and workload files name it."""
        return self.release.version

    @property
    def num_usable_blocks(self) -> int:
        return self.num_gpu_blocks - 1

    @property
    def groups(self) -> tuple[KVCacheGroup, ...]:
        """The KV cache groups with vLLM's derived block sizes and Mamba cache mode."""
        return resolve_groups(self.kv_cache_groups, self.block_size, self.enable_prefix_caching,
                              self.max_model_len, self.enable_chunked_prefill, self.release)

    @property
    def mamba_cache_mode(self) -> str | None:
        """vLLM's one `mamba_cache_mode` when a group is Mamba, else None."""
        return next((g.mamba_cache_mode for g in self.groups if g.mamba_cache_mode is not None), None)
