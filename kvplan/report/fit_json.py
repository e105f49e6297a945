"""`kvplan fit --json`: the document (schema in docs/schemas/fit.json). Configurations best first
under `configurations`, the families nothing could serve under `rejected`."""

from __future__ import annotations

from typing import Any

from kvplan import __version__
from kvplan.semantics.engine.args import EngineArgs
from kvplan.usecases.configuration import Configuration
from kvplan.usecases.fit.result import FitConfiguration, FitResult, PlannedPoint, RateCheck, RejectedFamily

FIT_SCHEMA_VERSION = 1
FIT_KIND = "kvplan.fit"

# what follows from the KV memory and vLLM's rules alone, and what needs the step-time model
EXACT = ("num_gpu_blocks", "kv_cache_tokens", "max_concurrency", "concurrency_at_target")
ESTIMATES = ("max_sustained_rate", "ttft_p95_s", "tpot_p95_s", "preemptions", "slo_figures",
             "gpu_hours_per_million_requests", "cost_per_million_requests")


def _significant(value: float | None, digits: int = 6) -> float | None:
    return None if value is None else float(f"{value:.{digits}g}")


def _settings(point: PlannedPoint) -> dict[str, Any]:
    configuration = point.configuration
    utilization = configuration.args.gpu_memory_utilization
    if configuration.args.kv_cache_memory_bytes is None and utilization is None:
        utilization = configuration.utilization
    return {
        "gpu": configuration.gpu,
        "num_gpus": configuration.num_gpus,
        "tensor_parallel_size": configuration.value("tensor_parallel_size"),
        "pipeline_parallel_size": configuration.value("pipeline_parallel_size"),
        "kv_cache_dtype": configuration.value("kv_cache_dtype"),
        "gpu_memory_utilization": utilization,
        "max_num_seqs": configuration.args.max_num_seqs,
        "max_num_batched_tokens": configuration.args.max_num_batched_tokens,
        "max_model_len": configuration.args.max_model_len,
        "block_size": configuration.args.block_size,
        "vllm_serve_args": configuration.vllm_serve_args(),
        "kv_cache_memory_bytes": point.kv_cache_memory_bytes,
        "kv_cache_memory_source": point.memory_source,
        "num_gpu_blocks": point.num_gpu_blocks,
        "kv_cache_tokens": point.kv_cache_tokens,
        "max_concurrency": _significant(point.max_concurrency),
        "concurrency_at_target": _significant(point.concurrency_at_target),
    }


def _rates(check: RateCheck | None) -> dict[str, Any]:
    if check is None:
        return {"max_sustained_rate": None, "max_sustained_rate_is_lower_bound": None, "rate": None,
                "ttft_p95_s": None, "tpot_p95_s": None, "preemptions": None, "slo_figures": {}, "simulation_runs": 0}
    return {
        "max_sustained_rate": _significant(check.max_sustained_rate),
        "max_sustained_rate_is_lower_bound": not check.max_rate_bounded,
        "rate": _significant(check.rate),
        "ttft_p95_s": _significant(check.ttft_p95_s),
        "tpot_p95_s": _significant(check.tpot_p95_s),
        "preemptions": check.preemptions,
        "slo_figures": {key: _significant(value) for key, value in check.figures},
        "simulation_runs": check.runs,
    }


def configuration_record(rank: int, configuration: FitConfiguration) -> dict[str, Any]:
    return {
        "rank": rank,
        **_settings(configuration.point),
        **_rates(configuration.check),
        "cost_per_hour": _significant(configuration.cost_per_hour),
        "replicas": configuration.replicas,
        "gpus_at_rate": configuration.gpus_at_rate,
        "cost_per_hour_at_rate": _significant(configuration.cost_per_hour_at_rate),
        "gpu_hours_per_million_requests": _significant(configuration.gpu_hours_per_million_requests),
        "cost_per_million_requests": _significant(configuration.cost_per_million_requests),
        "pareto_front": configuration.pareto,
    }


def rejected_record(family: RejectedFamily) -> dict[str, Any]:
    return {
        "gpu": family.gpu,
        "num_gpus": family.num_gpus,
        "tensor_parallel_size": family.tensor_parallel_size,
        "pipeline_parallel_size": family.pipeline_parallel_size,
        "kv_cache_dtype": family.kv_cache_dtype,
        "reason": family.reason,
        "detail": family.detail,
        "cost_per_hour": _significant(family.cost_per_hour),
        "closest": {**_settings(family.closest), "status": family.closest.status, **_rates(family.check)},
    }


def fit_document(result: FitResult) -> dict[str, Any]:
    request, counts = result.request, result.counts
    space = request.space
    return {
        "schema_version": FIT_SCHEMA_VERSION,
        "kind": FIT_KIND,
        "kvplan_version": __version__,
        "vllm_semantics": request.release.version,
        "model": request.model,
        "traffic": {
            "workload": None if request.workload is None else request.workload.name,
            "rate": _significant(request.rate),
            "concurrency": None if request.concurrency is None else {
                "requests": request.concurrency.requests, "tokens": request.concurrency.tokens},
        },
        "slo": [{"key": bound.key, "limit": bound.limit, "unit": "s" if bound.is_latency else "count"}
                for bound in request.slo],
        "search": {
            "gpus": list(space.gpus),
            "tensor_parallel_sizes": list(space.values("tensor_parallel_size")),
            "pipeline_parallel_sizes": list(space.values("pipeline_parallel_size")),
            "kv_cache_dtypes": list(space.values("kv_cache_dtype")),
            "gpu_memory_utilizations": [] if space.values("kv_cache_memory_bytes") else [
                Configuration(request.model, request.release, args=EngineArgs(gpu_memory_utilization=u)).utilization
                for u in space.values("gpu_memory_utilization")],
            "kv_cache_memory_bytes": list(space.values("kv_cache_memory_bytes")),
            "max_num_seqs": list(space.values("max_num_seqs")),
            "max_num_batched_tokens": list(space.values("max_num_batched_tokens")),
            "max_model_lens": list(space.values("max_model_len")),
        },
        "prices": dict(request.prices),
        "ranked_by": result.ranked_by,
        "configurations": [configuration_record(rank, c) for rank, c in enumerate(result.configurations, start=1)],
        "rejected": [rejected_record(family) for family in result.rejected],
        "counts": {
            "configurations": counts.configurations, "planned": counts.planned, "inferred": counts.inferred,
            "skipped_lengths": counts.skipped_lengths, "profile_runs": counts.profile_runs,
            "simulated": counts.simulated, "simulation_runs": counts.simulation_runs,
        },
        "executor": {"name": result.executor, "workers": result.workers},
        "exact": list(EXACT),
        "estimates": list(ESTIMATES),
        "estimate_methods": list(result.estimate_methods),
        "notes": list(result.notes),
    }
