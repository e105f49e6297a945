"""Rich renderings for people. Everything here reads result dataclasses; nothing computes."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from kvplan.gpus.catalog import GpuSpec

stdout = Console(highlight=False)


def render_gpus(gpus: list[GpuSpec]) -> None:
    table = Table(title="GPU catalog", title_justify="left")
    for column in ("key", "name", "total bytes (torch)", "GiB", "bf16 TFLOP/s", "GB/s", "cc"):
        table.add_column(column, justify="right" if column not in ("key", "name") else "left")
    for gpu in gpus:
        total = f"{gpu.total_bytes:,}" + (" ~" if gpu.total_is_approximate else "")
        table.add_row(
            gpu.key, gpu.name, total, f"{gpu.memory_gib:.2f}",
            "" if gpu.bf16_tflops is None else f"{gpu.bf16_tflops:g}",
            "" if gpu.bandwidth_gbps is None else f"{gpu.bandwidth_gbps:g}",
            gpu.arch,
        )
    stdout.print(table)
    stdout.print("~ approximate: no exact byte count was found; totals move a little with the driver.")


def render_models(entries: list) -> None:
    table = Table(title="Bundled models (vLLM defaults: TP 1, block 16, KV dtype auto)", title_justify="left")
    for column in ("model", "architecture", "layers", "layer kinds", "max len", "dtype", "KV B/token"):
        table.add_column(column, justify="right" if column in ("layers", "max len", "KV B/token") else "left")
    for entry in entries:
        kinds = ", ".join(f"{count} {kind}" for kind, count in entry.layer_kinds.items())
        per_token = entry.kv_bytes_per_token
        table.add_row(
            entry.model_id, entry.architecture, str(entry.num_hidden_layers), kinds,
            f"{entry.max_model_len:,}", entry.dtype,
            f"{per_token:,}" if isinstance(per_token, int) else f"{per_token:,.1f}",
        )
    stdout.print(table)
