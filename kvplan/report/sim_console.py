"""The terminal report of `kvplan simulate`: summary tables and a KV-usage chart drawn with text.

Everything derived from the step-time model is marked "(est.)". Rendering only: the numbers come
from ``kvplan.report.simulate_json.result_document``, the same document ``--json`` prints.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

from kvplan.report.simulate_json import SeriesRow, round_floats, series_rows
from kvplan.report.text import plain, valid_text
from kvplan.semantics.kv.specs import KVCacheSpec
from kvplan.units import format_duration, significant
from kvplan.usecases.simulate.capacity_search import Capacity
from kvplan.usecases.simulate.measured_step import KernelStepTime
from kvplan.usecases.simulate.metrics import Latency, RunMetrics, Summary
from kvplan.usecases.simulate.simulation import SimResult
from kvplan.usecases.simulate.timing import CalibratedStepTime, ConstantStepTime, RooflineStepTime, StepTimeModel

EIGHTHS = " ▁▂▃▄▅▆▇█"
SPARK = "▁▂▃▄▅▆▇█"
USED_STYLE = "bold cyan"
CACHED_STYLE = "grey50"


def _num(value: Any, digits: int = 3) -> str:
    if value is None:
        return "-"
    if isinstance(value, int):
        return f"{value:,}"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.{digits}g}"


def _count(number: int, noun: str, plural: str | None = None) -> str:
    return f"{number:,} {noun}" if number == 1 else f"{number:,} {plural or noun + 's'}"


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{100 * value:.1f}%"


def _seconds(value: float | None) -> str:
    return "-" if value is None else format_duration(value)


@dataclass(frozen=True)
class ChartColumn:
    """One column of the text chart: the coverage-weighted means of the buckets it spans."""

    used_blocks: float
    evictable_cached_blocks: float
    waiting: float


def _columns(rows: tuple[SeriesRow, ...], width: int) -> list[ChartColumn]:
    """Resample the series rows to ``width`` columns (coverage-weighted means)."""
    if not rows:
        return []
    width = max(1, min(width, len(rows)))
    out = []
    for column in range(width):
        chunk = rows[column * len(rows) // width: (column + 1) * len(rows) // width] or rows[-1:]
        weight = sum(r.coverage for r in chunk) or 1.0
        out.append(ChartColumn(
            used_blocks=sum(r.used_blocks * r.coverage for r in chunk) / weight,
            evictable_cached_blocks=sum(r.evictable_cached_blocks * r.coverage for r in chunk) / weight,
            waiting=sum(r.waiting * r.coverage for r in chunk) / weight,
        ))
    return out


def usage_chart(result: SimResult, width: int = 72, height: int = 8) -> Text:
    """Used blocks (solid, eighth-cell precision) and cached-but-free blocks (shaded) over time."""
    metrics = result.metrics
    usable = metrics.kv.usable_blocks
    rows = series_rows(metrics)
    columns = _columns(rows, width)
    chart = Text()
    for row in range(height, 0, -1):
        label = {height: "100%", (height + 1) // 2: " 50%", 1: "  0%"}.get(row, "    ")
        chart.append(f"{label} ┤", style="dim")  # 6 columns, as the other rows
        for column in columns:
            used = column.used_blocks / usable * height
            cached = (column.used_blocks + column.evictable_cached_blocks) / usable * height
            filled = used - (row - 1)
            if filled >= 1:
                chart.append("█", style=USED_STYLE)
            elif filled > 0:
                chart.append(EIGHTHS[max(1, round(filled * 8))], style=USED_STYLE)
            elif cached > row - 1 + 0.5:
                chart.append("░", style=CACHED_STYLE)
            else:
                chart.append(" ")
        chart.append("\n")
    chart.append("     └" + "─" * len(columns) + "\n", style="dim")
    chart.append("      " + _x_axis(result, len(rows), len(columns)) + "\n", style="dim")
    chart.append("wait ┤", style="dim")
    chart.append(sparkline([c.waiting for c in columns]) + "\n", style="yellow")
    chart.append("      █ used blocks  ", style=USED_STYLE)
    chart.append("░ cached, free (evictable)  ", style=CACHED_STYLE)
    chart.append(f"▁▅█ waiting requests (max {_num(metrics.queues.max_waiting)})", style="yellow")
    return chart


def series_end(metrics: RunMetrics, num_rows: int) -> float:
    """Where the series' last bucket ends (steps, or estimated seconds)."""
    bucket = significant(metrics.series_bucket)
    assert bucket is not None
    return bucket * num_rows


def _x_axis(result: SimResult, num_rows: int, width: int) -> str:
    end = series_end(result.metrics, num_rows)
    if result.setup.timer is None:
        left, right = "step 0", f"step {end:,.0f}"
    else:
        left, right = "0 s", f"{_seconds(end)} (est.)"
    return left + " " * max(1, width - len(left) - len(right)) + right


def sparkline(values: list[float]) -> str:
    top = max(values, default=0.0)
    if top <= 0:
        return SPARK[0] * len(values)
    return "".join(SPARK[min(len(SPARK) - 1, int(v / top * (len(SPARK) - 1) + 0.5))] for v in values)


def _pairs(rows: list[tuple[str, str]]) -> Table:
    table = Table.grid(padding=(0, 2))
    table.add_column(style="dim")
    table.add_column()
    for key, value in rows:
        table.add_row(key, plain(value))
    return table


def _config(result: SimResult) -> Table:
    setup = result.setup
    config, facts = setup.config, setup.engine.facts
    groups = setup.engine.kv_cache_groups
    pool = (f"{config.num_gpu_blocks:,} blocks ({config.num_usable_blocks:,} usable) × {config.block_size} "
            f"tokens = {config.num_usable_blocks * config.block_size:,} tokens  [{setup.engine.source}]")
    if len(groups) > 1:
        pool = (f"{config.num_gpu_blocks:,} blocks ({config.num_usable_blocks:,} usable) shared by "
                f"{len(groups)} KV cache groups  [{setup.engine.source}]")
    rows = [("pool", pool)]
    if setup.engine.planned_groups or config.kv_cache_groups is not None:
        layers = bool(setup.engine.planned_groups)
        rows.append(("KV cache groups", "; ".join(group_label(g.spec, g.block_size, g.sliding_window,
                                                               g.attention_chunk_size, g.num_layers if layers else None)
                                                   for g in groups)
                     + f"  (GPU KV cache size {setup.engine.gpu_kv_cache_tokens:,} tokens)"))
    if facts.model:
        rows.append(("model", f"{facts.model} on {facts.gpu or '?'}"))
    rows.append(("scheduler", f"max_num_seqs {config.max_num_seqs}, max_num_batched_tokens "
                              f"{config.max_num_batched_tokens:,}, max_model_len {config.max_model_len:,}, "
                              f"chunked prefill {'on' if config.enable_chunked_prefill else 'off'}, "
                              f"prefix caching {'on' if config.enable_prefix_caching else 'off'}"))
    rows.append(("step time", timing_text(setup.timer)))
    workload = setup.workload
    if workload.is_explicit:
        arrivals = "steps" if setup.in_steps else "seconds"
        what = f"{_count(len(setup.explicit), 'listed request')}, arrivals in {arrivals}"
    else:
        process = workload.arrival.process if workload.arrival else None
        what = f"{_count(len(workload.classes), 'class', 'classes')}, {process} arrivals"
    rows.append(("workload", f"{workload.name}: {what}, seed {setup.seed}"))
    return _pairs(rows)


def group_label(spec: type[KVCacheSpec], block_size: int | None, window: int | None, chunk: int | None,
                num_layers: int | None) -> str:
    """One KV cache group in words: "sliding window 4096, 21 layers, block 16"."""
    text = spec.kind.replace("_", " ")
    if window is not None:
        text += f" {window:,}"
    if chunk is not None:
        text += f" (chunks of {chunk:,})"
    if num_layers is not None:
        text += f", {_count(num_layers, 'layer')}"
    return text + (f", block {block_size:,}" if block_size is not None else "")


def _ms(seconds: float) -> float:
    value = significant(seconds * 1e3)
    assert value is not None
    return value


def timing_text(timer: StepTimeModel | None) -> str:
    if timer is None:
        return "none (results in steps only)"
    if isinstance(timer, ConstantStepTime):
        return f"constant {_ms(timer.step_s):.3g} ms ({timer.source}), estimate"
    if isinstance(timer, CalibratedStepTime):
        return f"calibrated from {len(timer.points)} points ({timer.source}), estimate"
    if isinstance(timer, KernelStepTime):
        return f"estimate: {timer.method}"
    assert isinstance(timer, RooflineStepTime)
    if timer.factors is not None:
        return f"estimate: {timer.method}"
    bandwidth, tflops = significant(timer.bandwidth_bytes_per_s / 1e9), significant(timer.flops_per_s / 1e12)
    return (f"roofline estimate on {timer.gpu}: {bandwidth:,.0f} GB/s, "
            f"{tflops:,.0f} TFLOPS, +{_ms(timer.overhead_s):.3g} ms per step")


def _outcome(metrics: RunMetrics) -> Table:
    throughput = metrics.throughput
    kv = metrics.kv
    status = "[bold red]STALLED[/] (a request cannot make progress even alone)" if metrics.stalled else "completed"
    rows = [
        ("run", f"{status}: {metrics.num_finished:,}/{metrics.num_requests:,} requests finished in "
                f"{metrics.num_steps:,} steps"
                + (f", {_seconds(throughput.duration_s_estimate)} (est.)"
                   if throughput.duration_s_estimate is not None else "")),
        ("KV usage", f"peak {kv.peak_used_blocks:,} blocks ({_pct(kv.peak_usage)}), "
                     f"mean {_pct(kv.mean_usage)}, "
                     f"p50/p95/p99 {kv.p50_used_blocks:,}/{kv.p95_used_blocks:,}/{kv.p99_used_blocks:,} "
                     f"blocks, full {_pct(kv.time_at_full_fraction)} of the {_weighting(kv.weighting)}"),
        ("cached, free", f"mean {_num(kv.mean_evictable_cached_blocks)} evictable blocks, "
                         f"peak {kv.peak_cached_blocks:,} hashed blocks"),
    ]
    for number, group in enumerate(kv.groups):
        label = group_label(group.spec, group.block_size, group.sliding_window, group.attention_chunk_size,
                            group.num_layers)
        rows.append((f"group {number}", f"{label}: peak {group.peak_used_blocks:,} blocks, mean "
                                        f"{_num(group.mean_used_blocks)} ({_pct(group.mean_share)} of the pool)"))
    preemptions = metrics.preemptions
    rows.append(("preemptions", f"{preemptions.total:,} ({_count(preemptions.requests_preempted, 'request')}, "
                                f"{preemptions.requests_preempted_more_than_once:,} more than once, at most "
                                f"{preemptions.max_per_request} per request), "
                                f"{preemptions.recomputed_tokens:,} tokens recomputed"))
    prefix = metrics.prefix_cache
    rows.append(("prefix cache", f"hit rate {_pct(prefix.prefix_cache_hit_rate)} (vLLM's, every lookup), "
                                 f"{_pct(prefix.first_admission_hit_rate)} at first admission; "
                                 f"preempted lookups {prefix.preempted_hits:,}/"
                                 f"{prefix.preempted_queries:,} tokens"))
    queues = metrics.queues
    rows.append(("queues", f"running mean {_num(queues.mean_running)} (max {queues.max_running}), "
                           f"waiting mean {_num(queues.mean_waiting)} (max {queues.max_waiting})"))
    if throughput.requests_per_s_estimate is not None:
        rows.append(("throughput", f"{_num(throughput.requests_per_s_estimate)} req/s, "
                                   f"{_num(throughput.output_tokens_per_s_estimate)} output tok/s, "
                                   f"{_num(throughput.prompt_tokens_per_s_estimate)} prompt tok/s (est.)"))
    else:
        rows.append(("throughput", f"{_num(throughput.output_tokens_per_step)} output tokens per step"))
    return _pairs(rows)


def _weighting(weighting: str) -> str:
    return "estimated time" if weighting == "estimated seconds" else "steps"


def _latency(metrics: RunMetrics) -> Table:
    latency = metrics.latency
    timed = latency.ttft_s_estimate is not None
    table = Table(title="Latency per request" + (" (seconds are estimates)" if timed else " (in steps)"),
                  title_justify="left", header_style="bold")
    table.add_column("")
    for label in ("p50", "p95", "p99", "max"):
        table.add_column(label, justify="right")
    for name, seconds, steps in latency_rows(latency):
        step_values = (steps.p50, steps.p95, steps.p99, steps.max)
        if timed and seconds is not None:
            second_values = (seconds.p50, seconds.p95, seconds.p99, seconds.max)
            cells = [_seconds(s) + f" / {_num(st)} st" for s, st in zip(second_values, step_values, strict=True)]
        else:
            cells = [f"{_num(st)} steps" for st in step_values]
        table.add_row(name, *cells)
    return table


def _classes(metrics: RunMetrics) -> Table:
    timed = metrics.latency.ttft_s_estimate is not None
    table = Table(title="Per class", title_justify="left", header_style="bold")
    for label in ("class", "requests", "finished", "prompt", "output", "preempt.", "hit rate", "1st-adm. hits",
                  "TTFT p95" + (" (est.)" if timed else ""), "E2E p95" + (" (est.)" if timed else "")):
        table.add_column(label, justify="left" if label == "class" else "right")
    for name, *cells in class_rows(metrics):
        table.add_row(plain(name), *cells)   # a class name is the user's text, never markup
    return table


def latency_rows(latency: Latency) -> tuple[tuple[str, Summary | None, Summary], ...]:
    """Each latency's name, its estimated seconds (None without a time model) and its steps."""
    return (("queueing", latency.queueing_s_estimate, latency.queueing_steps),
            ("time to first token", latency.ttft_s_estimate, latency.ttft_steps),
            ("time per output token", latency.tpot_s_estimate, latency.tpot_steps),
            ("end to end", latency.e2e_s_estimate, latency.e2e_steps))


def class_rows(metrics: RunMetrics) -> list[list[str]]:
    """One row per class: counts, mean lengths, preemptions, hit rates, then TTFT and E2E p95 in
    estimated seconds (in steps without a time model)."""
    timed = metrics.latency.ttft_s_estimate is not None
    rows = []
    for item in metrics.classes:
        latency = item.latency
        if timed and latency.ttft_s_estimate is not None and latency.e2e_s_estimate is not None:
            ttft, e2e = _seconds(latency.ttft_s_estimate.p95), _seconds(latency.e2e_s_estimate.p95)
        else:
            ttft, e2e = _num(latency.ttft_steps.p95), _num(latency.e2e_steps.p95)
        rows.append([
            item.name, _num(item.num_requests), _num(item.num_finished),
            _num(item.mean_prompt_tokens, 4), _num(item.mean_output_tokens, 4), _num(item.preemptions),
            _pct(item.prefix_cache_hit_rate), _pct(item.first_admission_hit_rate), ttft, e2e,
        ])
    return rows


def _capacity(capacity: Capacity) -> Table:
    zero = capacity.zero_preemption
    rows = []
    if zero.num_gpu_blocks is None:
        rows.append(("zero preemptions", zero.method))
    else:
        enough = "the configured pool is enough" if zero.configured_is_enough else "more than configured"
        memory = f", {zero.kv_bytes / 2**30:.2f} GiB of KV cache" if zero.kv_bytes is not None else ""
        rows.append(("zero preemptions", f"num_gpu_blocks {zero.num_gpu_blocks:,} "
                                         f"({zero.kv_tokens:,} tokens{memory}): {enough}"))
    rate = capacity.max_rate
    if rate is not None:
        if rate.max_sustained_rate_rps_estimate is None:
            answer = "none of the rates tried was sustained"
        else:
            bound = "" if rate.bounded_above else " or more (every rate tried was sustained)"
            answer = (f"{rate.max_sustained_rate_rps_estimate:.3g} requests/s{bound} (est.; the workload offers "
                      f"{rate.nominal_rate_rps:.3g}; {len(rate.trials)} simulations)")
        rows.append(("max sustained rate", answer))
    return _pairs(rows)


def render(result: SimResult, console: Console) -> None:
    """Print the whole report of a simulation."""
    width = max(20, min(100, console.width - 14))
    metrics = round_floats(result.metrics)
    parts: list[Any] = [
        _config(result), Text(""), _outcome(metrics), Text(""),
        Panel(usage_chart(result, width=width), title="KV-cache usage over time", title_align="left",
              border_style="dim"),
        _latency(metrics), _classes(metrics), Text(""), _capacity(round_floats(result.capacity)),
    ]
    for warning in result.notes:
        parts.append(Text(valid_text(f"warning: {warning}"), style="yellow"))
    config = result.setup.config
    console.print(Panel(Group(*parts), title=f"kvplan simulate · vLLM {config.release.version} semantics, "
                                             f"{config.scheduling} scheduling", title_align="left"))
