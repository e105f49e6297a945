"""`kvplan simulate` wall time and peak memory, each run in a fresh process.

* ``qwen05b_10k``: the issue's target, 10,000 requests (chat with a shared system prompt plus
  long RAG prompts) through Qwen2-0.5B's pool on an L4 (18 GiB of KV cache, planned on the spot
  from the bundled config), at a rate it sustains.
* ``chat_3000``: 3,000 chat requests under KV pressure (Llama-3.1-8B on an L4 with 3.5 GiB of
  KV cache): preemptions, queues and the second run that finds the zero-preemption pool.
* Memory: the same 3,000 requests all at once, with 128 and then 16 running at most, take very
  different numbers of steps; the peak RSS should not follow the step count.

Workloads are written to a temporary directory from fixed seeds, never committed.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

CHAT = {
    "name": "chat", "weight": 3, "shared_prefix": {"name": "system", "tokens": 700},
    "prompt_tokens": {"dist": "lognormal", "mean": 350, "std": 300, "min": 4, "max": 6000},
    "output_tokens": {"dist": "lognormal", "mean": 200, "std": 150, "min": 1, "max": 2000},
}
RAG = {
    "name": "rag", "weight": 1, "prompt_tokens": {"dist": "uniform", "min": 2000, "max": 6000},
    "output_tokens": {"dist": "uniform", "min": 50, "max": 300},
}
QWEN05B_10K = {
    "schema_version": 1, "seed": 1,
    "engine": {"model": "Qwen/Qwen2-0.5B-Instruct", "gpu": "l4-24gb", "kv_cache_memory": "18GiB",
               "max_model_len": 8192, "max_num_seqs": 256},
    "classes": [CHAT, RAG],
    "arrival": {"process": "poisson", "rate": 30, "count": 10_000},
}
CHAT_3000 = {
    "schema_version": 1, "seed": 2,
    "engine": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "l4-24gb", "kv_cache_memory": "3.5GiB",
               "max_model_len": 8192, "max_num_seqs": 128},
    "classes": [CHAT],
    "arrival": {"process": "poisson", "rate": 3.0, "count": 3000},
}
# the same requests at once: steps grow as max_num_seqs shrinks
CHAT_3000_AT_ONCE = {**CHAT_3000, "arrival": {"process": "all_at_once", "count": 3000}}

# Runs kvplan in this process and reports its peak RSS (KiB on Linux) on the last stderr line.
MEASURED = (
    "import resource, runpy, sys\n"
    "sys.argv = ['kvplan', *sys.argv[1:]]\n"
    "code = 0\n"
    "try:\n"
    "    runpy.run_module('kvplan', run_name='__main__')\n"
    "except SystemExit as exit:\n"
    "    code = exit.code or 0\n"
    "print('MAXRSS_KIB', resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)\n"
    "sys.exit(code)\n"
)


def _simulate(workload: Path, output: Path, *extra: str) -> tuple[float, float, dict[str, Any]]:
    """(wall seconds, peak RSS MiB, result document) of one fresh `kvplan simulate --json`."""
    start = time.perf_counter()
    completed = subprocess.run([sys.executable, "-c", MEASURED, "simulate", str(workload), "--json", "-o",
                                str(output), *extra], capture_output=True, text=True, check=False)
    wall = time.perf_counter() - start
    if completed.returncode != 0:
        raise RuntimeError(f"kvplan simulate {workload.name} exited {completed.returncode}: {completed.stderr}")
    rss_kib = int(completed.stderr.strip().splitlines()[-1].split()[1])
    return wall, rss_kib / 1024, json.loads(output.read_text())


def run(repeats: int = 3) -> dict[str, Any]:
    figures: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        output = directory / "result.json"
        for name, document in (("qwen05b_10k", QWEN05B_10K), ("chat_3000", CHAT_3000)):
            workload = directory / f"{name}.json"
            workload.write_text(json.dumps(document))
            runs = [_simulate(workload, output) for _ in range(repeats)]
            result = runs[-1][2]
            wall = statistics.median(r[0] for r in runs)
            figures[f"{name}_requests"] = result["num_requests"]
            figures[f"{name}_steps"] = result["num_steps"]
            figures[f"{name}_num_gpu_blocks"] = result["engine"]["num_gpu_blocks"]
            figures[f"{name}_preemptions"] = result["preemptions"]["total"]
            figures[f"{name}_extra_run_for_zero_preemptions"] = not result["capacity"]["zero_preemption"][
                "method"].startswith("the configured pool")
            figures[f"{name}_wall_median_s"] = wall
            figures[f"{name}_steps_per_s"] = result["num_steps"] / wall
            figures[f"{name}_max_rss_mib"] = max(r[1] for r in runs)
        # more steps, same requests: the peak RSS should stay where it was
        workload = directory / "chat_3000_at_once.json"
        workload.write_text(json.dumps(CHAT_3000_AT_ONCE))
        for seqs in (128, 16):
            _, rss, result = _simulate(workload, output, "--max-num-seqs", str(seqs))
            figures[f"at_once_seqs{seqs}_steps"] = result["num_steps"]
            figures[f"at_once_seqs{seqs}_max_rss_mib"] = rss
    return figures


if __name__ == "__main__":
    print(json.dumps(run(), indent=2))
