"""The input formats' JSON Schemas (docs/schemas/input/) are kvplan's own descriptions published:
up to date, valid draft 2020-12, accepting every example the repository ships, and refusing what
kvplan refuses for a type or a range."""

from __future__ import annotations

import importlib.util
import json
import tomllib
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from kvplan.errors import KvplanError
from kvplan.schema import check_document
from kvplan.semantics.engine.trace_format import TRACE
from kvplan.usecases.check.spec_format import SPEC
from kvplan.usecases.simulate.workload_format import WORKLOAD
from kvplan.usecases.sweep.grid_format import GRID

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = REPO / "docs" / "schemas" / "input"
TRACES = sorted((REPO / "tests" / "data" / "traces").glob("*.json"))
WORKLOADS = sorted([*(REPO / "examples" / "workloads").glob("*.json"),
                    *(REPO / "examples" / "checks" / "workloads").glob("*.json")])
SPECS = sorted((REPO / "examples" / "checks").glob("*.toml"))
GRIDS = sorted((REPO / "examples" / "sweeps").glob("*.toml"))


def generator() -> Any:
    spec = importlib.util.spec_from_file_location("gen_schemas", REPO / "scripts" / "gen_schemas.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def validator(name: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((SCHEMAS / f"{name}.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def test_published_schemas_and_tables_are_up_to_date() -> None:
    stale = [str(path.relative_to(REPO)) for path, text in generator().expected_files().items()
             if not path.exists() or path.read_text(encoding="utf-8") != text]
    assert not stale, f"out of date: {stale}; run `.venv/bin/python scripts/gen_schemas.py`"


@pytest.mark.parametrize("path", TRACES, ids=lambda path: path.name)
def test_every_golden_trace_validates(path: Path) -> None:
    validator("trace").validate(json.loads(path.read_text()))


@pytest.mark.parametrize("path", WORKLOADS, ids=lambda path: path.name)
def test_every_example_workload_validates(path: Path) -> None:
    validator("workload").validate(json.loads(path.read_text()))


@pytest.mark.parametrize("path", SPECS, ids=lambda path: path.name)
def test_every_example_spec_validates(path: Path) -> None:
    validator("check-spec").validate(tomllib.loads(path.read_text()))


@pytest.mark.parametrize("path", GRIDS, ids=lambda path: path.name)
def test_every_example_grid_validates(path: Path) -> None:
    validator("sweep-grid").validate(tomllib.loads(path.read_text()))


BASE_WORKLOAD = {"schema_version": 1, "engine": {"num_gpu_blocks": 64}, "timing": {"step_time_ms": 5},
                 "classes": [{"prompt_tokens": {"dist": "lognormal", "mean": 100, "std": 40}, "output_tokens": 8}],
                 "arrival": {"process": "poisson", "rate": 5, "count": 10}}
BASE_TRACE = {"config": {"num_gpu_blocks": 14},
              "requests": [{"request_id": "r0", "prompt_token_ids": [1, 2, 3], "max_tokens": 4}]}
BASE_GRID = {"commands": ["plan"], "axes": {"models": ["m"], "gpus": ["l4-24gb"]}}
BASE_SPEC = {"target": {"model": "m", "kv_cache_memory": "1GiB"}, "assert": [{"fits": True, "min_kv_tokens": 10}]}


def _with(document: dict[str, Any], path: tuple[str | int, ...], value: Any) -> dict[str, Any]:
    changed = json.loads(json.dumps(document))
    node: Any = changed
    for key in path[:-1]:
        node = node[key]
    node[path[-1]] = value
    return changed


@pytest.mark.parametrize(("name", "kind", "base", "path", "value"), [
    ("workload", WORKLOAD, BASE_WORKLOAD, ("engine", "num_gpu_blocks"), 2**70),
    ("workload", WORKLOAD, BASE_WORKLOAD, ("engine", "num_gpu_blocks"), 1),
    ("workload", WORKLOAD, BASE_WORKLOAD, ("engine", "block_size"), 12),
    ("workload", WORKLOAD, BASE_WORKLOAD, ("engine", "kv_cache_memory"), "1,5GiB"),
    ("workload", WORKLOAD, BASE_WORKLOAD, ("engine", "max_num_seq"), 8),
    ("workload", WORKLOAD, BASE_WORKLOAD, ("timing", "step_time_ms"), 0),
    ("workload", WORKLOAD, BASE_WORKLOAD, ("classes", 0, "prompt_tokens", "std"), 1e300),
    ("workload", WORKLOAD, BASE_WORKLOAD, ("classes", 0, "prompt_tokens", "dist"), "zipf"),
    ("workload", WORKLOAD, BASE_WORKLOAD, ("classes", 0, "output_tokens"), 0),
    ("workload", WORKLOAD, BASE_WORKLOAD, ("arrival", "count"), 10**12),
    ("workload", WORKLOAD, BASE_WORKLOAD, ("arrival", "rate"), "fast"),
    ("workload", WORKLOAD, BASE_WORKLOAD, ("schema_version",), 2),
    ("trace", TRACE, BASE_TRACE, ("requests", 0, "prefix_id"), 2**70),
    ("trace", TRACE, BASE_TRACE, ("requests", 0, "arrival_step"), 10**12),
    ("trace", TRACE, BASE_TRACE, ("requests", 0, "prompt_token_ids", 0), -1),
    ("trace", TRACE, BASE_TRACE, ("requests", 0, "max_token"), 4),
    ("trace", TRACE, BASE_TRACE, ("config", "enable_prefix_caching"), "yes"),
    ("check-spec", SPEC, BASE_SPEC, ("assert", 0, "fits"), "yes"),
    ("check-spec", SPEC, BASE_SPEC, ("assert", 0, "min_kv_tokens"), 1.5),
    ("check-spec", SPEC, BASE_SPEC, ("target", "kv_cache_memory"), 10**30),
    ("check-spec", SPEC, BASE_SPEC, ("target", "gpu_memory_utilization"), 1.5),
    ("check-spec", SPEC, BASE_SPEC, ("target", "trust_remote_code"), True),
    ("check-spec", SPEC, BASE_SPEC, ("assert",), []),
    ("sweep-grid", GRID, BASE_GRID, ("axes", "tensor_parallel_size"), [2**70]),
    ("sweep-grid", GRID, BASE_GRID, ("axes", "kv_cache_memory"), ["1,5GiB"]),
    ("sweep-grid", GRID, BASE_GRID, ("axes", "block_size"), [12]),
    ("sweep-grid", GRID, BASE_GRID, ("axes", "vllm_releases"), ["0.10.0"]),
    ("sweep-grid", GRID, BASE_GRID, ("commands",), ["replay"]),
    ("sweep-grid", GRID, BASE_GRID, ("axes", "models"), []),
])
def test_kvplan_and_the_schema_refuse_the_same(name: str, kind: Any, base: dict[str, Any],
                                                path: tuple[str | int, ...], value: Any) -> None:
    schema = validator(name)
    check_document(kind, base, name)          # the base is fine for both
    schema.validate(base)
    bad = _with(base, path, value)
    with pytest.raises(KvplanError):
        check_document(kind, bad, name)
    assert not schema.is_valid(bad)
