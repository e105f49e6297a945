"""The plan record for people: model shape, layout, capacity, and vLLM's own log lines."""

from __future__ import annotations

from typing import Any

from rich.console import Console
from rich.table import Table

from kvplan.units import human_bytes


def _bytes(value: int | None) -> str:
    return "-" if value is None else f"{value:,} B ({human_bytes(value)})"


def _knobs_table(record: dict[str, Any]) -> Table:
    table = Table(show_header=False, box=None, pad_edge=False)
    table.add_column(style="bold")
    table.add_column()
    gpu = record["gpu"]
    device = "-" if gpu is None else f"{gpu['name']} ({gpu['key']})"
    rows = [
        ("model", f"{record['model']}  [{record['architecture']}, {record['num_hidden_layers']} layers, "
                  f"from {record['model_source']}]"),
        ("gpu", device),
        ("dtype / KV dtype", f"{record['dtype']} / {record['kv_dtype']} (--kv-cache-dtype {record['kv_cache_dtype']})"),
        ("block size", f"{record['block_size']} ({record['block_size_rule']})"),
        ("max_model_len", f"{record['max_model_len']:,}"),
        ("batch", f"{record['max_num_batched_tokens']:,} tokens, {record['max_num_seqs']} seqs"),
        ("parallel", f"TP {record['tensor_parallel_size']}, PP {record['pipeline_parallel_size']}"),
        ("prefix caching", "on" if record["enable_prefix_caching"] else "off"),
        ("KV memory per GPU", _bytes(record["kv_cache_memory_bytes"])),
    ]
    if record["weights_bytes"] is not None:
        per_gpu = _bytes(record["weights_per_gpu_bytes"])
        rows.append(("weights", f"{_bytes(record['weights_bytes'])}; per GPU {per_gpu}"))
    for key, value in rows:
        table.add_row(key, value)
    return table


def _groups_table(record: dict[str, Any]) -> Table:
    table = Table(title="KV cache groups (per GPU)", title_justify="left")
    for column in ("group", "spec", "layers", "block", "page bytes", "tensor view (flash_attn)"):
        table.add_column(column)
    for index, group in enumerate(record["kv_cache_groups"]):
        spec = group["spec"]
        detail = spec["type"]
        if "num_kv_heads" in spec:
            detail += f" {spec['num_kv_heads']}x{spec['head_size']} {spec['dtype']}"
        if spec.get("sliding_window"):
            detail += f" window {spec['sliding_window']}"
        if "mamba_type" in spec:
            detail += f" {spec['mamba_type']} {spec['shapes']}"
        shape = group["tensor_shape"]
        table.add_row(
            str(index), detail, str(group["num_layers"]), str(spec["block_size"]),
            f"{spec['page_size_bytes']:,}", "-" if shape is None else str(tuple(shape)),
        )
    return table


def render_plan(record: dict[str, Any], console: Console | None = None) -> None:
    console = console or Console(highlight=False)
    console.print(_knobs_table(record))
    console.print(_groups_table(record))
    if record["fits"]:
        tensors = record["kv_cache_tensors"]
        sizes = sorted({tensor["size"] for tensor in tensors})
        console.print(
            f"[bold]{record['num_blocks']:,} blocks[/] of {record['page_size_bytes']:,} B per layer "
            f"({record['num_usable_blocks']:,} usable: block 0 is the null block); "
            f"{len(tensors)} tensors of {', '.join(f'{size:,}' for size in sizes)} B "
            f"= {_bytes(record['kv_cache_tensors_total_bytes'])}"
        )
        console.print(f"KV bytes per token: {record['kv_bytes_per_token']:,}")
    else:
        console.print("[bold red]Does not fit.[/]")
    console.print("[bold]vLLM would log:[/]")
    for line in record["vllm_log"]:
        console.print(f"  {line}", markup=False)
    if not record["fits"]:
        console.print(f"  ValueError: {record['error']}", markup=False)
        if record["suggested_fix"]:
            console.print(f"[bold]Fix:[/] {record['suggested_fix']}")
    for warning in record["warnings"]:
        console.print(f"[yellow]warning:[/] {warning}")
