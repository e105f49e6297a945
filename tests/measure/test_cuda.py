"""The cuda backend's arithmetic, driven by a fake `torch.cuda` (no GPU here)."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

import kvplan.measure.cuda as cuda_backend
from kvplan.errors import KvplanError
from kvplan.measure.backend import ModelSource
from kvplan.measure.cuda import CudaBackend, cuda_usable
from kvplan.semantics.kv.specs import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, KVCacheTensor
from kvplan.semantics.memory.profile_batch import profile_batch

GIB = 1 << 30


class FakeCuda:
    """Allocator and device counters that the test moves by hand."""

    def __init__(self, available=True, stats=True):
        self.available, self.stats = available, stats
        self.total, self.free = 100 * GIB, 99 * GIB      # 1 GiB held before start-up (context)
        self.allocated = self.reserved = self.peak = 0
        self.calls: list[str] = []
        # CUDA graphs: each capture takes the next of `capture_costs` from free memory
        self.capture_costs: list[int] = []

    def grow(self, allocated=0, reserved=0, non_torch=0, transient=0):
        self.peak = max(self.peak, self.allocated + transient)
        self.allocated += allocated
        self.peak = max(self.peak, self.allocated)
        self.reserved += reserved
        self.free -= reserved + non_torch

    def is_available(self):
        self.calls.append("is_available")
        return self.available

    def device_count(self):
        return 1

    def set_device(self, device):
        self.calls.append("set_device")

    def get_device_properties(self, device):
        return SimpleNamespace(name="NVIDIA H200", multi_processor_count=132, total_memory=self.total)

    def mem_get_info(self, device):
        return self.free, self.total

    def memory_reserved(self, device):
        return self.reserved

    def memory_allocated(self, device):
        return self.allocated

    def memory_stats(self, device):
        return {"allocated_bytes.all.peak": self.peak} if self.stats else {}

    def reset_peak_memory_stats(self, device):
        self.peak = self.allocated

    def empty_cache(self):
        pass

    def synchronize(self, device=None):
        pass

    def graph_pool_handle(self):
        self.calls.append("graph_pool_handle")
        return ("pool", len(self.calls))

    class CUDAGraph:
        pass

    def graph(self, graph, pool=None):
        fake = self

        class Capture:
            def __enter__(self):
                fake.calls.append(f"capture into {pool}")

            def __exit__(self, *exc):
                fake.free -= fake.capture_costs.pop(0)
                return False

        return Capture()


def test_nothing_else_is_called_when_cuda_is_unavailable():
    fake = FakeCuda(available=False)
    assert not cuda_usable(fake)
    with pytest.raises(KvplanError, match="no usable CUDA GPU"):
        CudaBackend(0, cuda=fake)
    assert fake.calls == ["is_available", "is_available"]


def test_device_index_out_of_range_is_bad_input():
    with pytest.raises(KvplanError, match="1 CUDA device"):
        CudaBackend(3, cuda=FakeCuda())


def test_vllms_measurement_relative_to_the_startup_snapshot(monkeypatch, tiny_config):
    fake = FakeCuda()
    backend = CudaBackend(0, cuda=fake, tensor_device="cpu")
    assert backend.device_name == "NVIDIA H200" and backend.multiprocessors() == 132
    snapshot = backend.snapshot()
    assert (snapshot.total_bytes, snapshot.free_bytes) == (100 * GIB, 99 * GIB)
    assert snapshot.non_torch_bytes == GIB

    real_build = cuda_backend.build_dummy_model

    def build_on_gpu(*args, **kwargs):
        fake.grow(allocated=3 * GIB, reserved=3 * GIB + GIB // 2)
        return real_build(*args, **kwargs)

    monkeypatch.setattr(cuda_backend, "build_dummy_model", build_on_gpu)
    weights = backend.load_model(ModelSource("tiny", tiny_config, "bfloat16"))
    assert weights.weights_bytes == 3 * GIB

    real_step = cuda_backend.profile_step

    def step_on_gpu(*args, **kwargs):
        # activations peak 2 GiB above the weights; cuBLAS takes a 256 MiB workspace outside torch
        fake.grow(transient=2 * GIB, reserved=GIB, non_torch=GIB // 4)
        return real_step(*args, **kwargs)

    monkeypatch.setattr(cuda_backend, "profile_step", step_on_gpu)
    measured = backend.profile(profile_batch(64, 4), 132)
    assert measured.activation_peak_bytes == 2 * GIB
    assert measured.non_torch_increase_bytes == GIB // 4
    # 0.33.0's total consumed: free memory at start-up minus after the run (weights' 3.5 GiB reserved,
    # the run's 1 GiB reserved, 256 MiB non-torch)
    assert measured.consumed_bytes == 3 * GIB + GIB // 2 + GIB + GIB // 4
    assert measured.retained_bytes == 0

    spec = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=16, dtype="bfloat16")
    config = KVCacheConfig(6, (KVCacheTensor(spec.page_size_bytes * 6, ("layer",)),),
                           (KVCacheGroupSpec(("layer",), spec),))
    real_allocate = cuda_backend.allocate_kv_cache

    def allocate_on_gpu(config, backend_name, device):
        fake.grow(allocated=sum(t.size for t in config.kv_cache_tensors))
        return real_allocate(config, backend_name, device)

    monkeypatch.setattr(cuda_backend, "allocate_kv_cache", allocate_on_gpu)
    report = backend.allocate(config, "flash_attn")
    assert report.real and report.device == "cuda:0"
    assert report.committed_bytes == report.pool_bytes == spec.page_size_bytes * 6
    assert report.check.passed


def test_empty_memory_stats_are_refused_not_read_as_zero(tiny_config):
    backend = CudaBackend(0, cuda=FakeCuda(stats=False), tensor_device="cpu")
    backend.snapshot()
    backend.load_model(ModelSource("tiny", tiny_config, "bfloat16"))
    with pytest.raises(KvplanError, match=r"allocated_bytes\.all\.peak"):
        backend.profile(profile_batch(16, 2), 132)


def test_the_graph_pool_is_measured_by_capturing_into_a_throwaway_pool(tiny_config):
    """0.33.0's method on a GPU: the drop in free memory around each capture of the largest sizes."""
    fake = FakeCuda()
    fake.capture_costs = [80 << 20, 3 << 20]
    backend = CudaBackend(0, cuda=fake, tensor_device="cpu")
    backend.snapshot()
    backend.load_model(ModelSource("tiny", tiny_config, "bfloat16"))
    assert backend.graph_samples((16, 8)) == (80 << 20, 3 << 20)
    captures = [call for call in fake.calls if call.startswith("capture into")]
    assert len(captures) == 2 and len(set(captures)) == 1       # both into the one throw-away pool


def test_the_profile_run_reports_what_it_leaves_allocated(monkeypatch, tiny_config):
    fake = FakeCuda()
    backend = CudaBackend(0, cuda=fake, tensor_device="cpu")
    backend.snapshot()
    backend.load_model(ModelSource("tiny", tiny_config, "bfloat16"))
    real_step = cuda_backend.profile_step

    def step_keeping_a_buffer(*args, **kwargs):
        fake.grow(transient=GIB, allocated=64 << 20, reserved=64 << 20)   # the cached top-k/top-p scratch
        return real_step(*args, **kwargs)

    monkeypatch.setattr(cuda_backend, "profile_step", step_keeping_a_buffer)
    measured = backend.profile(profile_batch(64, 4), 132, "v2_default_and_warmup")
    # the peak counts the buffer while the run holds it; 0.33.0 takes it out of the transient peak
    assert (measured.activation_peak_bytes, measured.retained_bytes) == (GIB, 64 << 20)
    assert measured.consumed_bytes == 64 << 20
