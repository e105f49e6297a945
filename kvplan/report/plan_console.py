"""The plan for people: model shape, layout, capacity, and vLLM's own log lines."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from kvplan.report.answer import answer_lines
from kvplan.report.console import semantics_line
from kvplan.report.plan_json import pipeline_stages
from kvplan.report.sizing_path import measured_lines, path_line, states_path
from kvplan.report.stdout import ReportConsole
from kvplan.report.text import plain
from kvplan.semantics.kv.layout import view_shape
from kvplan.semantics.kv.specs import AttentionSpec, GroupSpec, MambaSpec
from kvplan.units import format_gib, human_bytes
from kvplan.usecases.plan import PlanResult


def _bytes(value: int | None) -> str:
    return "-" if value is None else f"{value:,} B ({human_bytes(value)})"


def _kv_memory(value: int | None) -> str:
    if value is not None and value < 0:
        # what vLLM computes (a negative budget), said as what it means
        return f"none: the non-KV memory is {human_bytes(-value)} more than the budget"
    return _bytes(value)


def _settings_table(result: PlanResult) -> Table:
    setup, summary, request = result.setup, result.summary, result.request
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    gpu = setup.device.gpu
    device = "-" if gpu is None else f"{gpu.name} ({gpu.key})"
    shape, layout = setup.shape, setup.layout
    rows = [
        ("model", f"{shape.model_id}  [{shape.architecture}, {shape.num_hidden_layers} layers, "
                  f"from {setup.resolved.source}]"),
        ("gpu", device),
        ("dtype / KV dtype", f"{setup.model_dtype} / {layout.kv_dtype} (--kv-cache-dtype {layout.cache_dtype})"),
        ("block size", f"{layout.block_size} ({layout.block_size_rule})"),
        ("max_model_len", f"{summary.max_model_len:,}"),
        ("batch", f"{summary.max_num_batched_tokens:,} tokens, {summary.max_num_seqs} seqs"),
        ("parallel", f"TP {request.value('tensor_parallel_size')}, PP {request.value('pipeline_parallel_size')}"),
        ("prefix caching", "on" if summary.enable_prefix_caching else "off"),
        ("KV memory per GPU", _kv_memory(summary.kv_cache_memory_bytes)),
    ]
    if summary.weights_bytes is not None:
        per_gpu = _bytes(summary.weights_per_gpu_bytes)
        rows.append(("weights", f"{_bytes(summary.weights_bytes)}; per GPU {per_gpu}"))
    elif result.weights_unknown is not None:
        rows.append(("weights", f"unknown: {result.weights_unknown}"))
    if result.non_torch_bytes is not None:
        # a predicted KV memory's term outside torch (usecases/non_torch.py), with its source
        rows.append(("non-torch memory", f"{format_gib(result.non_torch_bytes)} GiB per GPU, "
                                         f"{result.non_torch_source or 'assumed 0'}"))
    for key, value in rows:
        table.add_row(key, plain(value))
    return table


def spec_detail(spec: GroupSpec) -> str:
    """`FullAttentionSpec 2x64 bfloat16 window 4096`: the spec's type and what sizes its page."""
    detail = spec.type_name
    if isinstance(spec, AttentionSpec):
        detail += f" {spec.num_kv_heads}x{spec.head_size} {spec.dtype}"
        window = getattr(spec, "sliding_window", None)
        if window:
            detail += f" window {window}"
    if isinstance(spec, MambaSpec):
        detail += f" {spec.mamba_type} {[list(shape) for shape in spec.shapes]}"
    return detail


def _groups_table(result: PlanResult) -> Table:
    # rank 0's groups, as vLLM logs them; with pipeline parallelism each stage holds its own layers
    staged = result.request.value("pipeline_parallel_size") > 1
    title = "KV cache groups (per GPU" + (", rank 0: the first pipeline stage)" if staged else ")")
    table = Table(title=title, title_justify="left")
    tensor_layout = result.request.release.kv_tensor_layout
    view = "LBNHC" if tensor_layout == "shared_backing" else "flash_attn"
    for column in ("group", "spec", "layers", "block", "page bytes", f"tensor view ({view})"):
        table.add_column(column)
    num_blocks = result.summary.num_blocks
    for index, group in enumerate(result.sizing.rank0_groups):
        spec = group.kv_cache_spec
        shape = None if num_blocks is None else view_shape(spec, num_blocks, tensor_layout=tensor_layout)
        table.add_row(
            str(index), plain(spec_detail(spec)), str(len(group.layer_names)), str(spec.block_size),
            f"{spec.page_size_bytes:,}", "-" if shape is None else str(shape),
        )
    return table


def _stages_table(result: PlanResult) -> Table:
    """Each pipeline stage's layers and what one of its GPUs holds."""
    table = Table(title="Pipeline stages (per GPU of each)", title_justify="left")
    for column in ("stage", "layers", "KV layers per group", "weights", "KV memory", "blocks"):
        table.add_column(column)
    for stage in pipeline_stages(result):
        start, end = stage["layers"]
        table.add_row(
            str(stage["pp_rank"]), f"{start}-{end - 1}",
            " + ".join(str(group["num_layers"]) for group in stage["kv_cache_groups"]),
            _bytes(stage["weights_bytes"]), _bytes(stage["kv_cache_memory_bytes"]),
            "-" if stage["num_blocks"] is None else f"{stage['num_blocks']:,}",
        )
    return table


def print_sizing_path(result: PlanResult, console: Console) -> None:
    """0.34.0: the path that sized the cache and why; on the measured path its terms."""
    console.print(path_line(result.sizing_path), markup=False)
    if result.measured is not None:
        console.print("Measured after warmup and CUDA-graph capture (docs/vllm/changes-0.34.md 1.4):")
        for line in measured_lines(result.measured):
            console.print(line, markup=False)


def print_vllm_log(result: PlanResult, console: Console) -> None:
    console.print("[bold]vLLM would log:[/]")
    for line in (*result.setup.logs, *result.sizing.log_lines):
        console.print(f"  {line}", markup=False)


def render_plan(result: PlanResult, console: Console | None = None) -> None:
    console = console or ReportConsole(highlight=False)
    summary, sizing = result.summary, result.sizing
    console.print(semantics_line(result.request.release))
    # the answer first, then vLLM's own lines, then how it was reached (issue 24, item 6)
    for line in answer_lines(result, predicted=result.memory_source.startswith("predicted")):
        console.print(line, markup=False)
    print_vllm_log(result, console)
    console.print(_settings_table(result))
    console.print(_groups_table(result))
    if result.request.value("pipeline_parallel_size") > 1:
        console.print(_stages_table(result))
    config = sizing.config
    if summary.fits and config is not None:
        tensors = config.kv_cache_tensors
        sizes = sorted({tensor.size for tensor in tensors})
        if config.tensor_layout == "shared_backing":
            layers = sum(len(tensor.shared_by) for tensor in tensors)
            pool = f"one backing allocation of {_bytes(config.pool_bytes)}, viewed by {layers} layers"
        else:
            pool = (f"{len(tensors)} tensors of {', '.join(f'{size:,}' for size in sizes)} B "
                    f"= {_bytes(config.pool_bytes)}")
        console.print(
            f"[bold]{summary.num_blocks:,} blocks[/] of {sizing.page_size_bytes:,} B per layer "
            f"({summary.num_usable_blocks:,} usable: block 0 is the null block); {pool}"
        )
        console.print(f"KV bytes per token: {summary.kv_bytes_per_token:,}")
    else:
        console.print("[bold red]Does not fit.[/]")
    if states_path(result.request.release):
        print_sizing_path(result, console)
    if not summary.fits:
        console.print(f"  ValueError: {summary.error}", markup=False)
        if result.suggested_fix:
            console.print(f"[bold]Fix:[/] {plain(result.suggested_fix)}")
    for warning in result.warnings:
        console.print(f"[yellow]warning:[/] {plain(warning)}")
