"""Rich renderings for people. Everything here reads result dataclasses; nothing computes."""

from __future__ import annotations

from collections.abc import Sequence

from rich.console import Console
from rich.table import Table
from rich.text import Text

from kvplan.gpus.catalog import GpuSpec
from kvplan.report.stdout import ReportConsole
from kvplan.semantics.config.scheduler import BatchLimits
from kvplan.semantics.releases import Release

stdout = ReportConsole(highlight=False)


def semantics_line(release: Release) -> str:
    """The first line of every console output: whose rules the numbers follow."""
    return f"vLLM {release.version} semantics"


# the narrowest a wrapping column may get before the table gives way to one block per row
_NARROWEST_TEXT_COLUMN = 6


def _print_catalog(
    console: Console, title: str, headers: Sequence[str], numbers: set[str], rows: Sequence[Sequence[str]],
) -> None:
    """A table whose first column (the key users type back: a GPU key, a model id) is never cut nor
    wrapped, and whose `numbers` columns keep each figure on one line (their headers wrap); the other
    columns wrap, folding words longer than the column. Where that cannot fit the console (a pipe is
    80 columns), one block per row: the key on its own line, then its other cells as `header: value`,
    so that at any width every key is printed whole."""

    def fixed_width(index: int) -> int:
        return max(*(len(word) for word in headers[index].split()), *(len(row[index]) for row in rows))

    widths = {index: fixed_width(index) for index, header in enumerate(headers) if index == 0 or header in numbers}
    texts = len(headers) - len(widths)
    # no outer border: between two columns a border and a space either side
    needed = sum(widths.values()) + texts * _NARROWEST_TEXT_COLUMN + 3 * (len(headers) - 1)
    if console.width >= needed:
        table = Table(title=title, title_justify="left", show_edge=False, pad_edge=False)
        for index, header in enumerate(headers):
            if index in widths:
                # as wide as its longest cell: no cell wraps, and the header wraps between its words
                table.add_column(header, justify="left" if index == 0 else "right", width=widths[index])
            else:
                table.add_column(header, overflow="fold")
        for row in rows:
            table.add_row(*(Text(cell) for cell in row))
        console.print(table)
        return
    console.print(Text(title, style="italic"))
    for row in rows:
        # a key wider than the screen is still written whole: the terminal wraps it, nothing cuts it
        console.out(row[0], highlight=False)
        for header, cell in zip(headers[1:], row[1:], strict=True):
            console.print(Text(f"  {header}: {cell}"))


def render_gpus(gpus: list[GpuSpec], defaults: list[BatchLimits], release: Release,
                console: Console | None = None) -> None:
    """The catalog, then the batch defaults `vllm serve` of the release picks for each GPU."""
    console = console or stdout
    console.print(semantics_line(release))
    headers = ("key", "name", "total bytes (torch)", "GiB", "bf16 TFLOP/s", "GB/s", "cc")
    rows = [
        (
            gpu.key, gpu.name, f"{gpu.total_bytes:,}" + (" ~" if gpu.total_is_approximate else ""),
            f"{gpu.memory_gib:.2f}", "" if gpu.bf16_tflops is None else f"{gpu.bf16_tflops:g}",
            "" if gpu.bandwidth_gbps is None else f"{gpu.bandwidth_gbps:g}", gpu.arch,
        )
        for gpu in gpus
    ]
    _print_catalog(console, "GPU catalog", headers, set(headers) - {"key", "name"}, rows)
    console.print("~ approximate: no exact byte count was found; totals move a little with the driver.")
    batch_headers = ("key", "max_num_batched_tokens", "max_num_seqs")
    batch_rows = [(gpu.key, f"{batch.max_num_batched_tokens:,}", f"{batch.max_num_seqs:,}")
                  for gpu, batch in zip(gpus, defaults, strict=True)]
    _print_catalog(console, f"What `vllm serve` {release.version} picks on each GPU", batch_headers,
                   set(batch_headers[1:]), batch_rows)


def render_models(entries: list, release: Release, console: Console | None = None) -> None:
    console = console or stdout
    console.print(semantics_line(release))
    headers = ("model", "architecture", "layers", "layer kinds", "max len", "dtype", "KV B/token")
    rows = []
    for entry in entries:
        per_token = entry.kv_bytes_per_token
        rows.append((
            entry.model_id, entry.architecture, str(entry.num_hidden_layers),
            ", ".join(f"{count} {kind}" for kind, count in entry.layer_kinds.items()),
            f"{entry.max_model_len:,}", entry.dtype,
            f"{per_token:,}" if isinstance(per_token, int) else f"{per_token:,.1f}",
        ))
    _print_catalog(console, "Bundled models (vLLM defaults: TP 1, block 16, KV dtype auto)", headers,
                   {"layers", "max len", "dtype", "KV B/token"}, rows)
