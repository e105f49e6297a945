"""The cpu backend: vLLM's steps with real tensors in RAM, to validate the prediction on small
models. Weights are the parameter and buffer storages (never RSS: safetensors are mmapped and
page in lazily); the activation peak comes from the live-tensor tracker, with the process's
RSS high-water mark (VmHWM) as a cross-check; the KV tensors are really allocated and zeroed,
after a check that they fit in the RAM that is free (never into swap)."""

from __future__ import annotations

import contextlib
import ctypes
import gc
from pathlib import Path

import torch

from kvplan.errors import DoesNotFitError, KvplanError
from kvplan.hostmem import available_memory_bytes
from kvplan.measure.backend import (
    ActivationMeasurement,
    AllocationReport,
    BackendName,
    ModelSource,
    PlannedGpu,
    WeightsMeasurement,
)
from kvplan.measure.dummy_run import make_inputs, profile_step
from kvplan.measure.hf import (
    build_dummy_model,
    build_meta_model,
    hf_config,
    load_safetensors_model,
    parameter_bytes,
    safetensors_files,
    torch_dtype,
    weight_tensors,
    weights_bytes,
)
from kvplan.measure.kv_tensors import allocate_kv_cache, slot_mapping_check
from kvplan.measure.tracker import CUDA_ALLOCATOR_ROUNDING, LiveBytes
from kvplan.semantics.kv.specs import KVCacheConfig
from kvplan.semantics.memory.profile_batch import ProfileBatch
from kvplan.semantics.releases import ProfileSampler
from kvplan.units import format_gib, round_up

_STATUS = Path("/proc/self/status")
_CLEAR_REFS = Path("/proc/self/clear_refs")


def _kib_field(path: Path, name: str) -> int | None:
    try:
        for line in path.read_text().splitlines():
            if line.startswith(name + ":"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def rss_bytes() -> int | None:
    return _kib_field(_STATUS, "VmRSS")


def ram_available_bytes() -> int | None:
    """RAM this process may still take: MemAvailable, and the room under its cgroup limits."""
    return available_memory_bytes()


def reset_high_water_mark() -> bool:
    """Writing 5 to clear_refs resets VmHWM to the current RSS (Linux >= 4.0)."""
    try:
        _CLEAR_REFS.write_text("5")
    except OSError:
        return False
    return True


def high_water_mark_bytes() -> int | None:
    return _kib_field(_STATUS, "VmHWM")


def _trim_heap() -> None:
    gc.collect()
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def check_pool_fits_ram(pool_bytes: int, available: int | None) -> None:
    """Refuse a pool larger than the free RAM: it would swap or be killed, not measure."""
    if available is not None and pool_bytes > available:
        raise KvplanError(
            f"the KV cache pool of {format_gib(pool_bytes)} GiB does not fit in the {format_gib(available)} GiB "
            "of RAM that is free: plan against a smaller device with --gpu-memory (e.g. 4GiB), or pass "
            "--no-allocate"
        )


def check_weights_fit_ram(weights: int, available: int | None) -> None:
    if available is not None and weights > available:
        raise KvplanError(
            f"the model's {format_gib(weights)} GiB of weights do not fit in the {format_gib(available)} GiB of RAM "
            "that is free (the host's, within this process's memory limit): use --backend fake to predict it "
            "without memory"
        )


def check_weights_fit_device(weights: int, total: int, device: str) -> None:
    """Weights larger than the whole device would fail vLLM's load: a finding (exit 1), found before
    a byte of them is allocated."""
    if weights > total:
        raise DoesNotFitError(
            f"the model's {format_gib(weights)} GiB of weights do not fit in the {format_gib(total)} GiB of {device}: "
            "vLLM would run out of memory loading them; give a larger --gpu or --gpu-memory, or more -tp"
        )


def _checkpoint_bytes(directory: Path) -> int:
    return sum(path.stat().st_size for path in safetensors_files(directory))


class CpuBackend(PlannedGpu):
    name: BackendName = "cpu"
    predicted = False

    def __init__(self, total_bytes: int, device_label: str, multiprocessors: int | None = None) -> None:
        super().__init__(total_bytes, device_label, multiprocessors)
        self._model: torch.nn.Module | None = None

    def load_model(self, source: ModelSource) -> WeightsMeasurement:
        dtype = torch_dtype(source.dtype)
        if source.load_format == "auto":
            checkpoint = source.checkpoint()
            planned = _checkpoint_bytes(checkpoint)
            check_weights_fit_device(planned, self.total_bytes, self.device_label)
            check_weights_fit_ram(planned, ram_available_bytes())
            model = load_safetensors_model(checkpoint, dtype, "cpu", trust_remote_code=source.trust_remote_code)
            how = "safetensors checkpoint: parameter and buffer storages"
        else:
            config = hf_config(source.config, trust_remote_code=source.trust_remote_code)
            planned = weights_bytes(build_meta_model(config, dtype))
            check_weights_fit_device(planned, self.total_bytes, self.device_label)
            check_weights_fit_ram(planned, ram_available_bytes())
            model = build_dummy_model(config, dtype, "cpu")
            how = "dummy weights: parameter and buffer storages"
        with torch.no_grad():
            for tensor in weight_tensors(model):
                # mmapped weights page in on first touch: do it now, not during the profile run
                tensor.sum()
        self._model = model
        return WeightsMeasurement(
            weights_bytes(model, CUDA_ALLOCATOR_ROUNDING), parameter_bytes(model),
            how + ", 512-B rounded",
        )

    def profile(self, batch: ProfileBatch, multiprocessors: int,
                sampler: ProfileSampler = "v1_one_pass") -> ActivationMeasurement:
        assert self._model is not None, "load_model first"
        input_ids, logits_indices = make_inputs(batch, "cpu")
        _trim_heap()
        baseline = rss_bytes()
        hwm_reset = reset_high_water_mark()
        with torch.no_grad(), LiveBytes(CUDA_ALLOCATOR_ROUNDING) as live:
            live.register_existing([*weight_tensors(self._model), input_ids, logits_indices])
            step = profile_step(self._model, input_ids, logits_indices, multiprocessors, sampler)
        checks: dict[str, int] = {}
        peak_rss = high_water_mark_bytes()
        if hwm_reset and baseline is not None and peak_rss is not None:
            # RSS adds glibc arenas, oneDNN scratch and CPU attention buffers to the tensors
            checks["vmhwm_increase_bytes"] = peak_rss - baseline
        return ActivationMeasurement(
            live.peak, None,
            "real CPU forward: live-tensor peak, 512-B rounded (VmHWM cross-check)",
            step.sampler, checks, retained_bytes=round_up(step.retained_bytes, CUDA_ALLOCATOR_ROUNDING),
        )

    def forward_peak(self, num_tokens: int) -> int:
        assert self._model is not None, "load_model first"
        input_ids, logits_indices = make_inputs(ProfileBatch(num_tokens, num_tokens), "cpu")
        with torch.no_grad(), LiveBytes(CUDA_ALLOCATOR_ROUNDING) as live:
            live.register_existing([*weight_tensors(self._model), input_ids, logits_indices])
            profile_step(self._model, input_ids, logits_indices, 1, None)
        return live.peak

    def graph_samples(self, sizes: tuple[int, ...]) -> tuple[int, ...]:
        raise KvplanError("the cpu backend captures no CUDA graphs; their pool is predicted")

    def release_model(self) -> None:
        self._model = None
        _trim_heap()

    def allocate(self, config: KVCacheConfig, attention_backend: str) -> AllocationReport:
        check_pool_fits_ram(config.pool_bytes, ram_available_bytes())
        before = rss_bytes()
        pool = allocate_kv_cache(config, attention_backend, "cpu")
        after = rss_bytes()
        check = slot_mapping_check(pool)
        committed = after - before if before is not None and after is not None else None
        return AllocationReport(
            device="cpu", attention_backend=attention_backend, pool_bytes=pool.total_bytes,
            num_tensors=len(pool.raw), layouts=tuple(pool.layouts), real=True, committed_bytes=committed,
            check=check, check_pool_blocks=config.num_blocks,
            how="torch.zeros(int8) per KVCacheTensor in RAM; committed = RSS growth",
            pool=pool,
        )
