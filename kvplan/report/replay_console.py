"""The replay on a terminal: the run's summary (the JSON Lines are `replay_records`)."""

from __future__ import annotations

from rich.table import Table

from kvplan.report.console import semantics_line
from kvplan.report.stdout import ReportConsole
from kvplan.report.text import plain
from kvplan.semantics.engine.groups import KVCacheGroup
from kvplan.semantics.engine.replay import ReplaySummary


def render_replay_summary(summary: ReplaySummary, trace_name: str) -> None:
    config = summary.config
    usable = config.num_gpu_blocks - 1
    table = Table(title=f"kvplan replay {plain(trace_name)}", show_header=False, title_justify="left")
    table.add_column(style="bold")
    table.add_column(justify="right")
    table.add_row("vLLM semantics", f"{config.vllm_version}, {config.scheduling} scheduling")
    table.add_row("steps", f"{summary.num_steps:,}" + (" (stalled)" if summary.stalled else ""))
    table.add_row("finished", f"{summary.num_finished:,} / {summary.num_requests:,}")
    table.add_row("preemptions", f"{summary.total_preemptions:,}")
    hit_rate = (f"{summary.prefix_cache_hit_rate:.1%} ({summary.prefix_cache_hits:,} / "
                f"{summary.prefix_cache_queries:,} tokens)")
    table.add_row("prefix-cache hit rate", hit_rate if config.enable_prefix_caching else "caching off")
    peak = summary.max_used_blocks
    table.add_row("peak blocks in use", f"{peak:,} / {usable:,} ({peak / usable:.1%})")
    table.add_row("pool", f"{config.num_gpu_blocks:,} blocks x {config.block_size} tokens")
    if config.kv_cache_groups is not None:
        table.add_row("KV cache groups", ", ".join(_group_label(group) for group in config.groups))
    console = ReportConsole()
    console.print(f"{semantics_line(config.release)}, {config.scheduling} scheduling", highlight=False)
    console.print(table)
    console.print("[dim]JSON Lines: pipe the output, or use -o FILE or --json[/dim]", highlight=False)


def _group_label(group: KVCacheGroup) -> str:
    """"sliding window 4096": the group's type and its window, chunk or Mamba cache mode."""
    return " ".join([group.spec.kind.replace("_", " "), *map(str, group.parameters.values())])
