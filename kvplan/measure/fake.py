"""The fake backend: predicts a GPU's numbers with no GPU and almost no memory.

The model is built on the meta device (the catalog's dense decoders by `kvplan.measure.decoder`,
which makes transformers' tensors without importing it; anything else by transformers), its
weights swapped for fake tensors, and the profile run
goes through `FakeTensorMode` under the live-bytes tracker (512-byte rounding, flash-like
attention, `no_grad`). The KV pool is built on the meta device (exact shapes, strides, bytes)
and the slot-mapping round trip runs on a small real pool on the CPU with the same layout."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from kvplan.errors import KvplanError
from kvplan.measure.backend import (
    ActivationMeasurement,
    AllocationReport,
    BackendName,
    ModelSource,
    PlannedGpu,
    WeightsMeasurement,
)
from kvplan.measure.decoder import build_decoder, dense_decoder_for
from kvplan.measure.dummy_run import make_inputs, profile_step
from kvplan.measure.hf import (
    build_meta_model,
    hf_config,
    materialize_fake,
    parameter_bytes,
    torch_dtype,
    weight_tensors,
    weights_bytes,
)
from kvplan.measure.kv_tensors import allocate_kv_cache, slot_mapping_check
from kvplan.measure.shard import RankShard, shard_config
from kvplan.measure.tracker import CUDA_ALLOCATOR_ROUNDING, LiveBytes
from kvplan.semantics.kv.sizing import shrink_pool
from kvplan.semantics.kv.specs import KVCacheConfig
from kvplan.semantics.memory.profile_batch import ProfileBatch
from kvplan.semantics.releases import ProfileSampler
from kvplan.units import round_up

# blocks in the real CPU pool that stands in for the meta pool during the round trip
CHECK_POOL_BLOCKS = 8


@contextlib.contextmanager
def _one_thread() -> Iterator[None]:
    """The round trip's tensors are a few kilobytes: a second thread only adds start-up and, on a busy
    machine, spinning (seconds instead of a tenth)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class FakeBackend(PlannedGpu):
    name: BackendName = "fake"
    predicted = True

    def __init__(self, total_bytes: int, device_label: str, multiprocessors: int | None = None) -> None:
        super().__init__(total_bytes, device_label, multiprocessors)
        self._mode: FakeTensorMode | None = None
        self._model: torch.nn.Module | None = None
        self._shard: RankShard | None = None

    def load_model(self, source: ModelSource) -> WeightsMeasurement:
        self._shard = source.shard
        shaped = source.config if source.shard is None else shard_config(source.config, source.shard)
        decoder = dense_decoder_for(shaped)
        model: torch.nn.Module
        if decoder is not None:
            # transformers' allocations without importing transformers, run on meta tensors
            # (kvplan.measure.decoder; tests/measure/test_decoder.py compares the two)
            built = build_decoder(decoder, torch_dtype(source.dtype))
            built.model.run_two_layers = True   # byte counts only: identical layers repeat the same peak
            model = built
            self._mode = None
        else:
            model = build_meta_model(hf_config(shaped, trust_remote_code=source.trust_remote_code),
                                     torch_dtype(source.dtype))
            # transformers' forward needs fake tensors: it cannot read sizes from meta ones
            self._mode = FakeTensorMode()
            materialize_fake(model, self._mode)
        self._model = model
        return WeightsMeasurement(
            weights_bytes(model, CUDA_ALLOCATOR_ROUNDING), parameter_bytes(model),
            "meta-device build: parameter and buffer storages, 512-B rounded",
        )

    def profile(self, batch: ProfileBatch, multiprocessors: int,
                sampler: ProfileSampler = "v1_one_pass") -> ActivationMeasurement:
        assert self._model is not None, "load_model first"
        mode = self._mode if self._mode is not None else contextlib.nullcontext()
        with mode:
            input_ids, logits_indices = make_inputs(batch, "cpu" if self._mode is not None else "meta")
        with torch.no_grad(), mode, LiveBytes(CUDA_ALLOCATOR_ROUNDING) as live:
            live.register_existing([*weight_tensors(self._model), input_ids, logits_indices])
            step = profile_step(self._model, input_ids, logits_indices, multiprocessors, sampler, self._shard)
        how = "fake-tensor forward" if self._mode is not None else "meta-tensor forward"
        return ActivationMeasurement(
            live.peak, None, f"{how}: live-tensor peak, 512-B rounded", step.sampler,
            retained_bytes=round_up(step.retained_bytes, CUDA_ALLOCATOR_ROUNDING),
        )

    def forward_peak(self, num_tokens: int) -> int:
        assert self._model is not None, "load_model first"
        mode = self._mode if self._mode is not None else contextlib.nullcontext()
        with mode:
            input_ids, logits_indices = make_inputs(ProfileBatch(num_tokens, num_tokens),
                                                    "cpu" if self._mode is not None else "meta")
        with torch.no_grad(), mode, LiveBytes(CUDA_ALLOCATOR_ROUNDING) as live:
            live.register_existing([*weight_tensors(self._model), input_ids, logits_indices])
            profile_step(self._model, input_ids, logits_indices, 1, None)
        return live.peak

    def graph_samples(self, sizes: tuple[int, ...]) -> tuple[int, ...]:
        raise KvplanError("the fake backend captures no CUDA graphs; their pool is predicted")

    def release_model(self) -> None:
        self._model = None
        self._mode = None

    def allocate(self, config: KVCacheConfig, attention_backend: str) -> AllocationReport:
        pool = allocate_kv_cache(config, attention_backend, "meta")
        small_blocks = min(config.num_blocks, CHECK_POOL_BLOCKS)
        with _one_thread():
            small = allocate_kv_cache(shrink_pool(config, small_blocks), attention_backend, "cpu")
            check = slot_mapping_check(small)
        return AllocationReport(
            device="meta", attention_backend=attention_backend, pool_bytes=pool.total_bytes,
            num_tensors=len(pool.raw), layouts=tuple(pool.layouts), real=False, committed_bytes=None,
            check=check, check_pool_blocks=small_blocks,
            how=f"full pool on the meta device; round trip on a real {small_blocks}-block CPU pool",
        )
