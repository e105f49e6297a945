"""Non-torch memory predicted from real vLLM start-up logs (issue 24, item 3): what vLLM's profile
adds outside torch's allocator (cuBLAS workspaces, NCCL and custom all-reduce buffers under TP,
attention-backend buffers; docs/vllm/kv-semantics.md §2), which no backend without a GPU measures.
scripts/extract_non_torch.py reads it from the logs in tests/data/logs into
kvplan/data/accuracy/non_torch_from_logs.json, one figure per (GPU, tensor-parallel size).

The rule for a setup, first that applies (docs/accuracy.md, "Non-torch memory"):
1. a log of that GPU at that TP;
2. else a log of a GPU of the same family (vendor and compute capability: the same kernels and
   libraries) at that TP;
3. else, under TP > 1, the same GPU (or family) at the nearest measured TP > 1 (ties: the lower);
   under TP 1 a TP > 1 figure never applies (it holds the NCCL buffers TP 1 does not have);
4. else, under TP > 1, the TP 1 figure, said to be a lower bound (no NCCL buffers in it);
5. else none: the caller takes 0 and warns."""

from __future__ import annotations

import json
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from functools import cache
from pathlib import Path
from typing import Any

from kvplan.gpus.catalog import GpuSpec, get_gpu
from kvplan.semantics.releases import Release

MEASURED = Path(__file__).resolve().parents[1] / "data" / "accuracy" / "non_torch_from_logs.json"
SOURCE_FILE = "kvplan/data/accuracy/non_torch_from_logs.json"


@dataclass(frozen=True)
class LoggedNonTorch:
    """The non-torch memory the real logs of one GPU at one TP logged (their median)."""

    gpu: str
    vendor: str
    compute_capability: str | None
    tensor_parallel_size: int
    non_torch_bytes: int
    vllm_versions: tuple[str, ...]
    non_kv_memory: tuple[str, ...]       # the release formula each log was read with (its rules)
    rules: tuple[str, ...]
    logs: tuple[str, ...]


@dataclass(frozen=True)
class NonTorchPrediction:
    non_torch_bytes: int
    source: str                          # where it came from, in words, with the log
    measured: LoggedNonTorch


def table_of(readings: Sequence[Mapping[str, Any]]) -> tuple[LoggedNonTorch, ...]:
    """One row per (GPU, TP) of the logs' readings: their median (scripts/extract_non_torch.py
    writes it; the accuracy measurement rebuilds it with one log left out)."""
    table = []
    for gpu_key, tp in sorted({(str(row["gpu"]), int(row["tensor_parallel_size"])) for row in readings}):
        rows = [row for row in readings if row["gpu"] == gpu_key and row["tensor_parallel_size"] == tp]
        gpu = get_gpu(gpu_key)
        table.append(LoggedNonTorch(
            gpu=gpu_key, vendor=gpu.vendor, compute_capability=_capability(gpu), tensor_parallel_size=tp,
            non_torch_bytes=int(statistics.median(int(row["non_torch_bytes"]) for row in rows)),
            vllm_versions=tuple(sorted({str(row["vllm_version"]) for row in rows})),
            non_kv_memory=tuple(sorted({str(row["non_kv_memory"]) for row in rows})),
            rules=tuple(sorted({str(row["rules"]) for row in rows})), logs=tuple(str(row["log"]) for row in rows)))
    return tuple(table)


@cache
def logged_readings() -> tuple[dict[str, Any], ...]:
    """Each real log's reading (kvplan/data/accuracy/non_torch_from_logs.json)."""
    return tuple(json.loads(MEASURED.read_text())["readings"])


@cache
def logged_non_torch() -> tuple[LoggedNonTorch, ...]:
    document = json.loads(MEASURED.read_text())
    return tuple(LoggedNonTorch(
        gpu=row["gpu"], vendor=row["vendor"], compute_capability=row["compute_capability"],
        tensor_parallel_size=row["tensor_parallel_size"], non_torch_bytes=row["non_torch_bytes"],
        vllm_versions=tuple(row["vllm_versions"]), non_kv_memory=tuple(row["non_kv_memory"]),
        rules=tuple(row["rules"]), logs=tuple(row["logs"])) for row in document["measured"])


def table_record(table: Sequence[LoggedNonTorch]) -> list[dict[str, Any]]:
    """The table as the data file holds it."""
    return [asdict(row) for row in table]


def _capability(gpu: GpuSpec) -> str | None:
    return None if gpu.compute_capability is None else ".".join(map(str, gpu.compute_capability))


def _exact(rows: list[LoggedNonTorch], tensor_parallel_size: int) -> LoggedNonTorch | None:
    return next((row for row in rows if row.tensor_parallel_size == tensor_parallel_size), None)


def _nearest_sharded(rows: list[LoggedNonTorch], tensor_parallel_size: int) -> LoggedNonTorch | None:
    # a TP > 1 figure holds NCCL buffers, which TP 1 has none of
    sharded = [row for row in rows if row.tensor_parallel_size > 1]
    if tensor_parallel_size == 1 or not sharded:
        return None
    return min(sharded, key=lambda row: (abs(row.tensor_parallel_size - tensor_parallel_size),
                                         row.tensor_parallel_size))


def _single(rows: list[LoggedNonTorch], tensor_parallel_size: int) -> LoggedNonTorch | None:
    return None if tensor_parallel_size == 1 else _exact(rows, 1)


def predict_non_torch(gpu: GpuSpec, tensor_parallel_size: int, release: Release,
                      table: Sequence[LoggedNonTorch] | None = None) -> NonTorchPrediction | None:
    """The non-torch memory per GPU real logs give this setup, or None where no log applies (the
    rule of the module's docstring, step by step); `table`: another than the data file's."""
    rows = logged_non_torch() if table is None else table
    capability = _capability(gpu)
    own = [row for row in rows if row.gpu == gpu.key]
    family = [row for row in rows if row.gpu != gpu.key and capability is not None
              and row.vendor == gpu.vendor and row.compute_capability == capability]
    for pick in (_exact, _nearest_sharded, _single):
        for candidates in (own, family):
            row = pick(candidates, tensor_parallel_size)
            if row is not None:
                source = _source(row, gpu, tensor_parallel_size, release, lower_bound=pick is _single)
                return NonTorchPrediction(row.non_torch_bytes, source, row)
    return None


def _source(row: LoggedNonTorch, gpu: GpuSpec, tensor_parallel_size: int, release: Release,
            lower_bound: bool) -> str:
    logs = ("a real vLLM log" if len(row.logs) == 1 else f"the median of {len(row.logs)} real vLLM logs")
    where = f"{row.gpu} TP {row.tensor_parallel_size}"
    text = (f"predicted from {logs} of {where} (vLLM {', '.join(row.vllm_versions)}): {row.logs[0]}"
            + (f" and {len(row.logs) - 1} more ({SOURCE_FILE})" if len(row.logs) > 1 else ""))
    notes = []
    if row.gpu != gpu.key:
        notes.append(f"no log of {gpu.key}: the same family (compute capability {row.compute_capability})")
    if row.tensor_parallel_size != tensor_parallel_size:
        notes.append(f"no log at TP {tensor_parallel_size}"
                     + (": a lower bound, without the NCCL buffers TP > 1 adds" if lower_bound else ""))
    if release.non_kv_memory not in row.non_kv_memory:
        # the logs' releases measure the term after the cuBLAS handles exist; 0.33.0's formula
        # creates them before its baseline and counts the rest inside consumed memory
        # (docs/vllm/changes-0.33.md §1.1, §1.2): a few tens of MiB of difference
        notes.append(f"logged under {', '.join(row.rules)}'s formula; vLLM {release.version} counts it inside "
                     "consumed memory, cuBLAS handles in its baseline (docs/vllm/changes-0.33.md §1.1)")
    return text + "".join(f"; {note}" for note in notes)
