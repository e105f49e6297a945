"""The bundled GPU table: the memory total vLLM multiplies by the utilisation, and speeds.

`total_bytes` is what `torch.cuda.mem_get_info()[1]` reports. Where no exact byte count was
found, the torch total known to the MiB (SOURCES.md section 4) is used, else the nvidia-smi
total; such figures are marked approximate (totals also move a little with the driver)."""

from __future__ import annotations

import csv
from dataclasses import dataclass
from functools import cache
from importlib import resources

from kvplan.errors import KvplanError

DEFAULT_GPU = "h100-sxm-80gb"
MIB = 1 << 20


@dataclass(frozen=True)
class GpuSpec:
    key: str
    name: str
    vendor: str
    memory_gib_marketed: float
    total_bytes: int
    total_is_approximate: bool
    total_source: str
    bf16_tflops: float | None
    fp8_tflops: float | None
    bandwidth_gbps: float | None
    compute_capability: tuple[int, int] | None   # None for AMD (gfx targets)
    arch: str
    # non-torch memory vLLM's profile adds (cuBLAS/NCCL workspaces, attention buffers); empty until
    # measured on that GPU with `kvplan profile --backend cuda` (no sourced value exists yet)
    non_torch_bytes: int | None = None
    # streaming multiprocessors (NVIDIA) or compute units (AMD); they size the dummy sampler's
    # top-k/top-p scratch buffer, which vLLM reads from the device
    multiprocessors: int | None = None

    @property
    def memory_gib(self) -> float:
        return self.total_bytes / 2**30


def _float_or_none(text: str) -> float | None:
    return float(text) if text.strip() else None


def _capability(text: str) -> tuple[int, int] | None:
    if not text or text.startswith("gfx"):
        return None
    major, minor = text.split(".")
    return int(major), int(minor)


def _read_csv(name: str) -> list[dict[str, str]]:
    with resources.files("kvplan.data.gpus").joinpath(name).open(encoding="utf-8") as handle:
        return list(csv.DictReader(handle))


@cache
def _catalog() -> dict[str, GpuSpec]:
    torch_mib = {row["key"]: int(row["torch_total_mib"]) for row in _read_csv("torch_totals_mib.csv")}
    gpus = {}
    for row in _read_csv("gpus.csv"):
        key = row["key"]
        if row["reported_total_bytes_torch"]:
            total, approximate, source = int(row["reported_total_bytes_torch"]), False, "torch total (exact)"
        elif key in torch_mib:
            total, approximate, source = torch_mib[key] * MIB, True, "torch total to the MiB"
        elif row["reported_total_mib"]:
            total, approximate, source = int(row["reported_total_mib"]) * MIB, True, "nvidia-smi total"
        else:
            total = int(float(row["marketed_memory_gb"]) * 1000**3)
            approximate, source = True, "marketed capacity"
        gpus[key] = GpuSpec(
            key=key,
            name=row["name"],
            vendor=row["vendor"],
            memory_gib_marketed=float(row["marketed_memory_gb"]),
            total_bytes=total,
            total_is_approximate=approximate,
            total_source=source,
            bf16_tflops=_float_or_none(row["bf16_dense_tflops"]),
            fp8_tflops=_float_or_none(row["fp8_dense_tflops"]),
            bandwidth_gbps=_float_or_none(row["memory_bandwidth_gbps"]),
            compute_capability=_capability(row["compute_capability"]),
            arch=row["compute_capability"],
            non_torch_bytes=int(row["non_torch_bytes"]) if row["non_torch_bytes"].strip() else None,
            multiprocessors=int(row["multiprocessors"]) if row["multiprocessors"].strip() else None,
        )
    return gpus


def list_gpus() -> list[GpuSpec]:
    return list(_catalog().values())


def get_gpu(key: str) -> GpuSpec:
    gpus = _catalog()
    wanted = key.strip().lower()
    if not wanted:
        raise KvplanError("--gpu is empty; `kvplan gpus` lists the catalog")
    if wanted in gpus:
        return gpus[wanted]
    close = [k for k in gpus if k.startswith(wanted)] or [k for k in gpus if wanted in k]
    if len(close) == 1:
        return gpus[close[0]]
    hint = f" (did you mean {', '.join(close)}?)" if close else ""
    raise KvplanError(
        f"unknown GPU {key!r}{hint}; `kvplan gpus` lists the catalog, or give --gpu-memory 80GiB"
    )
