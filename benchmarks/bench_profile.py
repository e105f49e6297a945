"""`kvplan profile` with the fake backend in cold processes (targets: an 8B model at 8192
batched tokens under 5 s and 600 MB RSS; a 70B model under 15 s), and the fake prediction
against a real CPU forward of Qwen2-0.5B's shapes (target: within 1 %)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

QWEN = "Qwen/Qwen2-0.5B-Instruct"


def _cold(args: list[str]) -> tuple[float, int, dict[str, Any] | None]:
    """Wall seconds, peak RSS bytes and the JSON record of one `kvplan ARGS --json` process."""
    start = time.perf_counter()
    child = subprocess.Popen(
        [sys.executable, "-m", "kvplan", *args, "--json"], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
    )
    out = child.stdout.read() if child.stdout else b""
    _pid, _status, usage = os.wait4(child.pid, 0)
    wall = time.perf_counter() - start
    try:
        record = json.loads(out)
    except json.JSONDecodeError:
        record = None
    return wall, usage.ru_maxrss * 1024, record


def _fake_profile(model: str, gpu: str, repeats: int) -> dict[str, float]:
    args = ["profile", "--model", model, "--backend", "fake", "--gpu", gpu, "--max-num-batched-tokens", "8192"]
    runs = [_cold(args) for _ in range(repeats)]
    walls = sorted(run[0] for run in runs)
    record = runs[-1][2] or {}
    return {
        "wall_median_s": walls[len(walls) // 2], "wall_max_s": walls[-1],
        "max_rss_mb": max(run[1] for run in runs) / 1e6,
        "activation_peak_bytes": record.get("activation_peak_bytes"), "num_blocks": record.get("num_blocks"),
    }


def _fake_vs_cpu(tokens: int = 1024, seqs: int = 4) -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from kvplan.measure.backend import ModelSource
    from kvplan.measure.cpu import CpuBackend
    from kvplan.measure.fake import FakeBackend
    from kvplan.semantics.memory.profile_batch import profile_batch
    from kvplan.semantics.models.resolve import resolve_config

    config = resolve_config(QWEN).config
    batch = profile_batch(tokens, seqs)
    figures: dict[str, Any] = {}
    for name, backend in (("fake", FakeBackend(1 << 34, "x")), ("cpu", CpuBackend(1 << 34, "x"))):
        start = time.perf_counter()
        backend.load_model(ModelSource(QWEN, config, "bfloat16"))
        measured = backend.profile(batch, 132)
        figures[f"{name}_peak_bytes"] = measured.activation_peak_bytes
        figures[f"{name}_seconds"] = time.perf_counter() - start
        figures.update({f"{name}_{key}": value for key, value in measured.cross_checks.items()})
        backend.release_model()
    figures["relative_difference"] = abs(figures["fake_peak_bytes"] - figures["cpu_peak_bytes"]) / figures[
        "cpu_peak_bytes"]
    return figures


def run() -> dict[str, Any]:
    results: dict[str, Any] = {}
    for key, value in _fake_profile("meta-llama/Llama-3.1-8B-Instruct", "h100-sxm-80gb", 3).items():
        results[f"fake_8b_{key}"] = value
    for key, value in _fake_profile("meta-llama/Llama-3.1-70B-Instruct", "b200-180gb", 2).items():
        results[f"fake_70b_{key}"] = value
    for key, value in _fake_vs_cpu().items():
        results[f"qwen2_0.5b_1024tok_{key}"] = value
    return results


if __name__ == "__main__":
    for name, value in run().items():
        print(f"{name:<50} {value}")
