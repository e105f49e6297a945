"""`kvplan explain` as JSON (schema in docs/schemas/explain.json), and the profile `--save-profile`
writes: a kvplan profile (the format of `kvplan profile --save`, read back by
`kvplan.usecases.profile_summary`) whose measured terms are the logged start-up's.

    explain_record(result) -> dict
    log_profile_record(result) -> dict      (KvplanError when the log gives no KV memory to save)"""

from __future__ import annotations

from typing import Any

from kvplan import __version__
from kvplan.errors import KvplanError
from kvplan.report.plan_json import plan_record
from kvplan.semantics.memory.budget import peak_activation_bytes
from kvplan.usecases.explain.explain import ExplainResult, changed_command
from kvplan.usecases.plan import PlanRequest
from kvplan.usecases.profile_summary import PROFILE_KIND, PROFILE_SCHEMA_VERSION, knobs_sha256

EXPLAIN_KIND = "kvplan.explain"
EXPLAIN_SCHEMA_VERSION = 1
# the backend a saved profile names when its terms come from a vLLM log
LOG_BACKEND = "vllm-log"


def _value(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def explain_record(result: ExplainResult) -> dict[str, Any]:
    log = result.log
    return {
        "schema_version": EXPLAIN_SCHEMA_VERSION,
        "kind": EXPLAIN_KIND,
        "kvplan_version": __version__,
        "vllm_semantics": result.release.version,
        "release_reason": result.release_reason,
        "log": {
            "path": result.where,
            "lines": log.lines,
            "vllm_version": None if log.vllm_version is None else log.vllm_version.value,
            "vllm_version_line": None if log.vllm_version is None else log.vllm_version.line,
            "wording": log.wording,
            "wording_line": log.wording_line,
            "wording_words": result.wording,
            "workers": list(log.workers),
            "engine_ready": log.engine_ready,
        },
        "settings": [
            {"name": setting.name, "value": _value(setting.value), "source": setting.source, "line": setting.line,
             "note": setting.note}
            for setting in result.settings
        ],
        "terms": [
            {"key": row.key, "label": row.label, "unit": row.unit, "logged": row.logged, "predicted": row.predicted,
             "difference": None if row.difference is None else (
                 round(row.difference, 4) if isinstance(row.difference, float) else row.difference),
             "tolerance": row.tolerance, "within_tolerance": row.within, "line": row.line, "reading": row.reading,
             "note": row.note}
            for row in result.rows
        ],
        "not_predicted": list(result.not_predicted),
        "error": None if log.error is None else {
            "kind": log.error.kind, "line": log.error.line, "message": log.error.message,
            "figures": dict(log.error.figures),
        },
        "started": result.started,
        "shortfall": None if result.shortfall is None else {
            "term": result.shortfall.term, "needed": result.shortfall.needed_bytes,
            "available": result.shortfall.available_bytes, "short": result.shortfall.short_bytes,
            "text": result.shortfall.text,
        },
        "fixes": [
            {"change": fix.change, "flags": [list(flag) for flag in fix.flags], "what": fix.what,
             "checked": fix.checked, "outcome": fix.outcome,
             "command": None if result.command is None else changed_command(result.command, fix)}
            for fix in result.fixes
        ],
        "command": result.command,
        "warnings": list(result.warnings),
    }


def _knobs(request: PlanRequest) -> dict[str, Any]:
    """The settings the profile stands for, as `kvplan profile --save` records them (the release is
    the provenance's `vllm_semantics`)."""
    knobs = {name: value for name, value in request.recorded().items() if name != "release"}
    knobs.update(backend=LOG_BACKEND)
    return knobs


def log_profile_record(result: ExplainResult) -> dict[str, Any]:
    """The logged start-up as a saved profile: its measured terms come from the log (`logged_budget`:
    they add up to the logged KV memory), its plan is kvplan's sizing of that memory."""
    budget, sized, request = result.logged_budget, result.sized, result.request
    if budget is None or sized is None or request is None:
        missing = ("the log names no model (give --model)" if request is None else
                   "the log has no KV cache memory figure (\"Available KV cache memory\") and no device total"
                   if budget is None else "kvplan could not size the logged KV memory for this model")
        raise KvplanError(f"--save-profile: nothing to save: {missing}")
    consumed = budget.release.non_kv_memory == "consumed_plus_transient_peak"
    saved_request = request.with_args(kv_cache_memory_bytes=None)
    knobs = _knobs(saved_request)
    plan = plan_record(sized)
    summary = sized.summary
    return {
        "schema_version": PROFILE_SCHEMA_VERSION,
        "kind": PROFILE_KIND,
        "vllm_semantics": result.release.version,
        "backend": LOG_BACKEND,
        "predicted": False,
        "device": f"{'' if sized.setup.device.gpu is None else sized.setup.device.gpu.name + ' '}"
                  f"(vLLM start-up log {result.where})".strip(),
        "model": sized.setup.shape.model_id,
        "fits": sized.fits and result.log.error is None,
        "error": sized.summary.error if not sized.fits else (None if result.log.error is None
                                                               else result.log.error.message),
        "total_bytes": budget.total_bytes,
        "free_at_start_bytes": budget.free_at_start_bytes,
        "gpu_memory_utilization": budget.utilization,
        "requested_bytes": budget.requested_bytes,
        "weights_bytes": budget.weights_bytes,
        "activation_peak_bytes": budget.activation_peak_bytes,
        "non_torch_bytes": budget.non_torch_bytes,
        "non_torch_source": "the log: what the other logged terms leave of non-KV memory "
                            "(requested - available KV memory)",
        "non_kv_bytes": budget.non_kv_bytes,
        "total_consumed_bytes": budget.total_consumed_bytes if consumed else None,
        "transient_peak_bytes": budget.transient_peak_bytes if consumed else None,
        "peak_activation_logged_bytes": peak_activation_bytes(budget),
        "cuda_graph_estimate_bytes": budget.cuda_graph_bytes if budget.release.cuda_graphs_in_budget else None,
        "available_kv_bytes": budget.available_kv_bytes,
        "kv_cache_memory_given": False,
        "num_blocks": summary.num_blocks,
        "page_size_bytes": sized.sizing.page_size_bytes,
        "gpu_kv_cache_tokens": summary.gpu_kv_cache_tokens,
        "max_concurrency": summary.max_concurrency,
        "max_model_len": summary.max_model_len,
        "largest_max_model_len": None,
        "profile_run": {"num_tokens": summary.max_num_batched_tokens, "num_reqs": None},
        "measurement": {
            "source": f"vLLM start-up log {result.where}",
            "terms": {row.key: {"logged": row.logged, "line": row.line} for row in result.rows
                      if row.logged is not None},
        },
        "vllm_log": [],
        "warnings": list(result.warnings),
        "plan": plan,
        "provenance": {
            "kvplan_version": __version__,
            "vllm_semantics": result.release.version,
            "model": sized.setup.shape.model_id,
            "model_source": sized.setup.resolved.source,
            "config_sha256": sized.setup.resolved.sha256,
            "knobs": knobs,
            "knobs_sha256": knobs_sha256(knobs),
            "backend": LOG_BACKEND,
            "predicted": False,
            "source_log": result.where,
        },
    }
