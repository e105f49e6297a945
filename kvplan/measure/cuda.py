"""The cuda backend: vLLM's own measurement on a real GPU.

    weights   = increase of allocated bytes across loading        (DeviceMemoryProfiler)
    peak      = allocated_bytes.all.peak after - before, peak stats reset first (memory_profiling)
    non-torch = ((total - free) - memory_reserved) after profiling, minus the same at start-up
    retained  = allocated bytes the run left (vLLM's cached sampler buffers)
    consumed  = free memory at start-up - free memory after profiling (0.33.0's total consumed)
    graphs    = the drop in free memory while CUDA graphs of the forward are captured into a throw-away
                pool (0.33.0's `profile_cudagraph_memory`), largest sizes first

The `torch.cuda` module is passed in, so tests can drive the arithmetic with a fake. Nothing here
touches `torch.cuda` before `is_available()` said yes: on a CPU build some calls return empty
results instead of failing (memory_stats() is {})."""

from __future__ import annotations

import gc
from typing import Any

import torch

from kvplan.errors import KvplanError
from kvplan.measure.backend import (
    ActivationMeasurement,
    AllocationReport,
    BackendName,
    DeviceSnapshot,
    ModelSource,
    WeightsMeasurement,
)
from kvplan.measure.dummy_run import backbone_and_lm_head, make_inputs, profile_step
from kvplan.measure.hf import (
    build_dummy_model,
    hf_config,
    load_safetensors_model,
    parameter_bytes,
    torch_dtype,
)
from kvplan.measure.kv_tensors import allocate_kv_cache, slot_mapping_check
from kvplan.semantics.kv.specs import KVCacheConfig
from kvplan.semantics.memory.profile_batch import ProfileBatch
from kvplan.semantics.releases import ProfileSampler

PEAK_KEY = "allocated_bytes.all.peak"


def cuda_usable(cuda: Any = None) -> bool:
    cuda = torch.cuda if cuda is None else cuda
    try:
        return bool(cuda.is_available())
    except (RuntimeError, AssertionError):
        return False


def _peak(cuda: Any, device: Any) -> int:
    stats = cuda.memory_stats(device)
    if PEAK_KEY not in stats:
        raise KvplanError(f"torch.cuda.memory_stats() has no {PEAK_KEY!r}: this torch build cannot measure the GPU")
    return int(stats[PEAK_KEY])


class CudaBackend:
    name: BackendName = "cuda"
    predicted = False

    def __init__(self, device_index: int = 0, cuda: Any = None, tensor_device: str | None = None) -> None:
        """`cuda` and `tensor_device` replace `torch.cuda` and the GPU in tests."""
        self.cuda = torch.cuda if cuda is None else cuda
        if not cuda_usable(self.cuda):
            raise KvplanError("no usable CUDA GPU here: use --backend fake (predict) or --backend cpu")
        count = int(self.cuda.device_count())
        if not 0 <= device_index < count:
            raise KvplanError(f"--device {device_index}: this machine has {count} CUDA device(s), numbered from 0")
        self.device = torch.device("cuda", device_index)
        self.tensor_device = torch.device(tensor_device) if tensor_device else self.device
        self.cuda.set_device(self.device)
        properties = self.cuda.get_device_properties(self.device)
        self.device_name = str(properties.name)
        self._multiprocessors = int(properties.multi_processor_count)
        self.device_label = f"cuda:{device_index}"
        self._init: DeviceSnapshot | None = None
        self._model: torch.nn.Module | None = None

    def _measure(self) -> DeviceSnapshot:
        free, total = self.cuda.mem_get_info(self.device)
        return DeviceSnapshot(int(total), int(free), int(self.cuda.memory_reserved(self.device)))

    def snapshot(self) -> DeviceSnapshot:
        """`init_device`: gc, empty the cache, then the snapshot the budget is relative to."""
        gc.collect()
        self.cuda.empty_cache()
        self._init = self._measure()
        return self._init

    def multiprocessors(self) -> int | None:
        return self._multiprocessors

    def _allocated(self) -> int:
        gc.collect()
        return int(self.cuda.memory_allocated(self.device))

    def load_model(self, source: ModelSource) -> WeightsMeasurement:
        before = self._allocated()
        dtype = torch_dtype(source.dtype)
        if source.load_format == "auto":
            model = load_safetensors_model(
                source.checkpoint(), dtype, self.tensor_device, trust_remote_code=source.trust_remote_code
            )
        else:
            config = hf_config(source.config, trust_remote_code=source.trust_remote_code)
            model = build_dummy_model(config, dtype, self.tensor_device)
        self.cuda.synchronize(self.device)
        self._model = model
        return WeightsMeasurement(
            self._allocated() - before, parameter_bytes(model),
            "memory_allocated() increase across loading",
        )

    def profile(self, batch: ProfileBatch, multiprocessors: int,
                sampler: ProfileSampler = "v1_one_pass") -> ActivationMeasurement:
        """`memory_profiling` around the profile run."""
        assert self._model is not None, "load_model first"
        if self._init is None:
            self.snapshot()
        assert self._init is not None
        input_ids, logits_indices = make_inputs(batch, self.tensor_device)
        gc.collect()
        self.cuda.empty_cache()
        self.cuda.reset_peak_memory_stats(self.device)
        before_peak = _peak(self.cuda, self.device)
        before_allocated = self._allocated()
        with torch.inference_mode():
            step = profile_step(self._model, input_ids, logits_indices, multiprocessors, sampler)
        self.cuda.synchronize(self.device)
        gc.collect()
        self.cuda.empty_cache()
        after_peak = _peak(self.cuda, self.device)
        retained = self._allocated() - before_allocated
        after = self._measure()
        del step.retained  # vLLM keeps these cached; the KV cache comes next here
        return ActivationMeasurement(
            after_peak - before_peak, after.non_torch_bytes - self._init.non_torch_bytes,
            "allocated_bytes.all.peak increase (non-torch: (total - free) - reserved, since start-up)",
            step.sampler, retained_bytes=retained, consumed_bytes=self._init.free_bytes - after.free_bytes,
        )

    def forward_peak(self, num_tokens: int) -> int:
        raise KvplanError("the cuda backend measures the CUDA-graph pool by capturing graphs (graph_samples)")

    def graph_samples(self, sizes: tuple[int, ...]) -> tuple[int, ...]:
        """Capture a graph of the forward at each size (largest first) into one throw-away pool and
        take the drop in free memory around each capture; the graphs are dropped afterwards."""
        assert self._model is not None, "load_model first"
        backbone, _ = backbone_and_lm_head(self._model)
        pool = self.cuda.graph_pool_handle()
        graphs, samples = [], []
        for size in sizes:
            input_ids = torch.zeros((1, size), dtype=torch.long, device=self.tensor_device)
            with torch.inference_mode():
                backbone(input_ids=input_ids, use_cache=False)   # warm-up outside the capture, as vLLM
            self.cuda.synchronize(self.device)
            gc.collect()
            self.cuda.empty_cache()
            free_before = int(self.cuda.mem_get_info(self.device)[0])
            graph = self.cuda.CUDAGraph()
            with torch.inference_mode(), self.cuda.graph(graph, pool=pool):
                backbone(input_ids=input_ids, use_cache=False)
            self.cuda.synchronize(self.device)
            samples.append(free_before - int(self.cuda.mem_get_info(self.device)[0]))
            graphs.append(graph)
        del graphs
        gc.collect()
        self.cuda.empty_cache()
        return tuple(samples)

    def release_model(self) -> None:
        self._model = None
        gc.collect()
        self.cuda.empty_cache()

    def allocate(self, config: KVCacheConfig, attention_backend: str) -> AllocationReport:
        before = self._allocated()
        pool = allocate_kv_cache(config, attention_backend, self.tensor_device)
        self.cuda.synchronize(self.device)
        committed = self._allocated() - before
        check = slot_mapping_check(pool)
        return AllocationReport(
            device=self.device_label, attention_backend=attention_backend, pool_bytes=pool.total_bytes,
            num_tensors=len(pool.raw), layouts=tuple(pool.layouts), real=True, committed_bytes=committed,
            check=check, check_pool_blocks=config.num_blocks,
            how="torch.zeros(int8) per KVCacheTensor on the GPU; committed = memory_allocated() growth",
            pool=pool,
        )
