"""`kvplan fit` for people: the ranked table, each configuration's `vllm serve` line, one line per
rejected family, and what the search did."""

from __future__ import annotations

from collections.abc import Iterable

from rich.console import Console
from rich.table import Table

from kvplan.report.text import plain as escape
from kvplan.units import human_bytes
from kvplan.usecases.fit.request import format_seconds
from kvplan.usecases.fit.result import FitConfiguration, FitResult, RejectedFamily

REASONS = {
    "does_not_fit": "does not fit",
    "refused": "refused",
    "short_of_concurrency": "too little KV cache",
    "slo_missed": "objectives missed",
    "failed": "kvplan failed on it (a bug in kvplan, not an answer: please report this line)",
}


def _rate(value: float | None, lower_bound: bool = False) -> str:
    if value is None:
        return "-"
    return f"{'>= ' if lower_bound else ''}{value:.3g}"


def _seconds(value: float | None) -> str:
    return "-" if value is None else format_seconds(value)


def _gpus(c: FitConfiguration | RejectedFamily) -> str:
    if isinstance(c, RejectedFamily):
        tp, pp = c.tensor_parallel_size, c.pipeline_parallel_size
    else:
        tp, pp = c.configuration.value("tensor_parallel_size"), c.configuration.value("pipeline_parallel_size")
    layout = f"TP{tp}" + (f" PP{pp}" if pp > 1 else "")
    return f"{tp * pp} ({layout})"


def _setup(family: RejectedFamily) -> str:
    return f"{family.gpu} x{_gpus(family)} {family.kv_cache_dtype}"


Group = tuple[tuple[str, str], list[tuple[RejectedFamily, str]]]


def rejection_groups(rejected: Iterable[RejectedFamily]) -> list[Group]:
    """The rejected families by reason and the first clause of their detail (vLLM's refusal, the
    same for every setup it stops), each with the rest of its detail (its own numbers), in the
    order each reason first appears."""
    groups: dict[tuple[str, str], list[tuple[RejectedFamily, str]]] = {}
    for family in rejected:
        head, _, rest = family.detail.partition("; ")
        groups.setdefault((family.reason, head), []).append((family, rest))
    return list(groups.items())


def _table(result: FitResult) -> Table:
    with_workload = result.request.workload is not None
    prices = bool(result.request.prices)
    table = Table(title="Configurations that meet the target, best first", title_justify="left")
    columns = ["#", "GPU", "GPUs", "KV dtype", "util", "max len", "seqs", "KV tokens/GPU"]
    if result.request.concurrency is not None:
        columns.append(f"conc.@{result.request.concurrency.tokens:,}")
    if with_workload:
        # what meeting the asked rate takes first (the ranking), then each setup's own figures
        columns += ["replicas", "GPUs@rate"] + (["cost/h@rate"] if prices else [])
        columns += ["rate/s", "TTFT p95", "TPOT p95", "preempt."]
        columns.append("cost/M req" if prices else "GPU-h/M req")
    elif prices:
        columns.append("cost/h")
    columns.append("front")
    for column in columns:
        table.add_column(column, justify="left" if column in ("GPU", "KV") else "right", no_wrap=column == "GPU")
    for rank, c in enumerate(result.configurations, start=1):
        configuration, point, check = c.configuration, c.point, c.check
        memory = (human_bytes(configuration.args.kv_cache_memory_bytes) if configuration.args.kv_cache_memory_bytes
                  and configuration.args.gpu_memory_utilization is None else f"{configuration.utilization:g}")
        row = [str(rank), configuration.gpu or "-", _gpus(c), configuration.value("kv_cache_dtype"), memory,
               f"{configuration.args.max_model_len:,}" if configuration.args.max_model_len else "-",
               str(configuration.args.max_num_seqs or "-"),
               f"{point.kv_cache_tokens:,}" if point.kv_cache_tokens else "-"]
        if result.request.concurrency is not None:
            row.append(f"{point.concurrency_at_target:.2f}" if point.concurrency_at_target is not None else "-")
        if with_workload:
            assert check is not None
            row += [str(c.replicas), str(c.gpus_at_rate)]
            if prices:
                row.append("-" if c.cost_per_hour_at_rate is None else f"{c.cost_per_hour_at_rate:.4g}")
            row += [_rate(check.max_sustained_rate, not check.max_rate_bounded), _seconds(check.ttft_p95_s),
                    _seconds(check.tpot_p95_s), str(check.preemptions)]
            per_million = c.cost_per_million_requests if prices else c.gpu_hours_per_million_requests
            row.append("-" if per_million is None else f"{per_million:.4g}")
        elif prices:
            row.append("-" if c.cost_per_hour is None else f"{c.cost_per_hour:.4g}")
        row.append("*" if c.pareto else "")
        table.add_row(*(escape(cell) for cell in row))
    return table


def render_fit(result: FitResult, console: Console) -> None:
    request = result.request
    traffic = []
    if request.workload is not None:
        rate = f" at {request.rate:g} req/s" if request.rate is not None else ""
        traffic.append(f"workload {request.workload.name}{rate}")
    if request.concurrency is not None:
        traffic.append(request.concurrency.describe())
    objectives = ", ".join(bound.describe() for bound in request.slo) or "bounded queueing"
    console.print(f"[bold]kvplan fit[/bold] {escape(request.model)} (vLLM {request.release.version}): "
                  f"{escape('; '.join(traffic))}; objectives: {escape(objectives)}")
    if result.configurations:
        console.print(_table(result))
        console.print("vLLM command lines (kvplan simulate takes the same flags, with --gpu):")
        for rank, c in enumerate(result.configurations, start=1):
            gpu = escape(f"[{c.configuration.gpu}]")
            console.print(f"  {rank}. {gpu} {escape(c.configuration.vllm_serve_args())}", soft_wrap=True)
    elif any(family.reason == "failed" for family in result.rejected):
        failed = sum(family.reason == "failed" for family in result.rejected)
        console.print(f"[bold]No configuration kvplan could evaluate meets the target[/bold]; kvplan failed on "
                      f"{failed} famil{'y' if failed == 1 else 'ies'} (below), so they are not ruled out.")
    else:
        console.print("[bold]No configuration meets the target.[/bold]")
    if result.rejected:
        console.print("Rejected families (GPU, GPUs, KV dtype):")
        for (reason, head), families in rejection_groups(result.rejected):
            if len(families) == 1:
                family, rest = families[0]
                detail = head + (f"; {rest}" if rest else "")
                console.print(f"  {escape(_setup(family))}: {REASONS[reason]}: {escape(detail)}", soft_wrap=True)
                continue
            # the reason said once, then the setups it rules out with what is their own (ten copies of one
            # paragraph read as ten different problems)
            console.print(f"  {REASONS[reason]}: {escape(head)}", soft_wrap=True)
            plain_setups = [_setup(family) for family, rest in families if not rest]
            if plain_setups:
                console.print(f"    for {escape(', '.join(plain_setups))}", soft_wrap=True)
            for family, rest in families:
                if rest:
                    console.print(f"    {escape(_setup(family))}: {escape(rest)}", soft_wrap=True)
    counts = result.counts
    simulated = (f"; simulated {counts.simulated} in {counts.simulation_runs} runs"
                 if request.workload is not None else "")
    console.print(
        f"Searched {counts.configurations} configurations: planned {counts.planned} "
        f"({counts.profile_runs} profile runs), {counts.inferred} decided without a plan of their own, "
        f"{counts.skipped_lengths} with a shorter max_model_len not needed{simulated} "
        f"({result.executor} executor, {result.workers} worker{'s' if result.workers != 1 else ''}).")
    console.print(
        "Exact for vLLM " + request.release.version + ": blocks, KV tokens and concurrency, from the KV memory "
        "per GPU (predicted by the profile run on the fake backend unless --kv-cache-memory is given). "
        "Estimates, from the step-time model: rate/s (the highest sustained arrival rate that keeps the "
        "objectives), replicas (copies that share the asked rate, each at most at that rate; ranked by the GPUs, "
        "or their cost per hour, that serve the asked rate), TTFT, TPOT and preemptions at the workload's rate "
        "(one copy's), and GPU-hours (or cost) per million requests at that highest rate."
        + (" Costs use your --price figures." if request.prices else "")
        + " front: on the Pareto front of cost per hour against rate.")
    for method in result.estimate_methods:
        console.print(f"step time: {escape(method)}", soft_wrap=True)
    for note in result.notes:
        console.print(f"note: {escape(note)}", soft_wrap=True)
