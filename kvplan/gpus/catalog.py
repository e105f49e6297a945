"""The bundled GPU table: the memory total vLLM multiplies by the utilisation, and speeds.

`total_bytes` is what `torch.cuda.mem_get_info()[1]` reports. Where no exact byte count was
found, the torch total known to the MiB (SOURCES.md section 4) is used, else the nvidia-smi
total; such figures are marked approximate (totals also move a little with the driver)."""

from __future__ import annotations

import csv
import difflib
import re
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


# words of a GPU's name that tell no two entries apart (nvidia-smi prints "NVIDIA L4", "Tesla T4")
_VENDOR_WORDS = frozenset({"nvidia", "tesla", "geforce", "amd", "instinct", "gpu"})


def _words(text: str) -> frozenset[str]:
    """The words of a key or a name, lowercase, without the vendor's: "NVIDIA A100-SXM4-80GB" ->
    {a100, sxm4, 80gb}; a size's "80 GB" reads as "80gb"."""
    spaced = re.sub(r"(\d+)\s+(gb|g)\b", r"\1gb", text.lower())
    return frozenset(word for word in re.split(r"[^a-z0-9]+", spaced) if word and word not in _VENDOR_WORDS)


def _aliases(gpu: GpuSpec) -> frozenset[str]:
    """Every word a user may give for this GPU: its key's, its name's, and the SXM4/SXM5 of a
    name read as the key's SXM."""
    words = _words(gpu.key) | _words(gpu.name)
    return words | {re.sub(r"^(sxm)\d$", r"\1", word) for word in words}


def _listing(keys: list[str]) -> str:
    gpus = _catalog()
    return ", ".join(f"{key} ({gpus[key].name}, {gpus[key].memory_gib_marketed:g} GB)" for key in keys)


def get_gpu(key: str) -> GpuSpec:
    """The catalog entry `key` names: its key, a unique prefix of a key, the name nvidia-smi
    prints (`nvidia-smi --query-gpu=name`: "NVIDIA H100 80GB HBM3"), or words every one of which
    belongs to one GPU only ("L4", "H100 SXM", "A100 80GB"); words that fit several list them."""
    gpus = _catalog()
    wanted = " ".join(key.split()).lower()
    if not wanted:
        raise KvplanError("--gpu is empty; `kvplan gpus` lists the catalog")
    if wanted in gpus:
        return gpus[wanted]
    by_name = [k for k, gpu in gpus.items() if " ".join(gpu.name.split()).lower() == wanted]
    if len(by_name) == 1:
        return gpus[by_name[0]]
    words = _words(wanted)
    matching = [k for k, gpu in gpus.items() if words and words <= _aliases(gpu)]
    if len(matching) == 1:
        return gpus[matching[0]]
    close = matching or [k for k in gpus if k.startswith(wanted)] or [k for k in gpus if wanted in k]
    if len(close) == 1:
        return gpus[close[0]]
    if close:
        raise KvplanError(f"GPU {key!r} names {len(close)} GPUs of the catalog: {_listing(close)}; give one key")
    spelled = difflib.get_close_matches(wanted, list(gpus), n=3, cutoff=0.6)
    hint = f" (did you mean {', '.join(spelled)}?)" if spelled else ""
    raise KvplanError(
        f"unknown GPU {key!r}{hint}; `kvplan gpus` lists the catalog, or give --gpu-memory 80GiB"
    )
