"""NVML telemetry (the `pynvml` module of the nvidia-ml-py distribution): device name, driver,
total memory and other processes' usage. Optional and never the source of the plan: every
failure becomes a reason string, and `nvmlShutdown` always runs after a successful init."""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass
from typing import Any

from kvplan.units import format_gib

# why NVML said no, in words a user can act on (NVML return codes)
_REASONS = {
    1: "NVML is not initialised",
    2: "there is no GPU with that index",
    3: "the GPU does not support this query",
    4: "no permission to query the GPU (NVML: insufficient permissions)",
    9: "the NVIDIA driver is not loaded",
    12: "no NVIDIA driver on this machine (NVML library not found)",
    15: "the GPU is lost (fell off the bus); the host needs attention",
    17: "the operating system blocked the NVML request",
    18: "the NVML library and the kernel driver versions differ; reload the driver",
    28: "no GPU with that index was found",
}


def describe_nvml_error(error: Exception) -> str:
    code = getattr(error, "value", None)
    reason = _REASONS.get(code) if isinstance(code, int) else None
    return f"{reason} ({error})" if reason else f"NVML error: {error}"


@dataclass(frozen=True)
class GpuProcess:
    pid: int
    used_bytes: int | None   # None where the driver does not say (containers, MIG)


@dataclass(frozen=True)
class NvmlDevice:
    index: int
    name: str
    driver_version: str
    total_bytes: int
    used_bytes: int
    free_bytes: int
    processes: tuple[GpuProcess, ...]
    processes_note: str = ""


@dataclass(frozen=True)
class NvmlReport:
    device: NvmlDevice | None
    reason: str | None = None          # why there is no device information

    @property
    def available(self) -> bool:
        return self.device is not None

    def other_processes_bytes(self, own_pid: int | None = None) -> int:
        own = os.getpid() if own_pid is None else own_pid
        if self.device is None:
            return 0
        return sum(p.used_bytes or 0 for p in self.device.processes if p.pid != own)

    def warnings(self, own_pid: int | None = None) -> tuple[str, ...]:
        if self.device is None:
            return ()
        others = self.other_processes_bytes(own_pid)
        if not others:
            return ()
        return (
            f"other processes hold {format_gib(others)} GiB on GPU {self.device.index}: vLLM still asks for "
            "total x gpu_memory_utilization and refuses to start when less than that is free",
        )


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _processes(pynvml: Any, handle: Any) -> tuple[tuple[GpuProcess, ...], str]:
    try:
        running = pynvml.nvmlDeviceGetComputeRunningProcesses(handle)
    except pynvml.NVMLError as error:
        return (), f"process list unavailable: {describe_nvml_error(error)}"
    return tuple(GpuProcess(int(p.pid), getattr(p, "usedGpuMemory", None)) for p in running), ""


def query_nvml(index: int = 0) -> NvmlReport:
    """What NVML says about GPU `index`, or why it says nothing."""
    try:
        import pynvml
    except ImportError:
        return NvmlReport(None, "nvidia-ml-py is not installed (pip install nvidia-ml-py)")
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError as error:
        return NvmlReport(None, describe_nvml_error(error))
    except OSError as error:
        return NvmlReport(None, f"the NVML library cannot be loaded: {error}")
    try:
        handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        memory = pynvml.nvmlDeviceGetMemoryInfo(handle)
        processes, note = _processes(pynvml, handle)
        device = NvmlDevice(
            index=index,
            name=_text(pynvml.nvmlDeviceGetName(handle)),
            driver_version=_text(pynvml.nvmlSystemGetDriverVersion()),
            total_bytes=int(memory.total),
            used_bytes=int(memory.used),
            free_bytes=int(memory.free),
            processes=processes,
            processes_note=note,
        )
        return NvmlReport(device)
    except pynvml.NVMLError as error:
        return NvmlReport(None, describe_nvml_error(error))
    finally:
        with contextlib.suppress(pynvml.NVMLError):
            pynvml.nvmlShutdown()
