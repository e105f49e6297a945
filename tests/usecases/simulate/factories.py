"""Tiny workload factories for the simulation tests."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any


def mix(**overrides: Any) -> dict[str, Any]:
    """A small request mix on a small pool (64 blocks of 16 tokens, given so that the pool is the
    same under every release: 0.34.0's default block is 64), timed by a constant step."""
    document: dict[str, Any] = {
        "schema_version": 1,
        "seed": 11,
        "engine": {"num_gpu_blocks": 64, "block_size": 16, "max_num_seqs": 8, "max_num_batched_tokens": 256,
                   "max_model_len": 1024},
        "timing": {"step_time_ms": 10},
        "classes": [{"name": "chat", "prompt_tokens": {"dist": "uniform", "min": 20, "max": 120},
                     "output_tokens": {"dist": "uniform", "min": 4, "max": 40},
                     "shared_prefix": {"name": "system", "tokens": 64}}],
        "arrival": {"process": "poisson", "rate": 20.0, "count": 40},
    }
    document.update(overrides)
    return document


def write_workload(directory: Path, document: dict[str, Any], name: str = "workload.json") -> Path:
    path = directory / name
    path.write_text(json.dumps(document))
    return path
