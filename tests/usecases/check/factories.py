"""Tiny factories for check tests: specs written to a directory, the golden Qwen2 plan."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

from kvplan.semantics.releases import VLLM_0_17_1
from kvplan.usecases.check.spec import CheckSpec, load_spec
from kvplan.usecases.check.target import Target, plan_target
from kvplan.usecases.plan import PlanRequest

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples" / "checks"
QWEN = "Qwen/Qwen2-0.5B-Instruct"
# vLLM 0.17.1's worked example (docs/vllm/kv-semantics.md §2.6): 131,928 blocks of 24 x 8,192 bytes
GOLDEN_KV_BYTES = 25_938_100_224


def qwen_target(**knobs: object) -> Target:
    return plan_target(PlanRequest.of(model=QWEN, **{"kv_cache_memory_bytes": GOLDEN_KV_BYTES, "release": VLLM_0_17_1,
                                                  **knobs}))


def tiny_workload(**changes: object) -> dict:
    """A handful of requests on a small explicit pool, timed by a constant step time."""
    workload = {
        "schema_version": 1,
        "seed": 3,
        "engine": {"num_gpu_blocks": 64, "block_size": 16, "max_model_len": 1024, "max_num_seqs": 16},
        "timing": {"step_time_ms": 10},
        "classes": [{"name": "chat", "shared_prefix": {"name": "system", "tokens": 64},
                     "prompt_tokens": {"dist": "uniform", "min": 64, "max": 256}, "output_tokens": 64}],
        "arrival": {"process": "all_at_once", "count": 24},
    }
    workload.update(changes)
    return workload


def spec_writer(directory: Path) -> Callable[..., CheckSpec]:
    """Write a TOML spec (and any JSON side files) into `directory` and load it."""

    def write(text: str, files: dict[str, object] | None = None, name: str = "spec.toml") -> CheckSpec:
        for relative, content in (files or {}).items():
            path = directory / relative
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(content if isinstance(content, str) else json.dumps(content), encoding="utf-8")
        (directory / name).write_text(text, encoding="utf-8")
        return load_spec(directory / name)

    return write
