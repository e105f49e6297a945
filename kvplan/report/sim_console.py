"""The terminal report of `kvplan simulate`: summary tables and a KV-usage chart drawn with text.

Everything derived from the step-time model is marked "(est.)". Rendering only: the numbers come
from ``kvplan.report.simulate_json.result_document``, the same document ``--json`` prints.
"""

from __future__ import annotations

from typing import Any

from rich.console import Console, Group
from rich.panel import Panel
from rich.table import Table
from rich.text import Text

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
    if value is None:
        return "-"
    if value < 1:
        return f"{value * 1000:.3g} ms"
    return f"{value:.3g} s"


def _columns(series: dict[str, Any], width: int) -> list[dict[str, float]]:
    """Resample the series rows to ``width`` columns (coverage-weighted means, maxima)."""
    names = series["columns"]
    rows = [dict(zip(names, row, strict=True)) for row in series["rows"]]
    if not rows:
        return []
    width = max(1, min(width, len(rows)))
    out = []
    for column in range(width):
        chunk = rows[column * len(rows) // width: (column + 1) * len(rows) // width] or rows[-1:]
        weight = sum(r["coverage"] for r in chunk) or 1.0
        merged = {name: sum(r[name] * r["coverage"] for r in chunk) / weight
                  for name in names if name.endswith("_mean")}
        merged.update({name: max(r[name] for r in chunk) for name in names if name.endswith("_max")})
        out.append(merged)
    return out


def usage_chart(document: dict[str, Any], width: int = 72, height: int = 8) -> Text:
    """Used blocks (solid, eighth-cell precision) and cached-but-free blocks (shaded) over time."""
    usable = document["kv_usage"]["usable_blocks"]
    columns = _columns(document["series"], width)
    chart = Text()
    for row in range(height, 0, -1):
        label = {height: "100%", (height + 1) // 2: " 50%", 1: "  0%"}.get(row, "    ")
        chart.append(f"{label} ┤", style="dim")  # 6 columns, as the other rows
        for column in columns:
            used = column["used_blocks_mean"] / usable * height
            cached = (column["used_blocks_mean"] + column["evictable_cached_blocks_mean"]) / usable * height
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
    chart.append("      " + _x_axis(document, len(columns)) + "\n", style="dim")
    chart.append("wait ┤", style="dim")
    chart.append(sparkline([c["waiting_mean"] for c in columns]) + "\n", style="yellow")
    chart.append("      █ used blocks  ", style=USED_STYLE)
    chart.append("░ cached, free (evictable)  ", style=CACHED_STYLE)
    chart.append(f"▁▅█ waiting requests (max {_num(document['queues']['max_waiting'])})", style="yellow")
    return chart


def _x_axis(document: dict[str, Any], width: int) -> str:
    series = document["series"]
    end = series["bucket"] * len(series["rows"])
    if series["x"] == "step":
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
        table.add_row(key, value)
    return table


def _config(document: dict[str, Any]) -> Table:
    engine = document["engine"]
    timing = document["timing"]
    pool = (f"{engine['num_gpu_blocks']:,} blocks ({engine['usable_blocks']:,} usable) × {engine['block_size']} "
            f"tokens = {engine['usable_blocks'] * engine['block_size']:,} tokens  [{engine['source']}]")
    rows = [("pool", pool)]
    if engine.get("model"):
        rows.append(("model", f"{engine['model']} on {engine.get('gpu') or '?'}"))
    rows.append(("scheduler", f"max_num_seqs {engine['max_num_seqs']}, max_num_batched_tokens "
                              f"{engine['max_num_batched_tokens']:,}, max_model_len {engine['max_model_len']:,}, "
                              f"chunked prefill {'on' if engine['enable_chunked_prefill'] else 'off'}, "
                              f"prefix caching {'on' if engine['enable_prefix_caching'] else 'off'}"))
    rows.append(("step time", _timing(timing)))
    workload = document["workload"]
    arrival = workload.get("arrival")
    what = (f"{_count(len(workload['classes']), 'class', 'classes')}, {arrival['process']} arrivals"
            if workload["kind"] == "mix"
            else f"{_count(workload['num_requests'], 'listed request')}, arrivals in {workload['arrivals']}")
    rows.append(("workload", f"{workload['name']}: {what}, seed {workload['seed']}"))
    return _pairs(rows)


def _timing(timing: dict[str, Any] | None) -> str:
    if timing is None:
        return "none (results in steps only)"
    if timing["model"] == "constant":
        return f"constant {timing['step_time_ms']:.3g} ms ({timing['source']}), estimate"
    if timing["model"] == "calibrated":
        return f"calibrated from {len(timing['points'])} points ({timing['source']}), estimate"
    return (f"roofline estimate on {timing['gpu']}: {timing['bandwidth_gbps']:,.0f} GB/s, "
            f"{timing['bf16_tflops']:,.0f} TFLOPS, +{timing['overhead_ms']:.3g} ms per step")


def _outcome(document: dict[str, Any]) -> Table:
    throughput = document["throughput"]
    kv = document["kv_usage"]
    status = "[bold red]STALLED[/] (a request cannot make progress even alone)" if document["stalled"] else "completed"
    rows = [
        ("run", f"{status}: {document['num_finished']:,}/{document['num_requests']:,} requests finished in "
                f"{document['num_steps']:,} steps"
                + (f", {_seconds(throughput['duration_s_estimate'])} (est.)"
                   if throughput["duration_s_estimate"] is not None else "")),
        ("KV usage", f"peak {kv['peak_used_blocks']:,} blocks ({_pct(kv['peak_usage'])}), "
                     f"mean {_pct(kv['mean_usage'])}, "
                     f"p50/p95/p99 {kv['p50_used_blocks']:,}/{kv['p95_used_blocks']:,}/{kv['p99_used_blocks']:,} "
                     f"blocks, full {_pct(kv['time_at_full_fraction'])} of the {_weighting(kv['weighting'])}"),
        ("cached, free", f"mean {_num(kv['mean_evictable_cached_blocks'])} evictable blocks, "
                         f"peak {kv['peak_cached_blocks']:,} hashed blocks"),
    ]
    preemptions = document["preemptions"]
    rows.append(("preemptions", f"{preemptions['total']:,} ({_count(preemptions['requests_preempted'], 'request')}, "
                                f"{preemptions['requests_preempted_more_than_once']:,} more than once, at most "
                                f"{preemptions['max_per_request']} per request), "
                                f"{preemptions['recomputed_tokens']:,} tokens recomputed"))
    prefix = document["prefix_cache"]
    rows.append(("prefix cache", f"hit rate {_pct(prefix['prefix_cache_hit_rate'])} (vLLM's, every lookup), "
                                 f"{_pct(prefix['first_admission_hit_rate'])} at first admission; "
                                 f"preempted lookups {prefix['preempted_hits']:,}/"
                                 f"{prefix['preempted_queries']:,} tokens"))
    queues = document["queues"]
    rows.append(("queues", f"running mean {_num(queues['mean_running'])} (max {queues['max_running']}), "
                           f"waiting mean {_num(queues['mean_waiting'])} (max {queues['max_waiting']})"))
    if throughput["requests_per_s_estimate"] is not None:
        rows.append(("throughput", f"{_num(throughput['requests_per_s_estimate'])} req/s, "
                                   f"{_num(throughput['output_tokens_per_s_estimate'])} output tok/s, "
                                   f"{_num(throughput['prompt_tokens_per_s_estimate'])} prompt tok/s (est.)"))
    else:
        rows.append(("throughput", f"{_num(throughput['output_tokens_per_step'])} output tokens per step"))
    return _pairs(rows)


def _weighting(weighting: str) -> str:
    return "estimated time" if weighting == "estimated seconds" else "steps"


def _latency(document: dict[str, Any]) -> Table:
    latency = document["latency"]
    timed = latency["ttft_s_estimate"] is not None
    table = Table(title="Latency per request" + (" (seconds are estimates)" if timed else " (in steps)"),
                  title_justify="left", header_style="bold")
    table.add_column("")
    for label in ("p50", "p95", "p99", "max"):
        table.add_column(label, justify="right")
    for name, key in (("queueing", "queueing"), ("time to first token", "ttft"),
                      ("time per output token", "tpot"), ("end to end", "e2e")):
        summary = latency[f"{key}_s_estimate"] if timed else latency[f"{key}_steps"]
        steps = latency[f"{key}_steps"]
        cells = [(_seconds(summary[q]) + f" / {_num(steps[q])} st") if timed else f"{_num(steps[q])} steps"
                 for q in ("p50", "p95", "p99", "max")]
        table.add_row(name, *cells)
    return table


def _classes(document: dict[str, Any]) -> Table:
    timed = document["latency"]["ttft_s_estimate"] is not None
    table = Table(title="Per class", title_justify="left", header_style="bold")
    for label in ("class", "requests", "finished", "prompt", "output", "preempt.", "hit rate", "1st-adm. hits",
                  "TTFT p95" + (" (est.)" if timed else ""), "E2E p95" + (" (est.)" if timed else "")):
        table.add_column(label, justify="left" if label == "class" else "right")
    for item in document["classes"]:
        latency = item["latency"]
        ttft = latency["ttft_s_estimate"]["p95"] if timed else latency["ttft_steps"]["p95"]
        e2e = latency["e2e_s_estimate"]["p95"] if timed else latency["e2e_steps"]["p95"]
        table.add_row(
            item["name"], _num(item["num_requests"]), _num(item["num_finished"]),
            _num(item["mean_prompt_tokens"], 4), _num(item["mean_output_tokens"], 4), _num(item["preemptions"]),
            _pct(item["prefix_cache_hit_rate"]), _pct(item["first_admission_hit_rate"]),
            _seconds(ttft) if timed else _num(ttft), _seconds(e2e) if timed else _num(e2e),
        )
    return table


def _capacity(document: dict[str, Any]) -> Table:
    capacity = document["capacity"]
    zero = capacity["zero_preemption"]
    rows = []
    if zero["num_gpu_blocks"] is None:
        rows.append(("zero preemptions", zero["method"]))
    else:
        enough = "the configured pool is enough" if zero["configured_is_enough"] else "more than configured"
        memory = f", {zero['kv_bytes'] / 2**30:.2f} GiB of KV cache" if zero["kv_bytes"] is not None else ""
        rows.append(("zero preemptions", f"num_gpu_blocks {zero['num_gpu_blocks']:,} "
                                         f"({zero['kv_tokens']:,} tokens{memory}): {enough}"))
    rate = capacity["max_rate"]
    if rate is not None:
        if rate["max_sustained_rate_rps_estimate"] is None:
            answer = "none of the rates tried was sustained"
        else:
            bound = "" if rate["bounded_above"] else " or more (every rate tried was sustained)"
            answer = (f"{rate['max_sustained_rate_rps_estimate']:.3g} requests/s{bound} (est.; the workload offers "
                      f"{rate['nominal_rate_rps']:.3g}; {len(rate['trials'])} simulations)")
        rows.append(("max sustained rate", answer))
    return _pairs(rows)


def render(document: dict[str, Any], console: Console) -> None:
    """Print the whole report for a result document."""
    width = max(20, min(100, console.width - 14))
    parts: list[Any] = [
        _config(document), Text(""), _outcome(document), Text(""),
        Panel(usage_chart(document, width=width), title="KV-cache usage over time", title_align="left",
              border_style="dim"),
        _latency(document), _classes(document), Text(""), _capacity(document),
    ]
    for warning in document["warnings"]:
        parts.append(Text(f"warning: {warning}", style="yellow"))
    console.print(Panel(Group(*parts), title=f"kvplan simulate · vLLM {document['vllm_semantics']} semantics",
                        title_align="left"))
