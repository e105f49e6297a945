"""One cell of a sweep: its commands run in order (plan, profile, simulate) into one row.

A command that refuses the cell (bad settings, vLLM's rules) or fails in any other way ends the
cell with `status = "error"` and the message in `error`; the figures of the commands before it
stay. A configuration that does not fit is a result (`plan_fits = false`), not an error; the
simulation is then skipped, as `simulate` would refuse to run it."""

from __future__ import annotations

from dataclasses import dataclass, fields
from typing import Any

from kvplan import __version__
from kvplan.errors import DoesNotFitError
from kvplan.usecases.executors import error_text
from kvplan.usecases.plan import PlanResult
from kvplan.usecases.sweep.grid import RESOLVED, Cell
from kvplan.usecases.sweep.grid_format import ENGINE_AXES


@dataclass(frozen=True)
class SweepRow:
    """One row of the results table; every column is a scalar or None (docs/sweep.md)."""

    # the cell and its inputs (None: not an axis of the grid, vLLM's default applies)
    cell: int
    cell_id: str
    status: str                                   # "ok" or "error"
    error: str | None
    kvplan_version: str
    vllm_version: str
    commands: str
    model: str
    gpu: str | None
    tensor_parallel_size: int
    pipeline_parallel_size: int
    kv_cache_dtype: str
    dtype: str
    gpu_memory_utilization: float | None
    kv_cache_memory_bytes: int | None
    block_size: int | None
    max_model_len: int | None
    max_num_seqs: int | None
    max_num_batched_tokens: int | None
    enable_prefix_caching: bool | None
    enable_chunked_prefill: bool | None
    scheduling: str | None
    workload: str | None
    workload_sha256: str | None
    note: str | None = None
    # plan (exact for the release, from the KV memory; predicted memory when only the GPU is given)
    plan_fits: bool | None = None
    plan_error: str | None = None
    plan_kv_cache_memory_bytes: int | None = None
    plan_kv_cache_memory_source: str | None = None
    plan_num_blocks: int | None = None
    plan_gpu_kv_cache_tokens: int | None = None
    plan_max_concurrency: float | None = None
    plan_kv_bytes_per_token: float | None = None
    plan_block_size: int | None = None
    plan_max_model_len: int | None = None
    plan_max_num_seqs: int | None = None
    plan_max_num_batched_tokens: int | None = None
    plan_weights_per_gpu_bytes: int | None = None
    # profile on the fake backend (predicted)
    profile_fits: bool | None = None
    profile_error: str | None = None
    profile_weights_bytes: int | None = None
    profile_activation_peak_bytes: int | None = None
    profile_non_torch_bytes: int | None = None
    profile_non_kv_bytes: int | None = None
    profile_available_kv_bytes: int | None = None
    profile_num_blocks: int | None = None
    # simulate (time-derived columns are estimates, named *_estimate)
    simulate_stalled: bool | None = None
    simulate_num_requests: int | None = None
    simulate_num_finished: int | None = None
    simulate_num_steps: int | None = None
    simulate_preemptions: int | None = None
    simulate_peak_kv_usage: float | None = None
    simulate_mean_kv_usage: float | None = None
    simulate_prefix_cache_hit_rate: float | None = None
    simulate_ttft_p50_s_estimate: float | None = None
    simulate_ttft_p95_s_estimate: float | None = None
    simulate_ttft_p99_s_estimate: float | None = None
    simulate_tpot_p50_s_estimate: float | None = None
    simulate_tpot_p95_s_estimate: float | None = None
    simulate_e2e_p95_s_estimate: float | None = None
    simulate_queueing_p95_s_estimate: float | None = None
    simulate_requests_per_s_estimate: float | None = None
    simulate_output_tokens_per_s_estimate: float | None = None
    simulate_zero_preemption_num_blocks: int | None = None
    simulate_max_sustained_rate_rps_estimate: float | None = None


COLUMNS = tuple(field.name for field in fields(SweepRow))


@dataclass(frozen=True)
class CellRun:
    """A cell's row, and what the command says beside the table: its plan's warning when the
    model's weights could not be counted."""

    row: SweepRow
    weights_warning: str | None = None


def inputs_of(cell: Cell) -> dict[str, Any]:
    configuration = cell.configuration
    return dict(
        cell=cell.index, cell_id=cell.cell_id, kvplan_version=__version__, vllm_version=configuration.release.version,
        commands=",".join(cell.commands), model=configuration.model, gpu=configuration.gpu,
        # every engine axis is a column, by vLLM's name: at the release's default when not an axis (RESOLVED),
        # or as given (None: vLLM derives it)
        **{name: configuration.value(name) if name in RESOLVED else getattr(configuration.args, name)
           for name in ENGINE_AXES},
        scheduling=configuration.scheduling,
        workload=None if cell.workload is None else cell.workload.given,
        workload_sha256=None if cell.workload is None else cell.workload.sha256,
    )


def failed_row(cell: Cell, error: str) -> SweepRow:
    """The row of a cell whose task never came back (its worker died)."""
    return SweepRow(status="error", error=error, **inputs_of(cell))


def run_cell(cell: Cell) -> CellRun:
    figures: dict[str, Any] = {}
    step = "plan"
    planned: PlanResult | None = None
    try:
        planned = _plan(cell, figures) if "plan" in cell.commands or "simulate" in cell.commands else None
        if "profile" in cell.commands:
            step = "profile"
            _profile(cell, figures)
        if "simulate" in cell.commands:
            step = "simulate"
            assert planned is not None
            if not planned.fits:
                figures["note"] = "simulate skipped: the configuration does not fit"
            else:
                _simulate(cell, planned.kv_cache_memory_bytes, figures)
    except DoesNotFitError as finding:
        figures["note"] = f"{step}: {finding}"
    except Exception as error:  # a failing cell is recorded in its row, never the end of the sweep
        row = SweepRow(status="error", error=f"{step}: {error_text(error)}", **inputs_of(cell), **figures)
    else:
        row = SweepRow(status="ok", error=None, **inputs_of(cell), **figures)
    return CellRun(row, None if planned is None else planned.weights_warning)


def _plan(cell: Cell, figures: dict[str, Any]) -> PlanResult:
    """`kvplan plan` for the cell (the pool its simulation runs on)."""
    from kvplan.usecases.planner import process_planner

    result = process_planner().plan(cell.configuration.plan_request())
    summary = result.summary
    if "plan" in cell.commands:
        per_token = summary.kv_bytes_per_token
        figures.update(
            plan_fits=summary.fits, plan_error=summary.error, plan_kv_cache_memory_bytes=summary.kv_cache_memory_bytes,
            plan_kv_cache_memory_source=result.memory_source, plan_num_blocks=summary.num_blocks,
            plan_gpu_kv_cache_tokens=summary.gpu_kv_cache_tokens, plan_max_concurrency=summary.max_concurrency,
            plan_kv_bytes_per_token=None if per_token is None else float(per_token),
            plan_block_size=summary.block_size, plan_max_model_len=summary.max_model_len,
            plan_max_num_seqs=summary.max_num_seqs, plan_max_num_batched_tokens=summary.max_num_batched_tokens,
            plan_weights_per_gpu_bytes=summary.weights_per_gpu_bytes,
        )
    return result


def _profile(cell: Cell, figures: dict[str, Any]) -> None:
    """`kvplan profile --backend fake` for the cell."""
    from kvplan.usecases.profile import ProfileRequest, run_profile

    result = run_profile(ProfileRequest(plan=cell.configuration.plan_request(), backend="fake"))
    summary = result.summary
    figures.update(
        profile_fits=summary.fits, profile_error=summary.error, profile_weights_bytes=summary.weights_bytes,
        profile_activation_peak_bytes=summary.activation_peak_bytes, profile_non_torch_bytes=summary.non_torch_bytes,
        profile_non_kv_bytes=summary.non_kv_bytes, profile_available_kv_bytes=summary.available_kv_bytes,
        profile_num_blocks=None if summary.plan is None else summary.plan.num_blocks,
    )


def _simulate(cell: Cell, kv_bytes: int | None, figures: dict[str, Any]) -> None:
    """`kvplan simulate` of the cell's workload on its configuration, on the pool the plan sized."""
    from kvplan.usecases.simulate.simulation import simulate

    assert cell.workload is not None
    options = cell.simulate
    setup = cell.configuration.prepare(cell.workload.workload, kv_cache_memory_bytes=kv_bytes, seed=options.seed,
                                       step_time_ms=options.step_time_ms)
    result = simulate(setup, find_max_rate=options.find_max_rate)
    metrics = result.metrics
    latency, throughput = metrics.latency, metrics.throughput

    def stat(summary: Any, name: str) -> float | None:
        return None if summary is None else getattr(summary, name)

    max_rate = result.capacity.max_rate
    figures.update(
        simulate_stalled=metrics.stalled, simulate_num_requests=metrics.num_requests,
        simulate_num_finished=metrics.num_finished, simulate_num_steps=metrics.num_steps,
        simulate_preemptions=metrics.preemptions.total, simulate_peak_kv_usage=metrics.kv.peak_usage,
        simulate_mean_kv_usage=metrics.kv.mean_usage,
        simulate_prefix_cache_hit_rate=metrics.prefix_cache.prefix_cache_hit_rate,
        simulate_ttft_p50_s_estimate=stat(latency.ttft_s_estimate, "p50"),
        simulate_ttft_p95_s_estimate=stat(latency.ttft_s_estimate, "p95"),
        simulate_ttft_p99_s_estimate=stat(latency.ttft_s_estimate, "p99"),
        simulate_tpot_p50_s_estimate=stat(latency.tpot_s_estimate, "p50"),
        simulate_tpot_p95_s_estimate=stat(latency.tpot_s_estimate, "p95"),
        simulate_e2e_p95_s_estimate=stat(latency.e2e_s_estimate, "p95"),
        simulate_queueing_p95_s_estimate=stat(latency.queueing_s_estimate, "p95"),
        simulate_requests_per_s_estimate=throughput.requests_per_s_estimate,
        simulate_output_tokens_per_s_estimate=throughput.output_tokens_per_s_estimate,
        simulate_zero_preemption_num_blocks=result.capacity.zero_preemption.num_gpu_blocks,
        simulate_max_sustained_rate_rps_estimate=None if max_rate is None else max_rate.max_sustained_rate_rps_estimate,
    )

