"""The profile for people: the memory breakdown, the KV layout, the allocation check, vLLM's log
lines with the same numbers, and the settings that reach a target."""

from __future__ import annotations

from collections.abc import Callable

from rich.console import Console
from rich.table import Table

from kvplan.measure.backend import AllocationReport
from kvplan.report.answer import answer_lines
from kvplan.report.console import semantics_line
from kvplan.report.plan_console import print_sizing_path
from kvplan.report.sizing_path import states_path
from kvplan.report.stdout import ReportConsole
from kvplan.report.text import plain as escape
from kvplan.semantics.kv.specs import AttentionSpec
from kvplan.semantics.memory.budget import GRAPH_ESTIMATE_TAKEN
from kvplan.semantics.releases import NonKvMemory
from kvplan.units import format_gib, human_bytes, significant
from kvplan.usecases.plan import weights_alone_note
from kvplan.usecases.profile import ProfileResult
from kvplan.usecases.profile_workload import WorkloadCheck


def _gib(value: int | None) -> str:
    return "-" if value is None else f"{format_gib(value)} GiB"


def _exact(value: int | None) -> str:
    return "-" if value is None else f"{value:,}"


def _title(result: ProfileResult) -> str:
    kind = "PREDICTED" if result.predicted else "MEASURED"
    how = {"fake": "fake backend, no GPU used", "cpu": "cpu backend: real tensors in RAM", "cuda": "on the GPU"}
    return (f"[bold]{escape(result.setup.shape.model_id)}[/] on {escape(result.device_label)}: {kind} "
            f"({how.get(result.backend, result.backend)})")


Row = tuple[str, int | None, str]


def _terms_0_17_1(result: ProfileResult) -> list[Row]:
    """weights + activation peak + non-torch; the graphs sit outside `requested`."""
    budget, weights, activations, batch = result.budget, result.weights, result.activations, result.batch
    return [
        ("weights", None if weights is None else weights.weights_bytes, "" if weights is None else weights.how),
        ("activation peak", None if activations is None else activations.activation_peak_bytes,
         f"profile run: {batch.num_tokens:,} tokens over {batch.num_reqs:,} requests + dummy sampler"),
        ("non-torch", None if budget is None else budget.non_torch_bytes, result.non_torch_source or ""),
        ("= non-KV", None if budget is None else budget.non_kv_bytes, "weights + activation peak + non-torch"),
    ]


def _terms_0_33_0(result: ProfileResult) -> list[Row]:
    """consumed + transient peak + the CUDA-graph estimate."""
    budget, weights, batch, graphs = result.budget, result.weights, result.batch, result.cuda_graphs
    rows: list[Row] = [
        ("weights", None if weights is None else weights.weights_bytes, "" if weights is None else weights.how),
        ("non-torch", None if budget is None else budget.non_torch_bytes, result.non_torch_source or ""),
    ]
    if budget is not None and budget.consumed_bytes is None:
        rows += [
            ("runner state", budget.runner_state_bytes, "predicted: the V2 runner's penalty counts "
                                                        "(max_num_seqs x vocab x 4 B and a bit mask)"),
            ("retained by the run", budget.retained_bytes, "the top-k/top-p kernel's cached scratch buffer"),
        ]
    rows += [
        ("= consumed", None if budget is None else budget.total_consumed_bytes,
         "measured: the drop in free memory since start-up" if budget is not None and budget.consumed_bytes
         is not None else "weights + non-torch + runner state + retained (vLLM: the drop in free memory)"),
        ("transient peak", None if budget is None else budget.transient_peak_bytes,
         f"profile run: {batch.num_tokens:,} tokens over {batch.num_reqs:,} requests + default and warm-up "
         "sampler passes; the peak above what stays allocated"),
        (f"CUDA graphs ({'ESTIMATE' if graphs is not None and graphs.method == 'predicted' else graphs.method})"
         if graphs is not None else "CUDA graphs", None if graphs is None else graphs.bytes,
         "" if graphs is None else graphs.how),
        ("= non-KV + graphs", None if budget is None else budget.non_kv_bytes + budget.cuda_graph_budget_bytes,
         "consumed + transient peak + CUDA graphs"),
    ]
    return rows


# Release.non_kv_memory -> the terms of the breakdown
BREAKDOWN_TERMS: dict[NonKvMemory, Callable[[ProfileResult], list[Row]]] = {
    "weights_peak_non_torch": _terms_0_17_1,
    "consumed_plus_transient_peak": _terms_0_33_0,
}


def _breakdown(result: ProfileResult) -> Table:
    release = result.options.plan.release
    table = Table(title=f"Memory (per GPU, vLLM {release.version} accounting)", title_justify="left")
    table.add_column("term")
    table.add_column("GiB", justify="right")
    table.add_column("bytes", justify="right")
    table.add_column("how")
    budget = result.budget
    plan = result.plan
    config = plan.kv_config if plan is not None else None
    num_blocks = plan.sizing.num_blocks if plan is not None else None
    graphs = " - CUDA graphs" if release.cuda_graphs_in_budget else ""
    if budget is not None and release.cuda_graphs_in_budget and not GRAPH_ESTIMATE_TAKEN[budget.kv_sizing]:
        graphs = " (the capacity reserved: no CUDA-graph estimate, the size is measured after capture)"
    rows: list[Row] = [
        ("total", result.snapshot.total_bytes, ""),
        (f"requested (x {result.options.plan.utilization})",
         None if budget is None else budget.requested_bytes, "ceil(total x gpu_memory_utilization)"),
        *BREAKDOWN_TERMS[release.non_kv_memory](result),
        ("KV cache available", None if budget is None else budget.available_kv_bytes,
         "--kv-cache-memory as given" if result.options.plan.args.kv_cache_memory_bytes is not None
         else f"requested - non-KV{graphs}"),
        ("KV cache allocated", None if config is None else config.pool_bytes,
         "" if num_blocks is None or plan is None or config is None else
         f"{num_blocks:,} blocks x {plan.sizing.page_size_bytes:,} B x {len(config.kv_cache_tensors)} "
         f"{'regions of one allocation' if config.tensor_layout == 'shared_backing' else 'tensors'}"),
    ]
    outside = result.outside
    if release.cuda_graphs_in_budget:
        rows.append(("outside requested", outside.headroom_bytes, "total - requested: CUDA context"))
        rows.append(("  CUDA context", outside.cuda_context_bytes, outside.cuda_context_source))
    else:
        rows.append(("outside requested", outside.headroom_bytes, "total - requested: CUDA context + CUDA graphs"))
        rows.append(("  CUDA context", outside.cuda_context_bytes, outside.cuda_context_source))
        rows.append(("  CUDA-graph pool", outside.cuda_graph_bytes, outside.cuda_graph_source))
    for term, value, how in rows:
        table.add_row(term, _gib(value), _exact(value), how)
    return table


def _ranks(result: ProfileResult) -> Table | None:
    """Each pipeline stage's GPU, where the model is sharded: the smallest KV memory bounds them all."""
    if result.setup.cache.tensor_parallel_size == 1 and len(result.ranks) <= 1:
        return None
    tp = result.setup.cache.tensor_parallel_size
    table = Table(title=f"Per GPU of each pipeline stage ({tp} tensor-parallel rank{'s' if tp > 1 else ''} each, "
                        "equal shards)", title_justify="left")
    for column in ("stage", "layers", "weights", "activation peak", "non-torch", "KV cache available"):
        table.add_column(column, justify="right")
    binding = min(rank.budget.available_kv_bytes for rank in result.ranks)
    for rank in result.ranks:
        budget = rank.budget
        kv = _gib(budget.available_kv_bytes) + (" (bounds the pool)" if budget.available_kv_bytes == binding
                                                 and len(result.ranks) > 1 else "")
        table.add_row(str(rank.pp_rank), f"{rank.layers[0]}-{rank.layers[1] - 1}", _gib(budget.weights_bytes),
                      _gib(budget.activation_peak_bytes), _gib(budget.non_torch_bytes), kv)
    return table


def _layout(result: ProfileResult) -> Table | None:
    if result.plan is None or not result.plan.sizing.groups:
        return None
    table = Table(title="KV cache groups", title_justify="left")
    for column in ("group", "spec", "layers", "block", "page bytes"):
        table.add_column(column)
    for index, group in enumerate(result.plan.sizing.rank0_groups):
        spec = group.kv_cache_spec
        detail = spec.type_name
        if isinstance(spec, AttentionSpec):
            detail += f" {spec.num_kv_heads}x{spec.head_size} {spec.dtype}"
        table.add_row(str(index), detail, str(len(group.layer_names)), str(spec.block_size),
                      f"{spec.page_size_bytes:,}")
    return table


def _tensors(allocation: AllocationReport) -> Table:
    where = "allocated on the GPU" if allocation.device.startswith("cuda") else (
        "allocated in RAM" if allocation.real else "built on the meta device (no memory)")
    table = Table(title=f"KV tensors, {allocation.attention_backend} layout ({where})", title_justify="left")
    for column in ("layers", "tensor", "dtype", "shape", "strides (elements)"):
        table.add_column(column)
    layers = allocation.layouts
    shown = list(layers) if len(layers) <= 4 else [*layers[:2], None, layers[-1]]
    for layer in shown:
        if layer is None:
            table.add_row(f"... {len(layers) - 3} more", "", "", "", "")
            continue
        table.add_row(layer.layer_name, str(layer.tensor_index), layer.dtype,
                      " + ".join(str(tuple(s)) for s in layer.shapes),
                      " + ".join(str(tuple(s)) for s in layer.strides))
    return table


def _check_line(allocation: AllocationReport) -> str:
    check = allocation.check
    verdict = "[green]PASSED[/]" if check.passed else "[red]FAILED[/]"
    where = (f"on a real {allocation.check_pool_blocks}-block CPU pool with the same layout"
             if not allocation.real else f"on the allocated pool ({allocation.device})")
    parts = [
        f"Slot-mapping round trip {verdict} {where}: {check.tokens} tokens written through "
        f"slot = block x block_size + offset into blocks {escape(str(list(check.block_table)))} of "
        f"{check.layers_checked} tensors"
    ]
    marks = (
        (check.view_round_trip, "read back from the view"),
        (check.raw_bytes_match, f"found in the raw bytes where the {allocation.attention_backend} layout puts them"),
        (check.untouched_blocks_zero, "every other byte of those blocks and of untouched ones still zero"),
        (check.shared_storage, "views share their tensor"),
    )
    parts.append(", ".join(f"{'ok' if ok else 'NO'} {text}" for ok, text in marks))
    if check.detail:
        parts.append(escape(check.detail))
    if allocation.committed_bytes is not None:
        parts.append(f"committed while allocating: {human_bytes(allocation.committed_bytes)}")
    return "; ".join(parts)


def _workload_check(check: WorkloadCheck | None, console: Console) -> None:
    if check is None:
        console.print("Workload check: not run, the configuration does not fit (no KV cache was allocated)")
        return
    verdict = "[green]PASSED[/]" if check.passed else "[red]FAILED[/]"
    verified = " and ".join(check.layers_verified)
    console.print(
        f"Workload check {verdict} on the allocated pool: {escape(check.workload)}, {check.steps:,} steps; "
        f"{check.tokens_written:,} scheduled tokens' K/V written through each step's slot mapping into "
        f"{check.tensors_written} tensors; {check.tokens_verified:,} tokens read back through the block tables "
        f"from {escape(verified)} (every {check.verify_every} steps and at each request's end), "
        f"{check.prefix_hit_tokens_verified:,} of them prefix-cache hits: {check.mismatched_tokens:,} mismatches"
    )
    metrics = check.metrics
    kv, preemptions = metrics.kv, metrics.preemptions
    config = check.prepared.config
    table = Table(title="Workload on this pool", title_justify="left", show_header=False)
    table.add_column("")
    table.add_column("", justify="right")
    hit_rate = metrics.prefix_cache.prefix_cache_hit_rate
    # the figures of the record: 6 significant digits
    peak_usage = significant(kv.peak_usage)
    rows = [
        ("pool", f"{config.num_gpu_blocks:,} blocks of {config.block_size} tokens"),
        ("requests finished", f"{metrics.num_finished:,} of {metrics.num_requests:,}"
         + (" (stalled)" if metrics.stalled else "")),
        ("peak KV usage", f"{kv.peak_used_blocks:,} blocks ({peak_usage:.1%})"),
        ("preemptions", f"{preemptions.total:,} ({preemptions.recomputed_tokens:,} tokens recomputed)"),
        ("prefix-cache hit rate", "-" if hit_rate is None else f"{significant(hit_rate):.1%}"),
    ]
    for name, value in rows:
        table.add_row(name, value)
    console.print(table)
    for note in check.notes:
        console.print(f"[dim]note:[/] {escape(note)}")
    if check.finding:
        console.print(f"[bold red]Finding:[/] {escape(check.finding)}")


def _print_vllm_log(result: ProfileResult, console: Console) -> None:
    console.print("[bold]vLLM would log:[/]")
    for line in result.vllm_log:
        console.print(f"  {line}", markup=False)


def render_profile(result: ProfileResult, workload: WorkloadCheck | None = None, workload_requested: bool = False,
                   console: Console | None = None) -> None:
    console = console or ReportConsole(highlight=False)
    console.print(semantics_line(result.options.plan.release))
    console.print(_title(result))
    # the answer first, then vLLM's own lines, then the breakdown (issue 24, item 6)
    if result.plan is not None:
        for line in answer_lines(result.plan, predicted=result.predicted):
            console.print(line, markup=False)
    _print_vllm_log(result, console)
    console.print(_breakdown(result))
    if result.plan is not None and states_path(result.options.plan.release):
        print_sizing_path(result.plan, console)
    ranks = _ranks(result)
    if ranks is not None:
        console.print(ranks)
    layout = _layout(result)
    if layout is not None:
        console.print(layout)
    if result.allocation is not None:
        console.print(_tensors(result.allocation))
        console.print(_check_line(result.allocation))
    if workload_requested:
        _workload_check(workload, console)
    target = result.target
    if target is not None:
        longest = target.largest_max_model_len
        console.print(f"Largest max_model_len that fits: [bold]{longest:,}[/]" if longest else
                      "Not even one token fits in the KV cache.")
        util = target.gpu_memory_utilization
        console.print(
            f"One {target.max_model_len:,}-token request needs {_exact(target.kv_cache_memory_bytes)} B of KV "
            f"cache: --kv-cache-memory {target.kv_cache_memory_bytes}"
            + (f", or --gpu-memory-utilization {util}" if util is not None else
               " (no gpu_memory_utilization reaches it on this GPU)")
        )
        suggestion = target.suggestion
        if suggestion is not None:
            console.print(
                f"vLLM's own suggestion (logged at {suggestion.log_level}; CUDA graphs taken as "
                f"{_gib(result.budget.cuda_graph_bytes if result.budget else 0)}): "
                f"--kv-cache-memory={suggestion.to_requested_limit} to fit into requested memory, "
                f"--kv-cache-memory={suggestion.to_gpu_limit} to use the whole GPU", markup=False,
            )
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {escape(warning)}")
    if not result.fits:
        console.print(f"[bold red]Finding:[/] {escape(result.finding or '')}")
        alone = weights_alone_note(result.plan) if result.plan is not None else None
        if alone is not None:
            console.print(f"[bold]In short:[/] {escape(alone)}")
