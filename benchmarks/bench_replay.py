"""`kvplan replay` on a large generated trace (target: `--summary-only` well under 2 s; the
default release, async scheduling), and the engine alone on the same trace: by default, as vLLM
0.17.1's synchronous loop, and with a Gemma-3-like set of six KV cache groups (0.17.1, sync).

The trace: 2,000 requests, prompts of 80-2,000 tokens (most share one of a few long prefixes),
outputs of 16-512 tokens, arriving over the first 2,500 steps; 4,000 blocks, 2,048 batched
tokens, 128 sequences. It is generated from a seed into a temporary directory, never committed.
"""

from __future__ import annotations

import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

NUM_REQUESTS = 2000
ARRIVAL_SPAN_STEPS = 2500
CONFIG = {
    "num_gpu_blocks": 4000, "block_size": 16, "enable_prefix_caching": True,
    "max_num_batched_tokens": 2048, "max_num_seqs": 128, "max_model_len": 4096,
    "enable_chunked_prefill": True, "hash_algo": "sha256", "hash_seed": "0",
}


def generate_trace(num_requests: int = NUM_REQUESTS, seed: int = 0) -> dict[str, Any]:
    """A deterministic trace: the same seed gives the same requests."""
    rng = random.Random(seed)
    prefix_lens = [rng.randint(64, 1024) for _ in range(8)]
    requests = []
    for ordinal in range(num_requests):
        prompt_len = rng.randint(80, 2000)
        request: dict[str, Any] = {
            "request_id": f"req{ordinal}",
            "arrival_step": rng.randint(0, ARRIVAL_SPAN_STEPS),
            "max_tokens": rng.randint(16, 512),
        }
        if rng.random() < 0.75:
            prefix_id = rng.randrange(len(prefix_lens))
            prefix_len = min(prefix_lens[prefix_id], prompt_len)
            request.update(prefix_id=prefix_id, prefix_len=prefix_len, unique_len=prompt_len - prefix_len)
        else:
            request.update(prefix_id=0, prefix_len=0, unique_len=prompt_len)
        requests.append(request)
    return {"config": dict(CONFIG), "requests": requests}


def write_trace(directory: Path, num_requests: int = NUM_REQUESTS, seed: int = 0) -> Path:
    path = directory / f"bench-replay-{num_requests}-{seed}.json"
    path.write_text(json.dumps(generate_trace(num_requests, seed)))
    return path


def _timed(args: list[str]) -> tuple[float, bytes]:
    """Wall seconds of `kvplan ARGS` in a fresh process, and what it printed."""
    start = time.perf_counter()
    completed = subprocess.run([sys.executable, "-m", "kvplan", *args], capture_output=True, check=False)
    wall = time.perf_counter() - start
    if completed.returncode != 0:
        command = " ".join(args)
        raise RuntimeError(f"kvplan {command} exited {completed.returncode}: {completed.stderr.decode()}")
    return wall, completed.stdout


# A Gemma-3-like hybrid on the same trace: one full-attention group and five sliding-window groups,
# on a pool six times larger (each group then has about the blocks the single group has).
HYBRID_GROUPS = [{"type": "full_attention"}] + [{"type": "sliding_window", "sliding_window": 1024}] * 5
HYBRID_NUM_GPU_BLOCKS = 6 * CONFIG["num_gpu_blocks"]


# Hybrid groups are reproduced in this release and mode (`EnginePolicies.hybrid_scheduling_modes`).
SYNC_0_17_1 = {"vllm_version": "0.17.1", "scheduling": "sync"}


def _engine_only(repeats: int, kv_cache_groups: list[dict[str, Any]] | None = None,
                 release: dict[str, str] | None = None) -> tuple[float, int]:
    """In-process replay of the parsed trace: the engine without interpreter start and CLI import;
    the median wall time and the number of steps. `release`: vllm_version and scheduling, else the
    defaults (the default release, async)."""
    from kvplan.semantics.engine.replay import replay
    from kvplan.semantics.engine.trace import parse_trace

    document = generate_trace()
    document["config"].update(release or {})
    if kv_cache_groups is not None:
        document["config"].update(kv_cache_groups=kv_cache_groups, num_gpu_blocks=HYBRID_NUM_GPU_BLOCKS)
    trace = parse_trace(document)
    walls = []
    for _ in range(repeats):
        start = time.perf_counter()
        summary = replay(trace)
        walls.append(time.perf_counter() - start)
    return statistics.median(walls), summary.num_steps


def run(repeats: int = 3) -> dict[str, Any]:
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        trace = write_trace(directory)
        runs = [_timed(["replay", str(trace), "--summary-only"]) for _ in range(repeats)]
        summary = json.loads(runs[-1][1])["summary"]
        summary_walls = [wall for wall, _ in runs]
        records_out = directory / "records.jsonl"
        records_wall, _ = _timed(["replay", str(trace), "-o", str(records_out)])
        records_bytes = records_out.stat().st_size
    wall = statistics.median(summary_walls)
    engine, _ = _engine_only(repeats)
    sync_engine, sync_steps = _engine_only(repeats, release=SYNC_0_17_1)
    hybrid, hybrid_steps = _engine_only(repeats, HYBRID_GROUPS, SYNC_0_17_1)
    return {
        "requests": summary["num_requests"],
        "steps": summary["num_steps"],
        "preemptions": summary["total_preemptions"],
        "prefix_cache_hit_rate": summary["prefix_cache_hit_rate"],
        "summary_only_wall_median_s": wall,
        "summary_only_steps_per_s": summary["num_steps"] / wall,
        "engine_only_median_s": engine,
        "engine_only_steps_per_s": summary["num_steps"] / engine,
        "engine_only_0.17.1_sync_median_s": sync_engine,
        "engine_only_0.17.1_sync_steps_per_s": sync_steps / sync_engine,
        "hybrid_6_groups_engine_only_median_s": hybrid,
        "hybrid_6_groups_steps_per_s": hybrid_steps / hybrid,
        "all_records_wall_s": records_wall,
        "all_records_mib": records_bytes / 2**20,
    }


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
