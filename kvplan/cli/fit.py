"""`kvplan fit`: which GPU, how many, with which settings, for this model and this traffic."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer

from kvplan.cli.options import EngineOptions, checked, deprecated_spelling, engine_options, fitting
from kvplan.cli.outputs import model_inputs, prepare_outputs
from kvplan.cli.root import JSON, app
from kvplan.errors import EXIT_FINDING, KvplanError
from kvplan.files import write_output_text
from kvplan.limits import MAX_RATE, MAX_SECONDS, MAX_SEED, MAX_SEQS, MAX_TOKENS
from kvplan.report.stderr import warn_once
from kvplan.schema import Integer, Kind, Number
from kvplan.semantics.config.cache import check_kv_cache_dtype
from kvplan.semantics.config.model import check_model_dtype
from kvplan.semantics.engine.args import SIZES, EngineArgs, named, read_bytes, setting
from kvplan.semantics.engine.trace_format import MODEL_LEN
from kvplan.semantics.releases import Release, release_named
from kvplan.sources.installed import DEFAULT_RELEASE
from kvplan.usecases.fit.request import (
    LIST_DEFAULTS,
    MAX_CONFIGURATIONS,
    MAX_WORKLOAD_REQUESTS,
    FitRequest,
    SearchSpace,
    parse_concurrency,
    parse_list,
    parse_prices,
    parse_rate,
    parse_slo,
    positive_float,
    positive_int,
)
from kvplan.usecases.plan_settings import MODEL
from kvplan.usecases.simulate.workload import Workload, load_workload

EXECUTOR = typer.Option("local", "--executor", metavar="local|ray",
                        help="local: a process pool, one worker per core; ray: Ray tasks on a cluster (kvplan[ray]).")
RAY_ADDRESS = typer.Option(None, "--ray-address", metavar="auto|HOST:PORT",
                           help="The Ray cluster to run on (default auto: the one this machine belongs to).")
# wide enough for the table with a workload and prices (17 columns) in a log, where a line may be long
REPORT_WIDTH = 200


def _utilization_help() -> str:
    """The default utilization of every release, read from the release table (stays right as releases change)."""
    from kvplan.semantics.releases import RELEASES

    defaults = ", ".join(
        f"{release.gpu_memory_utilization:g} for {release.version}" if release.measured_utilization is None else
        f"{release.measured_utilization:g} on the measured sizing path ({release.gpu_memory_utilization:g} otherwise) "
        f"for {release.version}" for release in RELEASES.values())
    return f"Utilizations to try (default: the release's, {defaults})."


# the ranges of `kvplan plan`'s flags (docs/inputs.md), for every value of a list, and fit's own
RATE = Number(1e-6, MAX_RATE, description="requests per second")
SEED = Integer(0, MAX_SEED)
CONCURRENT_REQUESTS = Integer(1, MAX_SEQS * 1000, "requests at once")
REQUEST_TOKENS = Integer(1, MAX_TOKENS, "tokens of one request")
OBJECTIVE_SECONDS = Number(0, MAX_SECONDS, exclusive_minimum=True, description="seconds")
PRICE = Number(0, 10**6, description="price per GPU-hour")
SEARCH_CAP = Integer(1, 10**9, "a count")
T = TypeVar("T")


def _list_option(name: str, help: str, default: str | None = None) -> Any:
    """The option of an engine argument that fit takes as a list: its flags as `EngineArgs` declares them."""
    return typer.Option(default, *setting(name).flags, help=help)


def _alias_option(name: str) -> Any:
    """The earlier spellings of a list option (`--tp`), read but not shown."""
    return typer.Option(None, *setting(name).hidden_flags, hidden=True)


def _folded(value: str | None, alias: str | None, name: str, default: str | None) -> str | None:
    """A list option given under its old spelling (a deprecation line), unless given under vLLM's too."""
    if alias is None:
        return value
    deprecated_spelling(setting(name).hidden_flags[0], name)
    if value not in (None, default) and value != alias:
        raise KvplanError(f"{setting(name).flag} and its old spelling disagree: give one of them")
    return alias


WORKERS = typer.Option(None, "--workers", help="Tasks at once (default: one per core, or the cluster's CPUs).")


@app.command("fit")
@engine_options(*fitting(tuple(LIST_DEFAULTS)))
def fit_command(
    engine: EngineOptions,
    model: str | None = typer.Option(None, "--model", "-m",
                                      help="The model to serve (default: the workload's engine.model)."),
    workload_path: Path | None = typer.Option(None, "--workload", "-w", help="The traffic: a workload file with a "
                                              "request mix (docs/workload.md)."),
    rate: str | None = typer.Option(None, "--rate", help="Scale the workload's arrivals to this rate, e.g. 5/s."),
    concurrency: str | None = typer.Option(None, "--concurrency", metavar="REQUESTS@TOKENS",
                                           help="A memory goal: this many requests of this many tokens at once."),
    slo: str | None = typer.Option(None, "--slo", help="Objectives at the workload's rate, e.g. "
                                   "ttft_p95=500ms,tpot_p95=60ms,preemptions=0 (latencies are estimates)."),
    gpus: str | None = typer.Option(None, "--gpus", help="GPUs to try, from `kvplan gpus`, e.g. "
                                    "l4-24gb,a100-sxm-80gb,h100-sxm-80gb."),
    tensor_parallel: str = _list_option("tensor_parallel_size", "Tensor-parallel sizes, e.g. 1,2,4.", "1"),
    pipeline_parallel: str = _list_option("pipeline_parallel_size", "Pipeline-parallel sizes.", "1"),
    kv_cache_dtypes: str = _list_option("kv_cache_dtype", "KV-cache dtypes, e.g. auto,fp8.", "auto"),
    utilizations: str | None = _list_option("gpu_memory_utilization", _utilization_help()),
    kv_cache_memories: str | None = _list_option("kv_cache_memory_bytes", "KV-cache bytes per GPU to try instead "
                                                 "of utilizations, e.g. 20GiB,40GiB."),
    max_num_seqs: str | None = _list_option("max_num_seqs", "max_num_seqs values (default vLLM's)."),
    max_num_batched_tokens: str | None = _list_option("max_num_batched_tokens",
                                                      "max_num_batched_tokens values (default vLLM's)."),
    max_model_len: str | None = _list_option(
        "max_model_len", "max_model_len candidates; the longest that fits is kept (default: the "
        "model's limit, else the shortest power of two that holds the traffic)."),
    tensor_parallel_alias: str | None = _alias_option("tensor_parallel_size"),
    pipeline_parallel_alias: str | None = _alias_option("pipeline_parallel_size"),
    kv_cache_memory_prefix: str | None = typer.Option(None, *setting("kv_cache_memory_bytes").prefix_flags,
                                                      hidden=True),
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
    if engine.args.dtype is not None:
        _valid(check_model_dtype, engine.args.dtype)
    gpu_keys = _gpu_keys(gpus)
    tensor_parallel_sizes = _folded(tensor_parallel, tensor_parallel_alias, "tensor_parallel_size", "1")
    pipeline_parallel_sizes = _folded(pipeline_parallel, pipeline_parallel_alias, "pipeline_parallel_size", "1")
    memory_flag = setting("kv_cache_memory_bytes").flag
    if kv_cache_memory_prefix is not None:            # a prefix vLLM reads too: no deprecation
        if kv_cache_memories not in (None, kv_cache_memory_prefix):
            raise KvplanError("--kv-cache-memory-bytes and --kv-cache-memory disagree: give one of them")
        kv_cache_memories, memory_flag = kv_cache_memory_prefix, "--kv-cache-memory"
    memories = _values("kv_cache_memory_bytes", kv_cache_memories,
                       lambda text: read_bytes(text, memory_flag), "a byte count", flag=memory_flag)
    utilization_list = _values("gpu_memory_utilization", utilizations, positive_float)
    if memories and utilization_list:
        raise KvplanError("--kv-cache-memory fixes the KV memory, so --gpu-memory-utilization has no effect: "
                          "give one of them")
    space = SearchSpace(gpus=gpu_keys).with_values(
        tensor_parallel_size=_values("tensor_parallel_size", tensor_parallel_sizes, positive_int),
        pipeline_parallel_size=_values("pipeline_parallel_size", pipeline_parallel_sizes, positive_int),
        kv_cache_dtype=tuple(_valid(check_kv_cache_dtype, value)
                             for value in _values("kv_cache_dtype", kv_cache_dtypes, str)),
        gpu_memory_utilization=utilization_list or (None,),
        kv_cache_memory_bytes=memories,
        max_num_seqs=_values("max_num_seqs", max_num_seqs, positive_int) or (None,),
        max_num_batched_tokens=_values("max_num_batched_tokens", max_num_batched_tokens, positive_int) or (None,),
        # candidates are lengths: fit keeps the longest that fits, which is what `auto` asks of plan
        max_model_len=_within(parse_list(max_model_len, "--max-model-len", positive_int), MODEL_LEN,
                              "--max-model-len"),
    )
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
        fixed=EngineArgs(**{name: getattr(engine.args, name) for name in named(SIZES) if name not in LIST_DEFAULTS}),
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


def _values(name: str, text: str | None, element: Callable[[str], T], what: str = "",
            flag: str | None = None) -> tuple[T, ...]:
    """A comma list of one engine argument: each value read and range-checked as `kvplan plan` reads its
    flag (`EngineArgs`'s declaration of the field)."""
    declared = setting(name)
    shown = flag or declared.flag
    values = parse_list(text, shown, element, *((what,) if what else ()))
    return tuple(declared.read(value, shown) for value in values)


def _valid(check: Callable[[str], None], value: str) -> str:
    """A value vLLM takes from a fixed list (--dtype, --kv-cache-dtype), refused as plan refuses it."""
    check(value)
    return value


def _within(values: tuple[T, ...], kind: Kind, flag: str) -> tuple[T, ...]:
    """The values, each checked against the kind (exit 2 naming the flag and the range)."""
    for value in values:
        checked(kind, flag)(value)
    return values
