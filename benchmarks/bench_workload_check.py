"""`kvplan profile --workload` on the cpu backend, in a fresh process: Qwen2-0.5B (24 KV tensors)
profiled for a 4 GiB device, then 100 chat requests with a 1,200-token shared system prompt
(the shipped example, fewer requests) simulated on the allocated pool, every scheduled token's
K/V written into all 24 tensors and read back from two of them. The workload file is written to a
temporary directory, never committed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
REQUESTS = 100


def run() -> dict[str, Any]:
    workload = json.loads((REPO / "examples" / "workloads" / "chat-shared-prompt.json").read_text())
    workload["arrival"]["count"] = REQUESTS
    with tempfile.TemporaryDirectory() as directory:
        path = Path(directory) / "chat.json"
        path.write_text(json.dumps(workload))
        start = time.perf_counter()
        child = subprocess.Popen(
            [sys.executable, "-m", "kvplan", "profile", "--model", "Qwen/Qwen2-0.5B-Instruct", "--backend", "cpu",
             "--gpu-memory", "4GiB", "--workload", str(path), "--json"],
            stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, cwd=REPO,
        )
        out = child.stdout.read() if child.stdout else b""
        _pid, _status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
    check = json.loads(out)["workload_check"]
    return {
        "qwen05b_chat100_wall_s": wall,
        "qwen05b_chat100_steps": check["steps"],
        "qwen05b_chat100_tokens_written": check["tokens_written"],
        "qwen05b_chat100_tokens_verified": check["tokens_verified"],
        "qwen05b_chat100_passed": check["passed"],
        "qwen05b_chat100_max_rss_mb": usage.ru_maxrss * 1024 / 1e6,
    }


if __name__ == "__main__":
    for name, value in run().items():
        print(f"{name:<50} {value}")
