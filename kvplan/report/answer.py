"""The first lines of `plan` and `profile` (issue 24, item 6): the answer a user came for before
the breakdown: KV memory per GPU (exact when given, predicted with its measured margin otherwise),
blocks and tokens, how many requests fit at once at max_model_len (vLLM's figure) and at typical
lengths, and what to try next."""

from __future__ import annotations

from kvplan.units import format_gib
from kvplan.usecases.accuracy import kv_memory_margin
from kvplan.usecases.plan import PlanResult, weights_alone_note

SIXTEEN_BIT_KV = ("bfloat16", "float16")


def margin_text() -> str:
    margin = kv_memory_margin()
    return (f"predicted; real vLLM start-ups differed by {format_gib(margin.median_bytes)} GiB in the median of "
            f"{margin.num_logs}, up to {format_gib(margin.max_bytes)} GiB on {margin.max_where}: docs/accuracy.md")


def answer_lines(result: PlanResult, predicted: bool) -> list[str]:
    """The answer block; `predicted`: the KV memory came from a profile run without a GPU."""
    summary = result.sizing
    memory = result.kv_cache_memory_bytes
    how = margin_text() if predicted else "as given" if result.memory_source == "--kv-cache-memory" else "measured"
    lines = [f"KV cache per GPU: {format_gib(memory)} GiB ({how})" if memory >= 0 else
             f"KV cache per GPU: none ({how}): the non-KV memory is {format_gib(-memory)} GiB more than the budget"]
    config = summary.config
    if not summary.fits or config is None:
        alone = weights_alone_note(result)
        # the weights alone: what to change first, before vLLM's words about the cache
        lines.append(f"Does not fit: {alone}" if alone else f"Does not fit: {summary.finding}")
        return lines
    lines.append(f"  {config.num_blocks:,} blocks of {result.setup.layout.block_size} tokens; GPU KV cache size "
                 f"{summary.gpu_kv_cache_tokens or 0:,} tokens (vLLM's sizing of that memory, exact)")
    at_once = [f"{summary.max_concurrency or 0:,.2f}x at max_model_len {summary.max_model_len:,} (vLLM's figure)"]
    at_once += [f"{int(concurrency):,} requests of {tokens:,} tokens" for tokens, concurrency in
                result.concurrency_at_lengths if tokens < summary.max_model_len]
    lines.append("  at once: " + "; ".join(at_once))
    hints = []
    if result.setup.layout.kv_dtype in SIXTEEN_BIT_KV:
        hints.append("--kv-cache-dtype fp8 holds about twice the tokens")
    if (summary.max_concurrency or 0) < 1:
        hints.append("a smaller --max-model-len, a higher --gpu-memory-utilization or more GPUs (-tp)")
    hints.append("kvplan simulate W.json for queues and latency under your traffic")
    lines.append("  next: " + "; ".join(hints))
    return lines
