"""The profile as JSON: the record `--json` prints and `--save` writes, with its provenance (schema in
docs/schemas/profile.json). It holds no wall-clock time (no timings, no date): the same inputs give
the same bytes, so a committed profile changes only when something it measures changed. The figures
`ProfileSummary` names are written from it, under the keys its reader
(`kvplan.usecases.profile_summary`) reads back.

    profile_record(result, workload=None) -> dict   (the whole record, `provenance` included)
    workload_check_record(check) -> dict            (its `workload_check`, for `--workload`)
    save_profile(record, path)                      (refuses to overwrite anything but a kvplan profile)"""

from __future__ import annotations

import json
from collections.abc import Mapping
from importlib import metadata
from pathlib import Path
from typing import Any

from kvplan import __version__
from kvplan.errors import KvplanError
from kvplan.files import atomic_output, read_input_text
from kvplan.report.jsonout import dumps, to_jsonable
from kvplan.report.plan_json import plan_record
from kvplan.report.simulate_json import describe_engine, describe_kv_usage, rounded
from kvplan.report.sizing_path import path_record, states_path
from kvplan.semantics.memory.budget import peak_activation_bytes
from kvplan.usecases.profile import ProfileResult
from kvplan.usecases.profile_summary import PROFILE_KIND, PROFILE_SCHEMA_VERSION, Provenance
from kvplan.usecases.profile_workload import WorkloadCheck


def _version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


def _provenance(result: ProfileResult, provenance: Provenance) -> dict[str, Any]:
    gpu = result.gpu
    return {
        "kvplan_version": __version__,
        "vllm_semantics": provenance.vllm_semantics,
        "model": provenance.model,
        "model_source": result.setup.resolved.source,
        "config_sha256": provenance.config_sha256,
        "knobs": dict(provenance.knobs or {}),
        "knobs_sha256": provenance.knobs_sha256,
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


def profile_record(result: ProfileResult, workload: WorkloadCheck | None = None,
                   workload_requested: bool = False) -> dict[str, Any]:
    """Everything the profile found; byte counts are integers. With `--workload`
    (`workload_requested`), its check under `workload_check`: null when it could not run (the
    configuration does not fit)."""
    budget, weights, activations, plan = result.budget, result.weights, result.activations, result.plan
    summary = result.summary
    sizing = plan.sizing if plan is not None else None
    outside, target, batch = result.outside, result.target, result.batch
    sampler = activations.sampler if activations is not None else None
    graphs = result.cuda_graphs
    consumed_terms = budget if budget is not None and budget.release.non_kv_memory == "consumed_plus_transient_peak" \
        else None
    record = {
        "schema_version": PROFILE_SCHEMA_VERSION,
        "kind": PROFILE_KIND,
        "vllm_semantics": summary.provenance.vllm_semantics,
        "backend": result.backend,
        "predicted": summary.predicted,
        "device": summary.device,
        "model": result.setup.shape.model_id,
        "fits": summary.fits,
        "error": summary.error,
        "total_bytes": summary.total_bytes,
        "free_at_start_bytes": result.snapshot.free_bytes,
        "gpu_memory_utilization": summary.gpu_memory_utilization,
        "requested_bytes": None if budget is None else budget.requested_bytes,
        "weights_bytes": summary.weights_bytes,
        "parameter_bytes": None if weights is None else weights.parameter_bytes,
        "activation_peak_bytes": summary.activation_peak_bytes,
        "non_torch_bytes": summary.non_torch_bytes,
        "non_torch_source": result.non_torch_source or None,
        "non_kv_bytes": summary.non_kv_bytes,
        # 0.33.0's terms (null for a release that adds the others): consumed (the drop in free memory,
        # or its parts) + transient peak + graphs
        "total_consumed_bytes": None if consumed_terms is None else consumed_terms.total_consumed_bytes,
        "transient_peak_bytes": None if consumed_terms is None else consumed_terms.transient_peak_bytes,
        "retained_bytes": None if consumed_terms is None else consumed_terms.retained_bytes,
        "runner_state_bytes": None if consumed_terms is None else consumed_terms.runner_state_bytes,
        "peak_activation_logged_bytes": None if budget is None else peak_activation_bytes(budget),
        "cuda_graph_estimate_bytes": None if graphs is None else graphs.bytes,
        "cuda_graph_estimate": None if graphs is None else {
            "bytes": graphs.bytes, "method": graphs.method, "how": graphs.how,
            "estimate": graphs.method == "predicted",
            "capture_sizes": None if graphs.plan is None else sorted(graphs.plan.piecewise),
            "num_piecewise_graphs": None if graphs.plan is None else len(graphs.plan.piecewise),
            "num_full_graphs": None if graphs.plan is None else len(graphs.plan.full),
        },
        "available_kv_bytes": summary.available_kv_bytes,
        "kv_cache_memory_given": summary.kv_cache_memory_given,
        "num_blocks": None if sizing is None else sizing.num_blocks,
        "page_size_bytes": None if sizing is None else sizing.page_size_bytes,
        "kv_cache_bytes": None if plan is None or plan.kv_config is None
        else plan.kv_config.pool_bytes,
        "gpu_kv_cache_tokens": None if sizing is None else sizing.gpu_kv_cache_tokens,
        "max_concurrency": None if sizing is None else sizing.max_concurrency,
        "max_model_len": None if sizing is None else sizing.max_model_len,
        "profile_run": {
            "num_tokens": summary.profile_run_tokens, "num_reqs": batch.num_reqs,
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
        "ranks": [
            {
                "pp_rank": rank.pp_rank, "layers": list(rank.layers),
                "tensor_parallel_size": result.setup.cache.tensor_parallel_size,
                "weights_bytes": rank.budget.weights_bytes,
                "activation_peak_bytes": rank.budget.activation_peak_bytes,
                "non_torch_bytes": rank.budget.non_torch_bytes, "non_kv_bytes": rank.budget.non_kv_bytes,
                "available_kv_bytes": rank.budget.available_kv_bytes,
            }
            for rank in result.ranks
        ],
        "largest_max_model_len": summary.largest_max_model_len,
        "target": None if target is None else {
            "max_model_len": target.max_model_len,
            "kv_cache_memory_bytes": target.kv_cache_memory_bytes,
            "gpu_memory_utilization": target.gpu_memory_utilization,
            "vllm_suggestion": None if target.suggestion is None else {
                "to_requested_limit_bytes": target.suggestion.to_requested_limit,
                "to_gpu_limit_bytes": target.suggestion.to_gpu_limit,
                "cuda_graph_bytes_assumed": budget.cuda_graph_bytes if budget is not None else 0,
                "log_level": target.suggestion.log_level,
                "line": target.suggestion.line,
            },
        },
        "nvml": _nvml(result),
        "vllm_log": list(result.vllm_log),
        "warnings": list(result.warnings),
        "plan": None if plan is None else plan_record(plan),
        "provenance": _provenance(result, summary.provenance),
    }
    if plan is not None and states_path(result.options.plan.release):
        record["kv_sizing"] = path_record(plan.sizing_path, plan.measured)
    if workload_requested:
        record["workload_check"] = None if workload is None else workload_check_record(workload)
    return record


def _is_profile(data: Any) -> bool:
    return isinstance(data, dict) and data.get("kind") == PROFILE_KIND


def refuse_to_replace(path: Path) -> None:
    """An existing file is replaced only when it is a kvplan profile (checked before the profile runs)."""
    if not path.exists():
        return
    try:
        existing = json.loads(read_input_text(path, str(path), 64 << 20))
    except (KvplanError, ValueError, RecursionError):
        existing = None
    if not _is_profile(existing):
        raise KvplanError(f"--save {path}: the file exists and is not a kvplan profile; refusing to overwrite it")


def save_profile(record: Mapping[str, Any], path: Path) -> None:
    """Write the record whole (a temporary file renamed into place); an existing file is replaced only
    when it is a kvplan profile."""
    if path.is_dir():
        raise KvplanError(f"--save {path}: is a directory; give a file name such as profile.json")
    refuse_to_replace(path)
    directory = path.parent if str(path.parent) else Path(".")
    if not directory.is_dir():
        raise KvplanError(f"--save {path}: the directory {directory} does not exist")
    with atomic_output(path) as out:
        out.write(dumps(record) + "\n")


def workload_check_record(check: WorkloadCheck) -> dict[str, Any]:
    metrics = check.metrics
    return {
        "workload": check.workload,
        "passed": check.passed,
        "finding": check.finding,
        "attention_backend": check.attention_backend,
        "tensors_written": check.tensors_written,
        "layers_verified": list(check.layers_verified),
        "verify_every_steps": check.verify_every,
        "steps": check.steps,
        "tokens_written": check.tokens_written,
        "request_verifications": check.request_verifications,
        "tokens_verified": check.tokens_verified,
        "prefix_hit_tokens_verified": check.prefix_hit_tokens_verified,
        "mismatched_tokens": check.mismatched_tokens,
        "first_mismatch": to_jsonable(check.first_mismatch),
        "engine": describe_engine(check.prepared),
        "simulation": rounded({
            "num_steps": metrics.num_steps,
            "stalled": metrics.stalled,
            "num_requests": metrics.num_requests,
            "num_finished": metrics.num_finished,
            "num_rejected": check.num_rejected,
            "num_conversations_cut": check.num_conversations_cut,
            "kv_usage": describe_kv_usage(metrics.kv),
            "preemptions": to_jsonable(metrics.preemptions),
            "prefix_cache": to_jsonable(metrics.prefix_cache),
            "throughput": to_jsonable(metrics.throughput),
        }),
        "notes": list(check.notes),
    }
