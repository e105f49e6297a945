"""`kvplan fit --report fit.html`: one self-contained file (inline CSS and SVG, no scripts, nothing
fetched): cost against sustained rate for every configuration that meets the target, the Pareto
front highlighted, then the ranked table with each `vllm serve` line and the rejected families."""

from __future__ import annotations

from kvplan.report.fit_console import REASONS
from kvplan.report.plot_frame import PixelBox, plot_frame
from kvplan.report.sim_html import CSS
from kvplan.report.text import html_text
from kvplan.usecases.fit.request import format_seconds
from kvplan.usecases.fit.result import FitConfiguration, FitResult

BOX = PixelBox(width=920, height=380, left=72, right=24, top=20, bottom=48)
FRONT, OTHER = "#d62728", "#8a8a8a"
EXTRA_CSS = """
.front { color: #d62728; font-weight: 600; }
tr.command td { text-align: left; padding-top: 0; }
td.name { text-align: left; overflow-wrap: break-word; max-width: 14rem; }
"""


def _axes(result: FitResult) -> tuple[str, str, bool]:
    """(x title, y title, whether y is money)."""
    x_title = ("highest sustained rate, requests/s (estimate)" if result.request.workload is not None
               else f"requests of {result.request.concurrency.tokens:,} tokens at once"
               if result.request.concurrency is not None else "capacity")
    money = bool(result.request.prices)
    return x_title, "cost per hour (your prices)" if money else "GPUs", money


def capacity(c: FitConfiguration) -> float:
    if c.check is not None:
        return c.check.max_sustained_rate or 0.0
    return c.point.concurrency_at_target or 0.0


def hourly(c: FitConfiguration, money: bool) -> float:
    return c.cost_per_hour if money and c.cost_per_hour is not None else float(c.configuration.num_gpus)


def asked_rate(result: FitResult) -> float | None:
    """The arrival rate the configurations were asked to serve (requests/s), when there is traffic."""
    rates = [c.check.rate for c in result.configurations if c.check is not None]
    return rates[0] if rates else None


def cost_chart(result: FitResult) -> str:
    """The scatter of cost per hour (GPUs without prices) against capacity, front joined."""
    x_title, y_title, money = _axes(result)
    points = [(capacity(c), hourly(c, money), rank, c.pareto)
              for rank, c in enumerate(result.configurations, start=1)]
    asked = asked_rate(result)
    frame = plot_frame(BOX, max([*(x for x, *_ in points), asked or 0.0], default=1.0) * 1.05,
                       max((y for _, y, *_ in points), default=1.0) * 1.1, whole_y=not money)
    parts = [frame.head(f"{y_title} against {x_title}", x_title, y_title)]
    if asked:
        # the rate the user asked for: a setup left of it serves it with replicas (the table says how many)
        at = frame.px(asked)
        parts.append(f'<line class="asked-rate" x1="{at:.1f}" x2="{at:.1f}" y1="{BOX.top}" y2="{BOX.bottom_edge}" '
                     f'stroke="#1f77b4" stroke-width="1.5" stroke-dasharray="6 4"/>'
                     f'<text x="{at + 4:.1f}" y="{BOX.top + 12}" font-size="10" fill="#1f77b4">'
                     f'asked: {asked:.3g}/s</text>')
    front = sorted((x, y) for x, y, _, on in points if on)
    if len(front) > 1:
        parts.append(f'<polyline points="{frame.points(front)}" fill="none" stroke="{FRONT}" stroke-width="1.5" '
                     'stroke-dasharray="4 3"/>')
    # configurations at the same place (e.g. two KV dtypes with equal figures) share one label
    labels: dict[tuple[str, str], tuple[list[int], str]] = {}
    for x, y, rank, on in points:
        cx, cy = f"{frame.px(x):.1f}", f"{frame.py(y):.1f}"
        color = FRONT if on else OTHER
        parts.append(f'<circle cx="{cx}" cy="{cy}" r="{6 if on else 4}" fill="{color}">'
                     f'<title>#{rank}: {x:.4g}, {y:.4g}</title></circle>')
        labels.setdefault((cx, cy), ([], color))[0].append(rank)
    for (cx, cy), (ranks, color) in labels.items():
        parts.append(f'<text x="{float(cx) + 8:.1f}" y="{float(cy) - 6:.1f}" font-size="11" fill="{color}">'
                     f'{" ".join(f"#{rank}" for rank in ranks)}</text>')
    parts.append(frame.tail())
    return "".join(parts)


def _at_rate_cells(c: FitConfiguration, money: bool) -> str:
    cells = f"<td>{c.replicas}</td><td>{c.gpus_at_rate}</td>"
    if money:
        cells += f"<td>{'-' if c.cost_per_hour_at_rate is None else f'{c.cost_per_hour_at_rate:.4g}'}</td>"
    return cells


def _rate(value: float | None) -> str:
    return "-" if value is None else f"{value:.3g}"


def render_fit_html(result: FitResult) -> str:
    request = result.request
    money = bool(request.prices)
    title = f"kvplan fit: {request.model}"
    objectives = ", ".join(bound.describe() for bound in request.slo) or "bounded queueing"
    traffic = []
    if request.workload is not None:
        traffic.append(f"workload {request.workload.name}"
                       + (f" at {request.rate:g} requests/s" if request.rate is not None else ""))
    if request.concurrency is not None:
        traffic.append(request.concurrency.describe())
    out = [f"<!DOCTYPE html><html lang=\"en\"><head><meta charset=\"utf-8\"><title>{html_text(title)}</title>"
           f"<style>{CSS}{EXTRA_CSS}</style></head><body>",
           f"<h1>{html_text(title)}</h1>",
           f"<p class=\"sub\">vLLM {html_text(request.release.version)} &middot; "
           f"{html_text('; '.join(traffic))} &middot; objectives: {html_text(objectives)}</p>"]
    if result.configurations:
        out.append("<h2>Cost against sustained rate</h2>")
        out.append(cost_chart(result))
        out.append(f"<p class=\"note\"><span class=\"front\">Red</span>: the Pareto front (no other configuration "
                   f"is both {'cheaper per hour' if money else 'on fewer GPUs'} and faster). Rates and latencies are "
                   "estimates from the step-time model; blocks and KV tokens are exact for the release, from the "
                   "KV memory per GPU.</p>")
        at_rate = "<th>replicas</th><th>GPUs at the rate</th>" + ("<th>cost/h at the rate</th>" if money else "")
        out.append("<h2>Configurations, best first</h2><div class=\"scroll\"><table><tr><th>#</th><th>GPU</th>"
                   "<th>GPUs</th><th>KV dtype</th>" + (at_rate if request.workload is not None else "") +
                   "<th>KV tokens/GPU</th><th>max rate/s (est.)</th><th>TTFT p95 (est.)</th>"
                   f"<th>{'cost' if money else 'GPU-hours'} per M requests (est.)</th></tr>")
        columns = 8 + (2 + money if request.workload is not None else 0)
        for rank, c in enumerate(result.configurations, start=1):
            check = c.check
            per_million = c.cost_per_million_requests if money else c.gpu_hours_per_million_requests
            css = ' class="front"' if c.pareto else ""
            out.append(
                f"<tr><td{css}>{rank}</td><td class=\"name\">{html_text(c.configuration.gpu)}</td>"
                f"<td>{c.configuration.num_gpus}</td><td>{html_text(c.configuration.value('kv_cache_dtype'))}</td>"
                + (_at_rate_cells(c, money) if request.workload is not None else "") +
                f"<td>{'-' if c.point.kv_cache_tokens is None else f'{c.point.kv_cache_tokens:,}'}</td>"
                f"<td>{_rate(None if check is None else check.max_sustained_rate)}</td>"
                f"<td>{'-' if check is None or check.ttft_p95_s is None else format_seconds(check.ttft_p95_s)}</td>"
                f"<td>{'-' if per_million is None else f'{per_million:.4g}'}</td></tr>"
                # the command on a row of its own, preformatted and wrapping, so that the figures
                # keep their columns however long the model id or the flags are
                f"<tr class=\"command\"><td></td><td colspan=\"{columns - 1}\"><pre>"
                f"{html_text(c.configuration.vllm_serve_args())}</pre></td></tr>")
        out.append("</table></div>")
    else:
        out.append("<p class=\"stalled\">No configuration meets the target.</p>")
    if result.rejected:
        out.append("<h2>Rejected families</h2><div class=\"scroll\"><table class=\"kv\">"
                   "<tr><th>family</th><th>why</th></tr>")
        for family in result.rejected:
            name = (f"{family.gpu} x{family.num_gpus} (TP{family.tensor_parallel_size} "
                    f"PP{family.pipeline_parallel_size}) {family.kv_cache_dtype}")
            out.append(f"<tr><td>{html_text(name)}</td>"
                       f"<td>{html_text(REASONS[family.reason])}: {html_text(family.detail)}</td></tr>")
        out.append("</table></div>")
    counts = result.counts
    out.append(f"<p class=\"note\">Searched {counts.configurations} configurations: planned {counts.planned}, "
               f"{counts.inferred} decided without a plan of their own, simulated {counts.simulated} in "
               f"{counts.simulation_runs} runs.</p>")
    for note in result.notes:
        out.append(f"<p class=\"note\">{html_text(note)}</p>")
    out.append("</body></html>\n")
    return "\n".join(out)
