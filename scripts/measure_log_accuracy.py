"""How far kvplan's predicted KV cache memory is from real vLLM start-ups: `kvplan explain` on each
real log in tests/data/logs that logs its available KV cache memory, the logged figure beside the
predicted one. Writes kvplan/data/accuracy/kv_memory_vs_logs.json, the margin `plan` and `profile`
print beside a predicted KV memory (issue 24, item 3); tests/usecases/test_accuracy_margin.py
checks that the file is what this computes.

    .venv/bin/python scripts/measure_log_accuracy.py          # rewrite
    .venv/bin/python scripts/measure_log_accuracy.py --check  # verify only"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

LOGS = REPO / "tests" / "data" / "logs"
OUTPUT = REPO / "kvplan" / "data" / "accuracy" / "kv_memory_vs_logs.json"
# (log, what the log does not say and explain takes as a flag)
CASES = (
    ("vllm-0.19.0-llama-3.1-8b-h100-tp1.log", ()),
    ("vllm-0.19.0-llama-3.1-8b-h100-tp2.log", ()),
    ("vllm-0.19.0-llama-3.1-8b-h100-kvfp8.log", ()),
    ("vllm-0.19.0-qwen2.5-7b-h100-tp1.log", ()),
    ("vllm-0.19.0-gpt-oss-20b-h100-oom.log", ()),
    ("vllm-0.31.0-llama-3.1-8b-a100-excerpt.log", ("--model", "meta-llama/Llama-3.1-8B-Instruct")),
)


def measure() -> dict[str, object]:
    rows = []
    for name, flags in CASES:
        shown = subprocess.run([sys.executable, "-m", "kvplan", "explain", str(LOGS / name), *flags, "--json"],
                               capture_output=True, text=True, cwd=REPO, check=False,
                               env={**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONPATH": str(REPO)})
        document = json.loads(shown.stdout)
        [term] = [term for term in document["terms"] if term["key"] == "available_kv"]
        settings = {row["name"]: row["value"] for row in document["settings"]}
        rows.append({
            "log": f"tests/data/logs/{name}", "vllm_version": document["log"]["vllm_version"],
            "predicted_with": document["vllm_semantics"], "gpu": settings.get("gpu"),
            "tensor_parallel_size": settings.get("tensor_parallel_size"),
            "logged_bytes": term["logged"], "predicted_bytes": term["predicted"],
            "difference_bytes": term["difference"],
        })
    errors = [abs(row["difference_bytes"]) for row in rows]
    return {
        "what": "available KV cache memory, kvplan's prediction minus the real vLLM log's, per log "
                "(scripts/measure_log_accuracy.py; docs/accuracy.md)",
        "median_abs_difference_bytes": int(statistics.median(errors)),
        "max_abs_difference_bytes": max(errors),
        "logs": rows,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="verify the file instead of rewriting it")
    args = parser.parse_args()
    text = json.dumps(measure(), indent=2) + "\n"
    if args.check:
        same = OUTPUT.exists() and OUTPUT.read_text() == text
        print(f"{OUTPUT.relative_to(REPO)}: {'up to date' if same else 'out of date: run without --check'}")
        return 0 if same else 1
    OUTPUT.write_text(text)
    print(f"wrote {OUTPUT.relative_to(REPO)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
