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
