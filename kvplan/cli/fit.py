"""`kvplan fit`: which GPU, how many, with which settings, for this model and this traffic."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TypeVar

import typer

from kvplan.cli.options import (
    FIT_FIXED,
    FITTING,
    EngineOptions,
    ListOptions,
    checked,
    engine_options,
    flag_option,
    list_options,
)
from kvplan.cli.outputs import model_inputs, prepare_outputs
from kvplan.cli.root import JSON, app
from kvplan.errors import EXIT_FINDING, KvplanError
from kvplan.files import write_output_text
from kvplan.limits import MAX_RATE, MAX_SECONDS, MAX_SEED, MAX_SEQS, MAX_TOKENS
from kvplan.report.stderr import warn_once
from kvplan.schema import Integer, Kind, Number
from kvplan.semantics.engine.args import EngineArgs, setting
from kvplan.semantics.releases import Release, release_named
from kvplan.sources.installed import DEFAULT_RELEASE
from kvplan.usecases.fit.request import (
    MAX_CONFIGURATIONS,
    MAX_WORKLOAD_REQUESTS,
    SEARCHED,
    FitRequest,
    SearchSpace,
    parse_concurrency,
    parse_list,
    parse_prices,
    parse_rate,
    parse_slo,
    read_list,
)
from kvplan.usecases.plan_settings import MODEL
from kvplan.usecases.simulate.workload import Workload, load_workload

EXECUTOR = typer.Option("local", "--executor", metavar="local|ray",
                        help="local: a process pool, one worker per core; ray: Ray tasks on a cluster (kvplan[ray]).")
RAY_ADDRESS = typer.Option(None, "--ray-address", metavar="auto|HOST:PORT",
                           help="The Ray cluster to run on (default auto: the one this machine belongs to).")
# wide enough for the table with a workload and prices (17 columns) in a log, where a line may be long
REPORT_WIDTH = 200


# the ranges of `kvplan plan`'s flags (docs/inputs.md), for every value of a list, and fit's own
RATE = Number(1e-6, MAX_RATE, description="requests per second")
SEED = Integer(0, MAX_SEED)
CONCURRENT_REQUESTS = Integer(1, MAX_SEQS * 1000, "requests at once")
REQUEST_TOKENS = Integer(1, MAX_TOKENS, "tokens of one request")
OBJECTIVE_SECONDS = Number(0, MAX_SECONDS, exclusive_minimum=True, description="seconds")
PRICE = Number(0, 10**6, description="price per GPU-hour")
SEARCH_CAP = Integer(1, 10**9, "a count")
T = TypeVar("T")


WORKERS = typer.Option(None, "--workers", help="Tasks at once (default: one per core, or the cluster's CPUs).")


@app.command("fit")
@engine_options(*FITTING)
@list_options(*SEARCHED, after="gpus")       # --tensor-parallel-size 1,2 and the other lists fit searches
def fit_command(
    engine: EngineOptions,
    lists: ListOptions,
    model: str | None = flag_option("model", "The model to serve (default: the workload's engine.model)."),
    workload_path: Path | None = typer.Option(None, "--workload", "-w", help="The traffic: a workload file with a "
                                              "request mix (docs/workload.md)."),
    rate: str | None = typer.Option(None, "--rate", help="Scale the workload's arrivals to this rate, e.g. 5/s."),
    concurrency: str | None = typer.Option(None, "--concurrency", metavar="REQUESTS@TOKENS",
                                           help="A memory goal: this many requests of this many tokens at once."),
    slo: str | None = typer.Option(None, "--slo", help="Objectives at the workload's rate, e.g. "
                                   "ttft_p95=500ms,tpot_p95=60ms,preemptions=0 (latencies are estimates)."),
    gpus: str | None = typer.Option(None, "--gpus", help="GPUs to try, from `kvplan gpus`, e.g. "
                                    "l4-24gb,a100-sxm-80gb,h100-sxm-80gb."),
    prices: str | None = typer.Option(None, "--price", help="Your price per GPU-hour, e.g. h100-sxm-80gb=2.5,"
                                      "l4-24gb=0.8 (kvplan has no prices of its own)."),
    seed: int | None = typer.Option(None, "--seed", help="Random seed of the workload (default: the workload's)."),
    executor_name: str = EXECUTOR,
    ray_address: str | None = RAY_ADDRESS,
    workers: int | None = WORKERS,
    json_output: bool = JSON,
    report: Path | None = typer.Option(None, "--report", help="Write a self-contained HTML report to FILE "
                                       "(cost against sustained rate, the Pareto front highlighted)."),
    max_configurations: int = typer.Option(
        MAX_CONFIGURATIONS, "--max-configurations", metavar="N",
        help="Refuse a search of more configurations than this (the product of the lists), before any work."),
    max_requests: int = typer.Option(
        MAX_WORKLOAD_REQUESTS, "--max-requests", metavar="N",
        help="Refuse a workload of more requests per run than this (each fitting configuration runs it many times)."),
) -> None:
    """Search GPUs, parallelism, KV dtype and vLLM's knobs for the configurations that meet a target.

    Plans every configuration first (exact, cheap), simulates only those that fit, and ranks them by
    what serving the asked rate takes: the GPUs (or, with --price, their cost per hour) of as many
    copies (replicas) as carry the rate with the objectives kept, then cost per million requests.

    A model that is neither local, in kvplan's catalog nor in the Hugging Face cache has its
    config.json fetched from the hub, as `kvplan plan` does; never with --offline or HF_HUB_OFFLINE=1.

    Exit codes: 0 a configuration meets the target, 1 none does, 2 bad input."""
    checked(SEARCH_CAP, "--max-configurations")(max_configurations)
    checked(SEARCH_CAP, "--max-requests")(max_requests)
    workload = load_workload(workload_path) if workload_path is not None else None
    chosen = model or (workload.engine.model if workload is not None else None)
    if chosen is None:
        raise KvplanError("give --model (or a workload whose engine names the model)")
    checked(MODEL, "--model")(chosen)
    prepare_outputs([("--report", report)], (*(workload.inputs if workload else ()), *model_inputs([chosen])))
    checked(SEED, "--seed")(seed)
    setting("dtype").vetted(engine.args.dtype)
    gpu_keys = _gpu_keys(gpus)
    space = _search_space(gpu_keys, lists)
    target = parse_concurrency(concurrency)
    if target is not None:
        checked(CONCURRENT_REQUESTS, "--concurrency (requests)")(target.requests)
        checked(REQUEST_TOKENS, "--concurrency (tokens)")(target.tokens)
    objectives = parse_slo(slo)
    _within(tuple(bound.limit for bound in objectives if bound.is_latency), OBJECTIVE_SECONDS, "--slo")
    price_list = parse_prices(prices)
    _within(tuple(price for _, price in price_list), PRICE, "--price")
    request = FitRequest(
        model=chosen, space=space, workload=workload, rate=checked(RATE, "--rate")(parse_rate(rate)),
        concurrency=target, slo=objectives, prices=price_list,
        release=engine.release() or _workload_release(workload), dtype=engine.args.dtype or "auto",
        trust_remote_code=engine.trust_remote_code, step_time=engine.step_time, seed=seed,
        fixed=EngineArgs(**{name: getattr(engine.args, name) for name in FIT_FIXED}),
        max_configurations=max_configurations,
        max_requests=max_requests,
    )
    from kvplan.usecases.fit.search import check_search_size

    check_search_size(request)     # before the workers start

    from kvplan.cli.work_progress import work_progress
    from kvplan.usecases.executors import make_executor
    from kvplan.usecases.fit.search import fit

    with make_executor(executor_name, workers, ray_address) as executor, work_progress() as progress:
        result = fit(request, executor, progress=progress.update)
    warn_once(result.weights_warnings)

    if report is not None:
        from kvplan.report.fit_html import render_fit_html

        write_output_text(report, render_fit_html(result))
        print(f"kvplan: wrote the report to {report}", file=sys.stderr)
    if json_output:
        from kvplan.report.fit_json import fit_document
        from kvplan.report.jsonout import emit_json

        emit_json(fit_document(result))
    else:
        from kvplan.report.fit_console import render_fit
        from kvplan.report.stdout import ReportConsole

        render_fit(result, ReportConsole(highlight=False, width=None if sys.stdout.isatty() else REPORT_WIDTH))
    if not result.found:
        raise typer.Exit(EXIT_FINDING)


def _gpu_keys(text: str | None) -> tuple[str, ...]:
    from kvplan.gpus.catalog import get_gpu

    if text is None:
        raise KvplanError("give --gpus, the GPUs to try (`kvplan gpus` lists them), e.g. --gpus l4-24gb,h100-sxm-80gb")
    keys = tuple(get_gpu(key).key for key in parse_list(text, "--gpus", str))
    if len(set(keys)) != len(keys):
        raise KvplanError("--gpus: a GPU is given twice")
    return keys


def _workload_release(workload: Workload | None) -> Release:
    named = None if workload is None else workload.engine.vllm_version
    return DEFAULT_RELEASE if named is None else release_named(named)


def _search_space(gpu_keys: tuple[str, ...], lists: ListOptions) -> SearchSpace:
    """The lists given, each value read as `kvplan plan` reads its flag (`read_list`), with fit's own
    rules on them; a list not given is the search's default (`SearchSpace.values`)."""
    texts = lists.texts()
    given = {name: read_list(name, text, flag) for name, (text, flag) in texts.items() if text is not None}
    if given.get("kv_cache_memory_bytes") and given.get("gpu_memory_utilization"):
        raise KvplanError("--kv-cache-memory fixes the KV memory, so --gpu-memory-utilization has no effect: "
                          "give one of them")
    for name, values in given.items():                    # vLLM's own rules (the dtype it names), as plan's
        for value in values:
            setting(name).vetted(value)
    if -1 in given.get("max_model_len", ()):
        # candidates are lengths: fit keeps the longest that fits, which is what `auto` asks of plan
        raise KvplanError(f"{texts['max_model_len'][1]}: give lengths to try (fit keeps the longest that fits, "
                          "as auto or -1 asks of `kvplan plan`)")
    return SearchSpace(gpus=gpu_keys).with_values(**given)


def _within(values: tuple[T, ...], kind: Kind, flag: str) -> tuple[T, ...]:
    """The values, each checked against the kind (exit 2 naming the flag and the range)."""
    for value in values:
        checked(kind, flag)(value)
    return values
