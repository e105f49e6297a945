"""`kvplan profile`: vLLM's start-up on one device, measured or predicted, and the KV cache allocated."""

from __future__ import annotations

import sys
from pathlib import Path

import typer

from kvplan.cli.options import PLANNING, EngineOptions, checked, engine_options, parse_optional_bytes
from kvplan.cli.outputs import prepare_outputs
from kvplan.cli.quick_asserts import verdict_exit_code
from kvplan.cli.root import JSON, app
from kvplan.errors import EXIT_STALLED, require_profile_extra
from kvplan.limits import MAX_BYTES
from kvplan.report.jsonout import emit_json
from kvplan.schema import ByteSize, Integer
from kvplan.sources.models import local_model_path
from kvplan.usecases.check.quick import QUICK_ASSERTS, parse_quick_asserts, profile_report, quick_help

DEVICE_INDEX = Integer(0, 1023)
MEASURED_BYTES = ByteSize(0, MAX_BYTES)
BACKEND = typer.Option(
    "auto", "--backend",
    help="auto (cuda when a GPU is usable, else fake), cuda (measure the GPU), cpu (real tensors in RAM), "
    "fake (predict a GPU with no GPU and no memory).",
)
DEVICE = typer.Option(0, "--device", help="CUDA device index (cuda backend).")
LOAD_FORMAT = typer.Option(
    "dummy", "--load-format",
    help="dummy: random weights built from the config (same memory, no download); auto: the local "
    "safetensors checkpoint (never pickled .bin files).",
)
ATTENTION_BACKEND = typer.Option(
    "flash_attn", "--attention-backend", help="KV layout: flash_attn, flashinfer, triton, flex or cpu."
)
NO_ALLOCATE = typer.Option(False, "--no-allocate", help="Size the cache but do not allocate it.")
NON_TORCH = typer.Option(
    None, "--non-torch-bytes",
    help="Non-torch memory (cuBLAS, NCCL, attention buffers) for backends that cannot measure it; default: "
         "what real vLLM logs of the GPU and TP give (docs/accuracy.md), else 0.",
)
CUDA_GRAPH = typer.Option(
    None, "--cuda-graph-bytes",
    help="CUDA-graph pool, as vLLM logs it ('Graph capturing finished ... took X GiB'); checked against "
    "total - requested.",
)
CUDA_CONTEXT = typer.Option(
    None, "--cuda-context-bytes", help="CUDA context size, for backends that cannot measure it."
)
SAVE = typer.Option(None, "--save", help="Write the profile (with provenance) for simulate and check to reuse; "
                    "missing directories are created, a file that is not a kvplan profile is never replaced.")
WORKLOAD = typer.Option(
    None, "--workload",
    help="Then simulate this workload on the allocated pool, writing each step's K/V through its slot mapping "
    "and reading it back (cpu or cuda backend; the workload's engine section is replaced by this pool).",
)


@app.command("profile", context_settings=QUICK_ASSERTS, epilog=quick_help("profile"))
@engine_options(*PLANNING, positional_model=True)
def profile_command(
    ctx: typer.Context,
    engine: EngineOptions,
    backend: str = BACKEND,
    device: int = DEVICE,
    load_format: str = LOAD_FORMAT,
    attention_backend: str = ATTENTION_BACKEND,
    no_allocate: bool = NO_ALLOCATE,
    non_torch_bytes: str | None = NON_TORCH,
    cuda_graph_bytes: str | None = CUDA_GRAPH,
    cuda_context_bytes: str | None = CUDA_CONTEXT,
    save: Path | None = SAVE,
    workload_path: Path | None = WORKLOAD,
    json_output: bool = JSON,
) -> None:
    """Load the model, measure non-KV memory with vLLM's profile run, size and really allocate the KV cache."""
    assertions = parse_quick_asserts(ctx.args, "profile")
    checked(DEVICE_INDEX, "--device")(device)
    require_profile_extra("kvplan profile")
    from kvplan.report.profile_json import profile_record, refuse_to_replace, save_profile
    from kvplan.usecases.profile import ProfileRequest, run_profile

    request = engine.plan_request("profile")
    profile_request = ProfileRequest(
        plan=request, backend=backend, device_index=device, load_format=load_format,
        attention_backend=attention_backend, allocate=not no_allocate,
        non_torch_bytes=parse_optional_bytes(non_torch_bytes, "--non-torch-bytes", MEASURED_BYTES),
        cuda_graph_bytes=parse_optional_bytes(cuda_graph_bytes, "--cuda-graph-bytes", MEASURED_BYTES),
        cuda_context_bytes=parse_optional_bytes(cuda_context_bytes, "--cuda-context-bytes", MEASURED_BYTES),
    )
    workload = None
    inputs = [path for path in (local_model_path(request.model),) if path is not None]
    if workload_path is not None:
        from kvplan.measure.cuda import cuda_usable
        from kvplan.usecases.profile import choose_backend
        from kvplan.usecases.profile_workload import require_real_pool
        from kvplan.usecases.simulate.workload import load_workload

        require_real_pool(choose_backend(backend, cuda_usable), allocate=not no_allocate)
        workload = load_workload(workload_path)
        inputs.extend(workload.inputs)
    prepare_outputs([("--save", save)], inputs)
    if save is not None:
        refuse_to_replace(save)
    from kvplan.cli.progress import reporting

    check = None
    with reporting() as progress:
        result = run_profile(profile_request, progress=progress.stage)
        if workload is not None and result.fits:
            from kvplan.usecases.profile_workload import run_workload_check

            progress.stage(f"simulating {workload.name} on the allocated pool")
            check = run_workload_check(result, workload, progress=progress.count)
    record = profile_record(result, check, workload_requested=workload is not None)
    if save is not None:
        save_profile(record, save)
    if json_output:
        emit_json(record)
    else:
        from kvplan.report.profile_console import render_profile

        render_profile(result, check, workload_requested=workload is not None)
        if save is not None:
            print(f"saved {save}")
    finding = not result.fits or (check is not None and check.finding is not None)
    report = profile_report(assertions, result.summary, request.release, request.value("trust_remote_code")) \
        if assertions else None
    code = verdict_exit_code(report, finding=finding)
    if code:
        raise typer.Exit(code)
    if check is not None and check.metrics.stalled:
        print(f"kvplan: the simulation of {workload_path} stalled: a request cannot be scheduled even alone on "
              "this pool", file=sys.stderr)
        raise typer.Exit(EXIT_STALLED)
