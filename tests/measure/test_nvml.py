"""NVML degrades to a reason for every error class and always shuts down after a good init."""

from __future__ import annotations

import sys
from types import SimpleNamespace

import pynvml
import pytest

from kvplan.measure.nvml import query_nvml

ERRORS = [
    (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, "no NVIDIA driver"),
    (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, "driver is not loaded"),
    (pynvml.NVML_ERROR_NO_PERMISSION, "no permission"),
    (pynvml.NVML_ERROR_NOT_SUPPORTED, "does not support"),
    (pynvml.NVML_ERROR_GPU_IS_LOST, "GPU is lost"),
    (pynvml.NVML_ERROR_UNINITIALIZED, "not initialised"),
    (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, "versions differ"),
    (pynvml.NVML_ERROR_UNKNOWN, "NVML error: Unknown Error"),
]


class FakeNvml:
    """Records init/shutdown; the device answers come from `memory` and `processes`."""

    def __init__(self, monkeypatch, processes=(), process_error=None, device_error=None):
        self.inits = self.shutdowns = 0
        self.processes, self.process_error, self.device_error = processes, process_error, device_error
        for name in ("nvmlInit", "nvmlShutdown", "nvmlDeviceGetHandleByIndex", "nvmlDeviceGetMemoryInfo",
                     "nvmlDeviceGetName", "nvmlSystemGetDriverVersion", "nvmlDeviceGetComputeRunningProcesses"):
            monkeypatch.setattr(pynvml, name, getattr(self, name))

    def nvmlInit(self):
        self.inits += 1

    def nvmlShutdown(self):
        self.shutdowns += 1

    def nvmlDeviceGetHandleByIndex(self, index):
        if self.device_error is not None:
            raise pynvml.NVMLError(self.device_error)
        return ("handle", index)

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(total=150_754_820_096, free=140_000_000_000, used=10_754_820_096)

    def nvmlDeviceGetName(self, handle):
        return b"NVIDIA H200"

    def nvmlSystemGetDriverVersion(self):
        return "570.133.20"

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        if self.process_error is not None:
            raise pynvml.NVMLError(self.process_error)
        return self.processes


@pytest.mark.parametrize(("code", "words"), ERRORS)
def test_init_errors_become_a_reason(monkeypatch, code, words):
    def failing_init():
        raise pynvml.NVMLError(code)

    monkeypatch.setattr(pynvml, "nvmlInit", failing_init)
    report = query_nvml(0)
    assert not report.available and report.device is None
    assert words in report.reason
    assert report.warnings() == () and report.other_processes_bytes() == 0


def test_library_that_cannot_load_is_a_reason(monkeypatch):
    def failing_init():
        raise OSError("libnvidia-ml.so.1: cannot open shared object file")

    monkeypatch.setattr(pynvml, "nvmlInit", failing_init)
    assert "cannot be loaded" in query_nvml(0).reason


def test_missing_package_is_a_reason(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert "nvidia-ml-py is not installed" in query_nvml(0).reason


def test_device_answers_and_other_processes_warn(monkeypatch):
    processes = [SimpleNamespace(pid=1234, usedGpuMemory=8 << 30), SimpleNamespace(pid=99, usedGpuMemory=None)]
    nvml = FakeNvml(monkeypatch, processes=processes)
    report = query_nvml(0)
    assert nvml.inits == nvml.shutdowns == 1
    device = report.device
    assert device.name == "NVIDIA H200" and device.driver_version == "570.133.20"
    assert device.total_bytes == 150_754_820_096
    assert report.other_processes_bytes(own_pid=99) == 8 << 30
    (warning,) = report.warnings(own_pid=99)
    assert "other processes hold 8.0 GiB on GPU 0" in warning
    assert report.warnings(own_pid=1234) == ()


def test_process_list_errors_keep_the_device(monkeypatch):
    FakeNvml(monkeypatch, process_error=pynvml.NVML_ERROR_NO_PERMISSION)
    report = query_nvml(0)
    assert report.available and report.device.processes == ()
    assert "no permission" in report.device.processes_note


def test_device_errors_still_shut_down(monkeypatch):
    nvml = FakeNvml(monkeypatch, device_error=pynvml.NVML_ERROR_INVALID_ARGUMENT)
    report = query_nvml(7)
    assert not report.available and "no GPU with that index" in report.reason
    assert nvml.shutdowns == 1
