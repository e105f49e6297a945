"""Options shared by the commands that size a KV cache (plan, profile, simulate, check)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from kvplan.errors import KvplanError
from kvplan.units import parse_bytes

if TYPE_CHECKING:
    from kvplan.usecases.plan import PlanRequest

DEFAULT_MODEL = "Qwen/Qwen2-0.5B-Instruct"

MODEL = typer.Option(
    DEFAULT_MODEL, "--model", "-m",
    help="Hub id (resolved from the bundled catalog, then the local HF cache), a local directory "
    "holding config.json, or a path to a config.json.",
)
GPU = typer.Option(None, "--gpu", help="GPU from `kvplan gpus` (sets memory, batch defaults, MLA block size).")
GPU_MEMORY = typer.Option(None, "--gpu-memory", help="Device memory total instead of --gpu, e.g. 80GiB.")
UTILIZATION = typer.Option(0.9, "--gpu-memory-utilization", help="vLLM's gpu_memory_utilization (0, 1].")
KV_CACHE_MEMORY = typer.Option(
    None, "--kv-cache-memory",
    help="KV-cache bytes per GPU, as vLLM's --kv-cache-memory: 25938100224, 24.16GiB, 900MiB.",
)
BLOCK_SIZE = typer.Option(
    None, "--block-size", help="Tokens per block (default 16; MLA on some GPUs and hybrids force it)."
)
MAX_MODEL_LEN = typer.Option(
    None, "--max-model-len", help="Default: the model's limit as vLLM derives it; `auto` or -1 fits the largest."
)
MAX_NUM_BATCHED_TOKENS = typer.Option(
    None, "--max-num-batched-tokens", help="Default: what `vllm serve` picks for the GPU (2048 without --gpu)."
)
MAX_NUM_SEQS = typer.Option(None, "--max-num-seqs", help="Default: what `vllm serve` picks (256 without --gpu).")
KV_CACHE_DTYPE = typer.Option("auto", "--kv-cache-dtype", help="auto, fp8, fp8_e4m3 or fp8_e5m2.")
DTYPE = typer.Option("auto", "--dtype", help="auto, bfloat16, float16 or float32 (as vLLM's --dtype).")
TP = typer.Option(1, "--tensor-parallel-size", "-tp", help="Tensor-parallel size; every figure is per GPU.")
PP = typer.Option(1, "--pipeline-parallel-size", "-pp", help="Pipeline-parallel size.")
NUM_GPU_BLOCKS_OVERRIDE = typer.Option(None, "--num-gpu-blocks-override", help="Replace the computed block count.")
PREFIX_CACHING = typer.Option(
    None, "--enable-prefix-caching/--no-enable-prefix-caching",
    help="Default: on, except for Mamba hybrids (as vLLM 0.17.1).",
)
CHUNKED_PREFILL = typer.Option(True, "--chunked-prefill/--no-chunked-prefill", help="vLLM's chunked prefill.")
TRUST_REMOTE_CODE = typer.Option(False, "--trust-remote-code", help="Allow transformers to run the model's code.")
JSON = typer.Option(False, "--json", help="Print one JSON document on stdout and nothing else.")


def parse_max_model_len(text: str | None) -> int | None:
    """None = the model's default, -1 = auto-fit, else a positive length."""
    if text is None:
        return None
    if text.strip().lower() in ("auto", "-1"):
        return -1
    try:
        value = int(text.replace("_", "").replace(",", ""))
    except ValueError:
        raise KvplanError(f"--max-model-len: {text!r} is not a number; give e.g. 32768, or auto") from None
    if value <= 0:
        raise KvplanError(f"--max-model-len must be positive (or auto / -1), got {value}")
    return value


def parse_optional_bytes(text: str | None, flag: str) -> int | None:
    return None if text is None else parse_bytes(text, flag)


def plan_request(params: dict[str, Any]) -> PlanRequest:
    """The PlanRequest of a command declared with this module's sizing options (`ctx.params`)."""
    from kvplan.usecases.plan import PlanRequest

    return PlanRequest(
        model=params["model"],
        kv_cache_memory_bytes=parse_optional_bytes(params["kv_cache_memory"], "--kv-cache-memory"),
        gpu=params["gpu"],
        gpu_memory_bytes=parse_optional_bytes(params["gpu_memory"], "--gpu-memory"),
        gpu_memory_utilization=params["gpu_memory_utilization"],
        block_size=params["block_size"],
        max_model_len=parse_max_model_len(params["max_model_len"]),
        max_num_batched_tokens=params["max_num_batched_tokens"],
        max_num_seqs=params["max_num_seqs"],
        kv_cache_dtype=params["kv_cache_dtype"],
        dtype=params["dtype"],
        tensor_parallel_size=params["tensor_parallel_size"],
        pipeline_parallel_size=params["pipeline_parallel_size"],
        num_gpu_blocks_override=params["num_gpu_blocks_override"],
        trust_remote_code=params["trust_remote_code"],
        enable_prefix_caching=params["enable_prefix_caching"],
        enable_chunked_prefill=params["chunked_prefill"],
    )


def on_off(value: str | None, flag: str = "--prefix-caching") -> bool | None:
    if value is None:
        return None
    if value.lower() in ("on", "true", "1", "yes"):
        return True
    if value.lower() in ("off", "false", "0", "no"):
        return False
    raise KvplanError(f"{flag} takes on or off, got {value!r}")


def check_output(flag: str, path: Path, inputs: tuple[Path, ...], what: str) -> None:
    """Refuse to write over a directory or over a file the command reads (nothing the user gave is lost)."""
    if path.is_dir():
        raise KvplanError(f"{flag} {path}: is a directory; give a file path")
    for given in inputs:
        if path.resolve() == given.resolve() or (path.exists() and given.exists() and path.samefile(given)):
            raise KvplanError(f"{flag} {path}: that is {what} ({given.name}); choose another output file")
