"""The fake backend's prediction against a real CPU forward of Qwen2-0.5B's shapes (within 1 %).
The fake profile's speed is a target of `benchmarks/targets.py`."""

from __future__ import annotations

import sys
import time
from pathlib import Path
from typing import Any

QWEN = "Qwen/Qwen2-0.5B-Instruct"


def _fake_vs_cpu(tokens: int = 1024, seqs: int = 4) -> dict[str, Any]:
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    from kvplan.measure.backend import ModelSource
    from kvplan.measure.cpu import CpuBackend
    from kvplan.measure.fake import FakeBackend
    from kvplan.semantics.memory.profile_batch import profile_batch
    from kvplan.sources.models import resolve_config

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
    return {f"qwen2_0.5b_1024tok_{key}": value for key, value in _fake_vs_cpu().items()}


if __name__ == "__main__":
    for name, value in run().items():
        print(f"{name:<50} {value}")
