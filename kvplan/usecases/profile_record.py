"""The profile as JSON: the record `--json` prints and `--save` writes, with its provenance, and
the reading side that `simulate` and `check` use on machines without a GPU. This module never
imports torch: reading a saved profile is part of the simulation path.

Public API:
    PROFILE_SCHEMA_VERSION, PROFILE_KIND
    profile_record(result) -> dict            (the whole record, `provenance` included)
    knobs_sha256(knobs) -> str
    save_profile(record, path)                (refuses to overwrite anything but a kvplan profile)
    load_profile(path) -> dict                (exit 2 for a file that is not a profile kvplan reads)
    profile_mismatches(record, config_sha256=None, knobs=None) -> [reason, ...]"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import tempfile
from collections.abc import Mapping
from datetime import UTC, datetime
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvplan import VLLM_SEMANTICS, __version__
from kvplan.errors import KvplanError

if TYPE_CHECKING:
    from kvplan.usecases.profile import ProfileResult

PROFILE_SCHEMA_VERSION = 1
PROFILE_KIND = "kvplan.profile"


def knobs_sha256(knobs: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(knobs, sort_keys=True, default=str).encode()).hexdigest()


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _knobs(result: ProfileResult) -> dict[str, Any]:
    options = result.options
    knobs = dataclasses.asdict(options.request)
    knobs.update(
        backend=result.backend, load_format=options.load_format, attention_backend=options.attention_backend,
        allocate=options.allocate, non_torch_bytes=options.non_torch_bytes,
        cuda_graph_bytes=options.cuda_graph_bytes, cuda_context_bytes=options.cuda_context_bytes,
        device_index=options.device_index if result.backend == "cuda" else None,
    )
    return knobs


def _provenance(result: ProfileResult) -> dict[str, Any]:
    knobs = _knobs(result)
    gpu = result.gpu
    return {
        "kvplan_version": __version__,
        "vllm_semantics": VLLM_SEMANTICS,
        "model": result.setup.shape.model_id,
        "model_source": result.setup.resolved.source,
        "config_sha256": result.setup.resolved.sha256,
        "knobs": knobs,
        "knobs_sha256": knobs_sha256(knobs),
        "backend": result.backend,
        "predicted": result.predicted,
        "device": result.device_label,
        "gpu": None if gpu is None else gpu.key,
        "nvml_device": None if result.nvml is None or result.nvml.device is None else {
            "name": result.nvml.device.name, "driver_version": result.nvml.device.driver_version,
            "total_bytes": result.nvml.device.total_bytes,
        },
        "torch_version": _version("torch"),
        "transformers_version": _version("transformers"),
        "created_at": datetime.now(UTC).isoformat(timespec="seconds"),
    }


def _allocation(result: ProfileResult) -> dict[str, Any] | None:
    allocation = result.allocation
    if allocation is None:
        return None
    check = allocation.check
    return {
        "device": allocation.device,
        "attention_backend": allocation.attention_backend,
        "real": allocation.real,
        "pool_bytes": allocation.pool_bytes,
        "num_tensors": allocation.num_tensors,
        "committed_bytes": allocation.committed_bytes,
        "how": allocation.how,
        "seconds": round(allocation.seconds, 6),
        "slot_mapping_check": {
            "passed": check.passed, "pool_blocks": allocation.check_pool_blocks,
            "layers_checked": check.layers_checked, "tokens": check.tokens,
            "block_table": list(check.block_table), "first_slots": list(check.first_slots),
            "view_round_trip": check.view_round_trip, "raw_bytes_match": check.raw_bytes_match,
            "untouched_blocks_zero": check.untouched_blocks_zero, "shared_storage": check.shared_storage,
            "detail": check.detail,
        },
        "layers": [
            {
                "layer": layout.layer_name, "tensor": layout.tensor_index, "kind": layout.kind,
                "dtype": layout.dtype, "shapes": [list(s) for s in layout.shapes],
                "strides": [list(s) for s in layout.strides], "kernel_block_size": layout.kernel_block_size,
            }
            for layout in allocation.layouts
        ],
    }


def _nvml(result: ProfileResult) -> dict[str, Any] | None:
    report = result.nvml
    if report is None:
        return None
    device = report.device
    if device is None:
        return {"available": False, "reason": report.reason}
    return {
        "available": True, "name": device.name, "driver_version": device.driver_version,
        "total_bytes": device.total_bytes, "used_bytes": device.used_bytes, "free_bytes": device.free_bytes,
        "other_processes_bytes": report.other_processes_bytes(), "processes_note": device.processes_note or None,
    }


def profile_record(result: ProfileResult) -> dict[str, Any]:
    """Everything the profile found; byte counts are integers."""
    budget, weights, activations, plan = result.budget, result.weights, result.activations, result.plan
    sizing = plan.sizing if plan is not None else None
    outside, target, batch = result.outside, result.target, result.batch
    sampler = activations.sampler if activations is not None else None
    return {
        "schema_version": PROFILE_SCHEMA_VERSION,
        "kind": PROFILE_KIND,
        "backend": result.backend,
        "predicted": result.predicted,
        "device": result.device_label,
        "model": result.setup.shape.model_id,
        "fits": result.fits,
        "error": result.finding,
        "total_bytes": result.snapshot.total_bytes,
        "free_at_start_bytes": result.snapshot.free_bytes,
        "gpu_memory_utilization": result.options.request.gpu_memory_utilization,
        "requested_bytes": None if budget is None else budget.requested_bytes,
        "weights_bytes": None if weights is None else weights.weights_bytes,
        "parameter_bytes": None if weights is None else weights.parameter_bytes,
        "activation_peak_bytes": None if activations is None else activations.activation_peak_bytes,
        "non_torch_bytes": None if budget is None else budget.non_torch_bytes,
        "non_torch_source": result.non_torch_source or None,
        "non_kv_bytes": None if budget is None else budget.non_kv_bytes,
        "available_kv_bytes": None if budget is None else budget.available_kv_bytes,
        "kv_cache_memory_given": result.options.request.kv_cache_memory_bytes is not None,
        "num_blocks": None if sizing is None else sizing.num_blocks,
        "page_size_bytes": None if sizing is None else sizing.page_size_bytes,
        "kv_cache_bytes": None if plan is None or plan.kv_config is None
        else sum(t.size for t in plan.kv_config.kv_cache_tensors),
        "gpu_kv_cache_tokens": None if sizing is None else sizing.gpu_kv_cache_tokens,
        "max_concurrency": None if sizing is None else sizing.max_concurrency,
        "max_model_len": None if sizing is None else sizing.max_model_len,
        "profile_run": {
            "num_tokens": batch.num_tokens, "num_reqs": batch.num_reqs,
            "tokens_per_request": [batch.tokens_per_request[0], batch.tokens_per_request[-1]],
            "sampler": None if sampler is None else {
                "vocab_size": sampler.vocab_size, "padded_vocab_size": sampler.padded_vocab_size,
                "multiprocessors": sampler.multiprocessors,
            },
        },
        "measurement": {
            "weights": None if weights is None else weights.how,
            "activations": None if activations is None else activations.how,
            "cross_checks": {} if activations is None else dict(activations.cross_checks),
        },
        "outside_requested": {
            "headroom_bytes": outside.headroom_bytes,
            "cuda_context_bytes": outside.cuda_context_bytes, "cuda_context_source": outside.cuda_context_source,
            "cuda_graph_bytes": outside.cuda_graph_bytes, "cuda_graph_source": outside.cuda_graph_source,
            "fits": outside.fits,
        },
        "allocation": _allocation(result),
        "largest_max_model_len": None if target is None else target.largest_max_model_len,
        "target": None if target is None else {
            "max_model_len": target.max_model_len,
            "kv_cache_memory_bytes": target.kv_cache_memory_bytes,
            "gpu_memory_utilization": target.gpu_memory_utilization,
            "vllm_suggestion": {
                "to_requested_limit_bytes": target.suggestion.to_requested_limit,
                "to_gpu_limit_bytes": target.suggestion.to_gpu_limit,
                "cuda_graph_bytes_assumed": outside.cuda_graph_bytes or 0,
                "line": target.suggestion.line,
            },
        },
        "nvml": _nvml(result),
        "vllm_log": list(result.vllm_log),
        "warnings": list(result.warnings),
        "timings": {key: round(value, 6) for key, value in result.timings.items()},
        "plan": None if plan is None else plan.to_record(),
        "provenance": _provenance(result),
    }


def _is_profile(data: Any) -> bool:
    return isinstance(data, dict) and data.get("kind") == PROFILE_KIND


def save_profile(record: Mapping[str, Any], path: Path) -> None:
    """Write the record; an existing file is replaced only when it is a kvplan profile."""
    if path.is_dir():
        raise KvplanError(f"--save {path}: is a directory; give a file name such as profile.json")
    if path.exists():
        try:
            existing = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError):
            existing = None
        if not _is_profile(existing):
            raise KvplanError(f"--save {path}: the file exists and is not a kvplan profile; refusing to overwrite it")
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise KvplanError(f"--save {path}: the directory {directory} does not exist")
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}.", dir=directory)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            json.dump(record, out, indent=2)
            out.write("\n")
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def load_profile(path: Path) -> dict[str, Any]:
    """A saved profile, checked to be one that this kvplan reads."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise KvplanError(f"profile {path}: no such file; write one with `kvplan profile --save {path}`") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise KvplanError(f"profile {path}: cannot read it as JSON ({error})") from None
    if not _is_profile(data):
        raise KvplanError(f"{path} is not a kvplan profile (no \"kind\": \"{PROFILE_KIND}\")")
    version = data.get("schema_version")
    if not isinstance(version, int) or version > PROFILE_SCHEMA_VERSION:
        raise KvplanError(
            f"{path} has profile schema_version {version!r}; this kvplan reads up to {PROFILE_SCHEMA_VERSION}: "
            "upgrade kvplan or profile again"
        )
    return data


def profile_mismatches(
    record: Mapping[str, Any], config_sha256: str | None = None, knobs: Mapping[str, Any] | None = None
) -> list[str]:
    """Why a saved profile does not describe this model and these knobs (empty: it does)."""
    provenance = record.get("provenance") or {}
    reasons = []
    if provenance.get("vllm_semantics") != VLLM_SEMANTICS:
        reasons.append(
            f"it follows vLLM {provenance.get('vllm_semantics')} semantics, this kvplan follows {VLLM_SEMANTICS}"
        )
    if config_sha256 is not None and provenance.get("config_sha256") != config_sha256:
        reasons.append("it was made for a different model config (config sha256 differs)")
    if knobs is not None and provenance.get("knobs_sha256") != knobs_sha256(knobs):
        saved = provenance.get("knobs") or {}
        changed = sorted(key for key in set(saved) | set(knobs) if saved.get(key) != knobs.get(key))
        reasons.append("its knobs differ: " + ", ".join(changed) if changed else "its knobs differ")
    return reasons
