from __future__ import annotations

import typer

from kvplan.cli import options
from kvplan.cli.app import app
from kvplan.cli.quick_asserts import verdict_exit_code
from kvplan.report.jsonout import emit_json
from kvplan.report.plan_json import plan_record
from kvplan.usecases.check.quick import QUICK_ASSERTS, parse_quick_asserts, plan_report, quick_help
from kvplan.usecases.profile import plan_for_device


@app.command("plan", context_settings=QUICK_ASSERTS, epilog=quick_help("plan"))
def plan_command(
    ctx: typer.Context,
    model: str = options.MODEL,
    kv_cache_memory: str | None = options.KV_CACHE_MEMORY,
    gpu: str | None = options.GPU,
    gpu_memory: str | None = options.GPU_MEMORY,
    gpu_memory_utilization: float = options.UTILIZATION,
    block_size: int | None = options.BLOCK_SIZE,
    max_model_len: str | None = options.MAX_MODEL_LEN,
    max_num_batched_tokens: int | None = options.MAX_NUM_BATCHED_TOKENS,
    max_num_seqs: int | None = options.MAX_NUM_SEQS,
    kv_cache_dtype: str = options.KV_CACHE_DTYPE,
    dtype: str = options.DTYPE,
    tensor_parallel_size: int = options.TP,
    pipeline_parallel_size: int = options.PP,
    num_gpu_blocks_override: int | None = options.NUM_GPU_BLOCKS_OVERRIDE,
    enable_prefix_caching: bool | None = options.PREFIX_CACHING,
    chunked_prefill: bool = options.CHUNKED_PREFILL,
    trust_remote_code: bool = options.TRUST_REMOTE_CODE,
    json_output: bool = options.JSON,
) -> None:
    """Size the KV cache from a model config, exactly as vLLM 0.17.1 would.

    With --kv-cache-memory it needs no torch and answers in well under a second; with only --gpu
    (or --gpu-memory) the non-KV memory is predicted by the profile run on the fake backend."""
    assertions = parse_quick_asserts(ctx.args, "plan")
    request = options.plan_request(ctx.params)
    result = plan_for_device(request)
    if json_output:
        emit_json(plan_record(result))
    else:
        from kvplan.report.plan_console import render_plan

        render_plan(result)
    code = verdict_exit_code(plan_report(assertions, result) if assertions else None, finding=not result.fits)
    if code:
        raise typer.Exit(code)
