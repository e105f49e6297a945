"""`kvplan explain LOG`: a vLLM start-up log reconciled term by term with kvplan's prediction."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from kvplan.cli.options import EngineOptions, command_flags, engine_options
from kvplan.cli.outputs import prepare_outputs
from kvplan.cli.root import JSON, app
from kvplan.errors import KvplanError
from kvplan.semantics.engine.args import EXPLAINS, named

# the settings a log may not state, which the user gives as vLLM spells them (`EXPLAINS`), and kvplan's own,
# in the order --help has always shown them (only the order: a setting missing here comes after these)
_EXPLAIN_HELP = (
    "model", "gpu", "gpu_memory", "gpu_memory_utilization", "block_size", "max_model_len", "max_num_batched_tokens",
    "max_num_seqs", "kv_cache_dtype", "dtype", "tensor_parallel_size", "pipeline_parallel_size",
    "enable_prefix_caching", "enable_chunked_prefill", "enable_extensible_kv_cache", "trust_remote_code", "offline",
    "revision", "vllm_version",
)
_OWN = ("gpu", "gpu_memory", "offline", "vllm_version")
EXPLAINING = command_flags(named(EXPLAINS), _OWN, _EXPLAIN_HELP)
# EngineOptions field -> the ExplainRequest's name for it, where they differ
_GIVEN_AS = {"gpu_memory": "gpu_memory_bytes"}


def _given(engine: EngineOptions, ctx: typer.Context) -> dict[str, object]:
    """The settings the command line gave: a flag left out is None, and --model only when typed."""
    given: dict[str, object] = {}
    for name in EXPLAINING:
        if name in ("offline", "revision", "vllm_version"):      # where the model and the rules come from
            continue
        value = engine.value(name)
        source = ctx.get_parameter_source("model")
        if name == "model" and (source is None or source.name == "DEFAULT"):
            continue
        # False is a setting too (--no-enable-prefix-caching, --no-enable-extensible-kv-cache)
        if value is not None:
            given[_GIVEN_AS.get(name, name)] = value
    return given


def read_log(path: str) -> tuple[str, str]:
    """The log's text and the name to show for it (`-`: standard input)."""
    from kvplan.files import read_input_bytes
    from kvplan.usecases.explain.log_reader import MAX_LOG_BYTES, decode_log

    if path == "-":
        data = sys.stdin.buffer.read(MAX_LOG_BYTES + 1)
        if len(data) > MAX_LOG_BYTES:
            raise KvplanError(f"stdin: more than the {MAX_LOG_BYTES >> 20} MiB of log kvplan reads")
        return decode_log(data), "stdin"
    return decode_log(read_input_bytes(Path(path), path, MAX_LOG_BYTES)), path


@app.command("explain")
@engine_options(*EXPLAINING)
def explain_command(
    ctx: typer.Context,
    log_path: str = typer.Argument(..., metavar="LOG", help="A vLLM start-up log (a file, or - for standard input)."),
    *,
    engine: EngineOptions,
    save_profile: Path | None = typer.Option(
        None, "--save-profile", help="Write the logged start-up as a kvplan profile (its measured terms from the "
        "log) for `plan --profile`, simulate and check to reuse."),
    predict: bool = typer.Option(True, "--predict/--no-predict",
                                 help="Predict the memory terms with the profile run on the fake backend (torch)."),
    json_output: bool = JSON,
) -> None:
    """Read a vLLM start-up log and set each term beside kvplan's prediction of the same start-up.

    From the log: the release and its wording, the settings (flags fill in what it does not say, and
    replace what it says), every memory term and the pool. The table gives each term as logged, as
    predicted and the difference, with a reading of each beyond max(150 MiB, 1%). A start-up that
    ended in an error, or whose KV cache holds no max_model_len request, gets what ran out and the
    smallest changes that start, each checked with kvplan's sizing.

    Exit codes: 0 the logged start-up started; 1 it did not (an error, or no room for one request);
    2 bad input (not a vLLM log, no start-up in it)."""
    from kvplan.usecases.explain.explain import ExplainRequest, explain

    if save_profile is not None:
        from kvplan.report.profile_json import refuse_to_replace

        prepare_outputs([("--save-profile", save_profile)], [] if log_path == "-" else [Path(log_path)])
        refuse_to_replace(save_profile)
    text, where = read_log(log_path)
    result = explain(ExplainRequest(text, where, _given(engine, ctx), engine.vllm_version, predict_memory=predict))
    record = None
    if save_profile is not None:
        from kvplan.report.explain_json import log_profile_record
        from kvplan.report.profile_json import save_profile as write_profile

        record = log_profile_record(result)
        write_profile(record, save_profile)
    if json_output:
        from kvplan.report.explain_json import explain_record
        from kvplan.report.jsonout import emit_json

        emit_json(explain_record(result))
    else:
        from kvplan.report.explain_console import render_explain

        render_explain(result)
        if record is not None:
            print(f"saved {save_profile}")
    if not result.started:
        raise typer.Exit(1)
