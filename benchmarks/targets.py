"""The speed targets (issue 9), each a whole `kvplan` process as a user runs it: one warm-up run,
then the median of 3 cold runs, beside a bare `python -c "import torch"` measured the same way in
the same run (what no kvplan change can go below, and how loaded the machine is).

A target passes when its median is under its limit. A run that fails (exit code other than 0)
is a MISS whatever its time: a fast failure measures nothing."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

WARM_UPS = 1
RUNS = 3

# The simulate target: 10,000 chat requests (a shared 1,200-token system prompt; chats and
# summaries) at 15 requests/s, Llama-3.1-8B-Instruct on an H100 with 20 GiB of KV cache.
SIMULATE_10K = {
    "schema_version": 1, "seed": 1,
    "engine": {"model": "meta-llama/Llama-3.1-8B-Instruct", "gpu": "h100-sxm-80gb", "kv_cache_memory": "20GiB"},
    "classes": [
        {"name": "chat", "weight": 4, "shared_prefix": {"name": "system-prompt", "tokens": 1200},
         "prompt_tokens": {"dist": "lognormal", "mean": 180, "std": 150, "min": 4, "max": 4000},
         "output_tokens": {"dist": "lognormal", "mean": 220, "std": 160, "min": 1, "max": 1500}},
        {"name": "summarize", "weight": 1, "shared_prefix": {"name": "system-prompt", "tokens": 1200},
         "prompt_tokens": {"dist": "uniform", "min": 1000, "max": 3000},
         "output_tokens": {"dist": "normal", "mean": 300, "std": 80, "min": 50, "max": 600}},
    ],
    "arrival": {"process": "poisson", "rate": 15, "count": 10_000},
}
# The same mix for longer (issue 23): 100,000 requests (under 30 s and 1 GiB of peak RSS), and one
# day of traffic, 1,000,000 requests at about 12 requests/s (under 5 minutes; `--million`).
SIMULATE_100K = {**SIMULATE_10K, "arrival": {"process": "poisson", "rate": 15, "count": 100_000}}
SIMULATE_1M = {**SIMULATE_10K, "arrival": {"process": "poisson", "rate": 12, "count": 1_000_000}}


# The sweep target (issue 14): 1,000 `plan` cells on the local executor's two workers, from
# the given KV memory (the exact path of `kvplan plan --kv-cache-memory`): five catalog models x five
# GPUs x TP 1/2 x KV dtype auto/fp8 x ten KV-cache sizes. Each run starts from no output (a sweep
# to an existing one resumes it).
SWEEP_1000_PLAN_CELLS = """
commands = ["plan"]
[axes]
models = ["Qwen/Qwen2-0.5B-Instruct", "meta-llama/Llama-3.2-1B-Instruct", "meta-llama/Llama-3.1-8B-Instruct",
          "Qwen/Qwen3-8B", "mistralai/Mistral-7B-Instruct-v0.3"]
gpus = ["l4-24gb", "a10-24gb", "a100-sxm-80gb", "h100-sxm-80gb", "h200-141gb"]
tensor_parallel_size = [1, 2]
kv_cache_dtype = ["auto", "fp8"]
kv_cache_memory = ["1GiB", "2GiB", "3GiB", "4GiB", "6GiB", "8GiB", "12GiB", "16GiB", "24GiB", "32GiB"]
"""
REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Target:
    name: str
    argv: list[str]
    limit_s: float
    # what the last run's output says about it (steps, the zero-preemption method, ...), or ""
    describe: Callable[[Path], str] = lambda _work: ""
    # a peak RSS the target must stay under as well (MiB), or None
    limit_rss_mib: float | None = None


@dataclass(frozen=True)
class Measured:
    walls: tuple[float, ...]
    cpus: tuple[float, ...]         # user + system seconds: what a loaded machine inflates least
    max_rss_mib: float
    failure: str | None             # the exit code and the last stderr line of a failing run

    @property
    def median_s(self) -> float:
        return statistics.median(self.walls)


def _kvplan() -> list[str]:
    """The `kvplan` a user runs: the console script of this interpreter's environment."""
    script = Path(sys.executable).parent / "kvplan"
    return [str(script)] if script.exists() else [sys.executable, "-m", "kvplan"]


def _once(argv: list[str], cwd: Path) -> tuple[float, float, int, int, str]:
    """Wall seconds, CPU seconds, peak RSS (bytes), exit code and stderr of one fresh process."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as err:
        child = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=err, cwd=cwd)
        _pid, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
        err.seek(0)
        stderr = err.read().decode(errors="replace")
    cpu = usage.ru_utime + usage.ru_stime
    return wall, cpu, usage.ru_maxrss * 1024, os.waitstatus_to_exitcode(status), stderr


def measure(argv: list[str], cwd: Path) -> Measured:
    for _ in range(WARM_UPS):
        _once(argv, cwd)
    walls, cpus, peak = [], [], 0
    for _ in range(RUNS):
        wall, cpu, rss, code, stderr = _once(argv, cwd)
        if code != 0:
            errors = [line for line in stderr.splitlines() if line.startswith("kvplan: error")]
            return Measured((wall,), (cpu,), rss / 2**20, f"exit {code}" + (f": {errors[-1]}" if errors else ""))
        walls.append(wall)
        cpus.append(cpu)
        peak = max(peak, rss)
    return Measured(tuple(walls), tuple(cpus), peak / 2**20, None)


def _simulate_detail(work: Path, name: str = "simulate-10k") -> str:
    result = json.loads((work / f"{name}.result.json").read_text())
    method = result["capacity"]["zero_preemption"]["method"]
    how = "one run" if method.startswith(("peak in-step usage of this run", "the configured pool")) else "two runs"
    return (f"{result['num_requests']:,} requests, {result['num_steps']:,} steps, "
            f"{result['preemptions']['total']:,} preemptions; zero-preemption answer from {how}")


def _fit_detail(work: Path) -> str:
    result = json.loads((work / "fit.json").read_text())
    counts = result["counts"]
    return (f"{counts['configurations']} configurations, {counts['planned']} planned ({counts['profile_runs']} "
            f"profile runs), {counts['simulated']} simulated in {counts['simulation_runs']} runs; "
            f"{len(result['configurations'])} meet the target")


def _simulate_target(work: Path, name: str, document: dict[str, object], what: str, limit_s: float,
                     limit_rss_mib: float | None = None) -> Target:
    (work / f"{name}.json").write_text(json.dumps(document))
    return Target(f"simulate {what} (Llama-3.1-8B-Instruct, h100-sxm-80gb, 20 GiB KV)",
                  [*_kvplan(), "simulate", f"{name}.json", "--json", "-o", f"{name}.result.json"], limit_s,
                  lambda directory: _simulate_detail(directory, name), limit_rss_mib)


def million_target(work: Path) -> Target:
    """One day of traffic (`benchmarks/run.py --million`: minutes, so not in every `make bench`)."""
    return _simulate_target(work, "simulate-1m", SIMULATE_1M, "1,000,000 chat requests at 12/s", 300.0)


def targets(work: Path) -> list[Target]:
    kvplan = _kvplan()
    (work / "simulate-10k.json").write_text(json.dumps(SIMULATE_10K))
    (work / "sweep-1000.toml").write_text(SWEEP_1000_PLAN_CELLS)
    return [
        Target("profile Llama-3.1-8B-Instruct (fake backend, h100-sxm-80gb, 8,192 batched tokens)",
               [*kvplan, "profile", "--model", "meta-llama/Llama-3.1-8B-Instruct", "--gpu", "h100-sxm-80gb",
                "--max-num-batched-tokens", "8192"], 5.0),
        Target("profile Llama-3.1-70B-Instruct (fake backend, b200-180gb, 8,192 batched tokens, 32k context)",
               [*kvplan, "profile", "--model", "meta-llama/Llama-3.1-70B-Instruct", "--gpu", "b200-180gb",
                "--max-num-batched-tokens", "8192", "--max-model-len", "32768"], 15.0),
        Target("simulate 10,000 chat requests (Llama-3.1-8B-Instruct, h100-sxm-80gb, 20 GiB KV, 15/s)",
               [*kvplan, "simulate", "simulate-10k.json", "--json", "-o", "simulate-10k.result.json"], 5.0,
               _simulate_detail),
        _simulate_target(work, "simulate-100k", SIMULATE_100K, "100,000 chat requests at 15/s", 30.0,
                         limit_rss_mib=1024.0),
        Target("bench serve 500 prompts (Qwen2-0.5B-Instruct, l4-24gb, 256 in / 128 out, 32 clients)",
               [*kvplan, "bench", "serve", "--model", "Qwen/Qwen2-0.5B-Instruct", "--gpu", "l4-24gb",
                "--kv-cache-memory", "8GiB", "--max-model-len", "8192", "--random-input-len", "256",
                "--random-output-len", "128", "--num-prompts", "500", "--max-concurrency", "32", "--seed", "42",
                "--json"], 3.0),
        Target("plan Qwen/Qwen2-0.5B-Instruct --kv-cache-memory 24GiB --json",
               [*kvplan, "plan", "--model", "Qwen/Qwen2-0.5B-Instruct", "--kv-cache-memory", "24GiB", "--json"], 0.3),
        Target("sweep 1,000 plan cells (local executor, 2 workers, to Parquet)",
               ["/bin/sh", "-c", 'rm -f sweep.parquet && exec "$@"', "sh", *kvplan, "sweep", "sweep-1000.toml",
                "-o", "sweep.parquet", "--workers", "2"], 30.0),
        Target("fit, docs/fit.md's example (Llama-3.1-8B-Instruct, chat at 5/s, TTFT p95 < 500 ms)",
               ["/bin/sh", "-c", 'exec "$@" > fit.json', "sh", *kvplan, "fit", "--workload",
                str(REPO / "examples" / "workloads" / "chat-5rps.json"), "--slo", "ttft_p95=500ms", "--gpus",
                "l4-24gb,a100-sxm-80gb,h100-sxm-80gb", "--kv-cache-dtype", "auto,fp8", "--json"], 5.0, _fit_detail),
    ]


def _seconds(value: float) -> str:
    return f"{value:.2f} s" if value >= 1 else f"{value * 1e3:.0f} ms"


def run(million: bool = False) -> bool:
    """Measure and print every target, one line each (verdict, median, limit, what, CPU time and
    peak RSS); True when every one passes. `million`: the one-day simulate target as well."""
    print(f"Speed targets: median of {RUNS} cold processes after {WARM_UPS} warm-up, "
          f"load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        torch = measure([sys.executable, "-c", "import torch"], work)
        print(f"  {'':<5}{_seconds(torch.median_s):>9}  {'':<11}python -c \"import torch\" (reference; "
              f"CPU {_seconds(statistics.median(torch.cpus))})", flush=True)
        passed = True
        for target in [*targets(work), *([million_target(work)] if million else [])]:
            measured = measure(target.argv, work)
            ok = measured.failure is None and measured.median_s < target.limit_s
            if target.limit_rss_mib is not None:
                ok &= measured.max_rss_mib < target.limit_rss_mib
            passed &= ok
            limit = f"< {_seconds(target.limit_s)}" + (
                f", {target.limit_rss_mib / 1024:g} GiB" if target.limit_rss_mib is not None else "")
            verdict = "PASS" if ok else "MISS"
            print(f"  {verdict:<5}{_seconds(measured.median_s):>9}  {limit:<11}{target.name}", flush=True)
            runs = ", ".join(_seconds(wall) for wall in measured.walls)
            detail = measured.failure or target.describe(work)
            print(f"  {'':<27}runs {runs}; CPU {_seconds(statistics.median(measured.cpus))}; "
                  f"peak RSS {measured.max_rss_mib:,.0f} MiB"
                  + (f"; {detail}" if detail else ""))
    return passed


def main() -> None:
    sys.exit(0 if run("--million" in sys.argv[1:]) else 1)


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
    main()
