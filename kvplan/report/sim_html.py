"""`kvplan simulate --report report.html`: one self-contained HTML file (inline CSS and SVG, no
scripts, nothing fetched) with charts of KV usage, queues and latency over time and the summary
tables. Rendering only: the figures are the simulation's, rounded as ``--json`` rounds them."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from kvplan.report.plot_frame import PixelBox, plot_frame
from kvplan.report.sim_console import (
    _num,
    _pct,
    _seconds,
    class_rows,
    group_label,
    latency_rows,
    series_end,
    timing_text,
)
from kvplan.report.simulate_json import SeriesRow, round_floats, series_rows
from kvplan.report.text import html_text
from kvplan.usecases.simulate.capacity_search import Capacity
from kvplan.usecases.simulate.metrics import RunMetrics
from kvplan.usecases.simulate.simulation import SimResult

BOX = PixelBox(width=920, height=250, left=64, right=16, top=16, bottom=40)
COLORS = {
    "used": "#1f77b4", "cached": "#7f7f7f", "peak": "#0b3d63", "running": "#2ca02c", "waiting": "#d62728",
    "ttft": "#9467bd", "e2e": "#ff7f0e", "tokens": "#17becf",
}

CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 980px;
       color: #222; line-height: 1.4; padding: 0 1rem; }
h1 { font-size: 1.5rem; margin-bottom: 0.2rem; } h2 { font-size: 1.15rem; margin-top: 2rem; }
.sub { color: #666; margin-top: 0; } h1, .sub { overflow-wrap: anywhere; }
.stalled { background: #fde2e2; border: 1px solid #d62728; padding: 0.6rem 1rem; border-radius: 6px; }
.cards { display: grid; grid-template-columns: repeat(auto-fill, minmax(210px, 1fr)); gap: 0.8rem; }
.card { border: 1px solid #ddd; border-radius: 8px; padding: 0.7rem 0.9rem; }
.card .v { font-size: 1.35rem; font-weight: 600; } .card .k { color: #666; font-size: 0.85rem; }
table { border-collapse: collapse; margin: 0.5rem 0; font-size: 0.9rem; }
th, td { border-bottom: 1px solid #eee; padding: 0.3rem 0.7rem; text-align: right; }
th:first-child, td:first-child { text-align: left; } th { background: #f6f6f6; }
svg { display: block; margin: 0.3rem 0 0.2rem; max-width: 100%; height: auto; }
.legend span { margin-right: 1.2rem; font-size: 0.85rem; display: inline-block; }
.legend i { display: inline-block; width: 12px; height: 12px; margin-right: 4px; vertical-align: -1px; }
table.kv td, table.kv th { text-align: left; overflow-wrap: anywhere; }
.scroll { overflow-x: auto; max-width: 100%; }
.warn { color: #8a5a00; } .note { color: #666; font-size: 0.85rem; }
.card.bad { border-color: #d62728; background: #fff5f5; } .card.bad .v { color: #b11f20; }
.flag { color: #b11f20; font-size: 0.85rem; font-weight: 600; }
pre { white-space: pre-wrap; overflow-wrap: anywhere; background: #f6f6f6; padding: 0.4rem 0.6rem;
      border-radius: 4px; font-size: 0.82rem; margin: 0; }
"""


def chart(series: list[dict[str, Any]], x_max: float, x_title: str, y_title: str,
          y_max: float | None = None, reference: tuple[float, str] | None = None) -> str:
    """An SVG chart; each series is {name, color, points: [(x, y)], kind: line|area, base?: [y]}."""
    top = y_max if y_max is not None else max((y for s in series for _, y in s["points"]), default=1.0)
    frame = plot_frame(BOX, x_max, top)
    parts = [frame.head(f"{y_title} over {x_title}", x_title, y_title)]
    for item in series:
        points = item["points"]
        if not points:
            continue
        line = frame.points(points)
        if item.get("kind") == "area":
            base = item.get("base") or [0.0] * len(points)
            back = frame.points((x, b) for (x, _), b in reversed(list(zip(points, base, strict=True))))
            parts.append(f'<polygon points="{line} {back}" fill="{item["color"]}" fill-opacity="0.85" stroke="none">'
                         f'<title>{html_text(item["name"])}</title></polygon>')
        else:
            dash = ' stroke-dasharray="4 3"' if item.get("dashed") else ""
            parts.append(f'<polyline points="{line}" fill="none" stroke="{item["color"]}" stroke-width="1.6"{dash}>'
                         f'<title>{html_text(item["name"])}</title></polyline>')
    if reference is not None:
        value, text = reference
        y = frame.py(value)
        parts.append(f'<line x1="{BOX.left}" x2="{BOX.right_edge}" y1="{y:.1f}" y2="{y:.1f}" '
                     'stroke="#d62728" stroke-dasharray="6 4"/>')
        parts.append(f'<text x="{BOX.right_edge - 4}" y="{y - 4:.1f}" font-size="11" text-anchor="end" '
                     f'fill="#d62728">{html_text(text)}</text>')
    parts.append(frame.tail())
    legend = "".join(f'<span><i style="background:{s["color"]}"></i>{html_text(s["name"])}</span>' for s in series)
    return "".join(parts) + f'<div class="legend">{legend}</div>'


def _half_bucket(metrics: RunMetrics) -> float:
    return series_end(metrics, 1) / 2


def _midpoints(metrics: RunMetrics, rows: tuple[SeriesRow, ...], value: Callable[[SeriesRow], float]
               ) -> list[tuple[float, float]]:
    half = _half_bucket(metrics)
    return [(r.start + half, value(r)) for r in rows if r.coverage > 0]


def _x_title(result: SimResult) -> str:
    return "step" if result.setup.timer is None else "time (s, estimated)"


def usage_chart(result: SimResult) -> str:
    metrics = result.metrics
    all_rows = series_rows(metrics)
    rows = [r for r in all_rows if r.coverage > 0]
    usable = metrics.kv.usable_blocks
    half = _half_bucket(metrics)
    # Cached free blocks are drawn as their own line, not stacked on the blocks in use: stacked, a
    # prefix cache that fills the free pool looked like a full cache (issue 24, item 10).
    used = [(r.start + half, r.used_blocks) for r in rows]
    cached = [(r.start + half, r.evictable_cached_blocks) for r in rows]
    x_max = series_end(metrics, len(all_rows))
    return chart([
        {"name": "in use by running requests (mean)", "color": COLORS["used"], "kind": "area", "points": used},
        {"name": "in use, peak in bucket", "color": COLORS["peak"],
         "points": _midpoints(metrics, all_rows, lambda r: r.used_blocks_peak)},
        {"name": "free, holding a cached prefix (reusable)", "color": COLORS["cached"], "dashed": True,
         "points": cached},
    ], x_max, _x_title(result), "KV blocks", y_max=usable, reference=(usable, f"pool: {usable:,} usable blocks"))


def queue_chart(result: SimResult) -> str:
    metrics = result.metrics
    rows = series_rows(metrics)
    x_max = series_end(metrics, len(rows))
    return chart([
        {"name": "running requests", "color": COLORS["running"],
         "points": _midpoints(metrics, rows, lambda r: r.running)},
        {"name": "waiting requests", "color": COLORS["waiting"],
         "points": _midpoints(metrics, rows, lambda r: r.waiting)},
    ], x_max, _x_title(result), "requests")


def latency_chart(result: SimResult) -> str:
    metrics = result.metrics
    rows = round_floats(metrics.latency_series)
    half = _half_bucket(metrics)
    x_max = series_end(metrics, len(metrics.series))
    unit = "s, estimated" if result.setup.timer is not None else "steps"
    return chart([
        {"name": "time to first token, median", "color": COLORS["ttft"],
         "points": [(r[0] + half, r[1]) for r in rows if r[1] is not None]},
        {"name": "end-to-end latency, median", "color": COLORS["e2e"],
         "points": [(r[0] + half, r[2]) for r in rows if r[2] is not None]},
    ], x_max, "arrival " + _x_title(result), f"latency ({unit})")


def _table(header: list[str], rows: list[list[Any]], css_class: str = "") -> str:
    head = "".join(f"<th>{html_text(h)}</th>" for h in header)
    body = "".join("<tr>" + "".join(f"<td>{html_text(c)}</td>" for c in row) + "</tr>" for row in rows)
    attribute = f' class="{css_class}"' if css_class else ""
    return f'<div class="scroll"><table{attribute}><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table></div>'


def _cards(metrics: RunMetrics) -> str:
    kv = metrics.kv
    prefix = metrics.prefix_cache
    preemptions = metrics.preemptions
    latency = metrics.latency
    ttft = (_seconds(latency.ttft_s_estimate.p95) + " (est.)" if latency.ttft_s_estimate is not None
            else f"{_num(latency.ttft_steps.p95)} steps")
    throughput = metrics.throughput
    # (title, value, detail, what is wrong or None): a full pool and preemptions are what a user
    # sizing the cache must not miss, so their cards are marked, not only numbered.
    full = kv.peak_used_blocks >= kv.usable_blocks > 0
    unfinished = metrics.num_finished < metrics.num_requests
    cards = [
        ("peak KV usage", _pct(kv.peak_usage), f"{kv.peak_used_blocks:,} of {kv.usable_blocks:,} blocks",
         "the pool ran full: no free block was left" if full else None),
        ("mean KV usage", f"{_pct(kv.mean_usage)}", f"full {_pct(kv.time_at_full_fraction)} of the time", None),
        ("preemptions", f"{preemptions.total:,}", f"{preemptions.recomputed_tokens:,} tokens recomputed",
         "requests were preempted and recomputed" if preemptions.total else None),
        ("prefix-cache hit rate", _pct(prefix.prefix_cache_hit_rate),
         f"{_pct(prefix.first_admission_hit_rate)} at first admission", None),
        ("TTFT p95", ttft, "time to first token", None),
        ("finished", f"{metrics.num_finished:,} / {metrics.num_requests:,}",
         f"{metrics.num_steps:,} steps"
         + (f", {_seconds(throughput.duration_s_estimate)} (est.)" if throughput.duration_s_estimate else ""),
         "not every request finished" if unfinished else None),
    ]
    return '<div class="cards">' + "".join(
        f'<div class="card{" bad" if flag else ""}"><div class="k">{html_text(k)}</div>'
        f'<div class="v">{html_text(v)}</div><div class="k">{html_text(d)}</div>'
        + (f'<div class="flag">{html_text(flag)}</div>' if flag else "") + "</div>"
        for k, v, d, flag in cards) + "</div>"


def _latency_table(metrics: RunMetrics) -> str:
    latency = metrics.latency
    timed = latency.ttft_s_estimate is not None
    rows = []
    for name, seconds, steps in latency_rows(latency):
        row: list[Any] = [name]
        if timed and seconds is not None:
            row += [_seconds(value) for value in (seconds.mean, seconds.p50, seconds.p95, seconds.p99)]
        row += [_num(value) for value in (steps.p50, steps.p95, steps.p99)]
        rows.append(row)
    header = ["", *(["mean (est.)", "p50 (est.)", "p95 (est.)", "p99 (est.)"] if timed else []),
              "p50 steps", "p95 steps", "p99 steps"]
    return _table(header, rows)


def _class_table(metrics: RunMetrics) -> str:
    timed = metrics.latency.ttft_s_estimate is not None
    rows: list[list[Any]] = list(class_rows(metrics))
    suffix = " (est.)" if timed else " (steps)"
    return _table(["class", "requests", "finished", "mean prompt", "mean output", "preemptions", "hit rate",
                   "first-admission hits", "TTFT p95" + suffix, "E2E p95" + suffix], rows)


def _config_table(result: SimResult) -> str:
    setup = result.setup
    config, facts, workload = setup.config, setup.engine.facts, setup.workload
    groups = setup.engine.kv_cache_groups
    layers = bool(setup.engine.planned_groups)
    rows = [
        ["pool", f"{config.num_gpu_blocks:,} blocks ({config.num_usable_blocks:,} usable) × {config.block_size} "
                 f"tokens, from {setup.engine.source}"],
        ["KV cache groups", "; ".join(group_label(g.spec, g.block_size, g.sliding_window, g.attention_chunk_size,
                                                 g.num_layers if layers else None) for g in groups)
         + f" (GPU KV cache size {setup.engine.gpu_kv_cache_tokens:,} tokens)"],
        ["model / GPU", f"{facts.model or '-'} / {facts.gpu or '-'}"],
        ["scheduler", f"max_num_seqs {config.max_num_seqs}, "
                      f"max_num_batched_tokens {config.max_num_batched_tokens:,}, "
                      f"max_model_len {config.max_model_len:,}"],
        ["features", f"prefix caching {'on' if config.enable_prefix_caching else 'off'}, chunked prefill "
                     f"{'on' if config.enable_chunked_prefill else 'off'}"],
        ["step time", timing_text(setup.timer)],
        ["workload", f"{workload.name} ({'requests' if workload.is_explicit else 'mix'}), seed {setup.seed}"],
    ]
    return _table(["", "value"], rows, "kv")


def _group_table(metrics: RunMetrics) -> str:
    """Usage per KV cache group, where several share the pool."""
    rows = [[number, group_label(g.spec, g.block_size, g.sliding_window, g.attention_chunk_size, g.num_layers),
             f"{g.peak_used_blocks:,}", _num(g.mean_used_blocks), _pct(g.mean_share)]
            for number, g in enumerate(metrics.kv.groups)]
    return _table(["group", "KV cache group", "peak blocks", "mean blocks", "mean share of the pool"], rows)


def _capacity(capacity: Capacity) -> str:
    zero = capacity.zero_preemption
    rows = []
    if zero.num_gpu_blocks is None:
        rows.append(["blocks for zero preemptions", zero.method])
    else:
        memory = f" = {zero.kv_bytes / 2**30:.2f} GiB" if zero.kv_bytes is not None else ""
        rows.append(["blocks for zero preemptions",
                     f"num_gpu_blocks {zero.num_gpu_blocks:,} ({zero.kv_tokens:,} tokens{memory}); "
                     + ("the configured pool is enough" if zero.configured_is_enough else "more than configured")])
        rows.append(["how", zero.method])
    rate = capacity.max_rate
    if rate is not None:
        value = rate.max_sustained_rate_rps_estimate
        rows.append(["highest sustained rate (est.)",
                     "none of the rates tried" if value is None
                     else f"{value:.3g} requests/s" + ("" if rate.bounded_above else " or more")])
        rows.append(["criterion", rate.criterion])
    return _table(["capacity", "answer"], rows, "kv")


def render_html(result: SimResult) -> str:
    workload = result.setup.workload
    metrics = round_floats(result.metrics)
    stalled = ('<p class="stalled"><b>The simulation stalled:</b> a request cannot be scheduled even alone '
               '(too few blocks or tokens per step for it). The numbers cover the steps before the stall.</p>'
               if metrics.stalled else "")
    warnings = "".join(f'<li class="warn">{html_text(w)}</li>' for w in result.notes)
    timed = result.setup.timer is not None
    body = [
        f"<h1>kvplan simulate: {html_text(workload.name)}</h1>",
        f'<p class="sub">vLLM {html_text(result.setup.config.release.version)} scheduler and block-manager semantics, '
        f'{html_text(result.setup.config.scheduling)} scheduling · seed '
        f"{html_text(result.setup.seed)} · "
        f"{'times are estimates from the step-time model' if timed else 'no time model: steps only'}</p>",
        stalled,
        _cards(metrics),
        "<h2>KV-cache usage over time</h2>", usage_chart(result),
        '<p class="note">The area is the blocks held by running requests during a step (what vLLM\'s usage gauge '
        "counts); the dashed line is the free blocks that still hold a cached prefix: reusable by a later request "
        "with that prefix, evicted least recently used first when a request needs a free block; never a sign of a "
        "full cache.</p>",
        *(["<h2>KV-cache usage per group</h2>", _group_table(metrics),
            '<p class="note">The groups share one pool: each holds its own blocks for every request (a '
            "sliding-window group only those inside its window, a Mamba group one state per request), counted at "
            "the end of each step.</p>"] if metrics.kv.groups else []),
        "<h2>Queues over time</h2>", queue_chart(result),
        "<h2>Latency by arrival time</h2>", latency_chart(result),
        "<h2>Latency per request</h2>", _latency_table(metrics),
        "<h2>Per class</h2>", _class_table(metrics),
        "<h2>Capacity</h2>", _capacity(round_floats(result.capacity)),
        "<h2>Configuration</h2>", _config_table(result),
    ]
    if warnings:
        body += ["<h2>Warnings</h2>", f"<ul>{warnings}</ul>"]
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>kvplan simulate: {html_text(workload.name)}</title>"
        f'<meta name="viewport" content="width=device-width, initial-scale=1"><style>{CSS}</style></head>'
        f"<body>{''.join(body)}</body></html>\n"
    )
