"""How far kvplan's predicted KV cache memory is from real vLLM start-ups: `kvplan explain` on each
real log in tests/data/logs that logs its available KV cache memory, the logged figure beside the
predicted one. Writes kvplan/data/accuracy/kv_memory_vs_logs.json, the margin `plan` and `profile`
print beside a predicted KV memory (issue 24, item 3); tests/usecases/test_accuracy_margin.py
checks that the file is what this computes.

    .venv/bin/python scripts/measure_log_accuracy.py          # rewrite
    .venv/bin/python scripts/measure_log_accuracy.py --check  # verify only"""

from __future__ import annotations

import statistics
import sys
from typing import Any

from log_data import LOGS, REPO, explained, write_or_check

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


def held_out_non_torch(log: str, gpu: str, tensor_parallel_size: int | None, rules: str) -> int:
    """The non-torch memory kvplan would predict for this log's setup had the log not been read
    into kvplan/data/accuracy/non_torch_from_logs.json (its own figure left out)."""
    from kvplan.gpus.catalog import get_gpu
    from kvplan.semantics.releases import release_named
    from kvplan.usecases.non_torch import logged_readings, predict_non_torch, table_of

    table = table_of([row for row in logged_readings() if row["log"] != log])
    predicted = predict_non_torch(get_gpu(gpu), tensor_parallel_size or 1, release_named(rules), table)
    return 0 if predicted is None else predicted.non_torch_bytes


def measure() -> dict[str, object]:
    sys.path.insert(0, str(REPO))
    rows = []
    for name, flags in CASES:
        document: dict[str, Any] = explained(LOGS / name, *flags)
        [term] = [term for term in document["terms"] if term["key"] == "available_kv"]
        [non_torch] = [term for term in document["terms"] if term["key"] == "non_torch"] or [None]
        settings = {row["name"]: row["value"] for row in document["settings"]}
        log = f"tests/data/logs/{name}"
        # the non-torch memory explain predicted (from the logs, this one included: in sample) and
        # the figure without this log; the KV memory moves by their difference byte for byte, as
        # non-KV memory is a sum with non-torch a term of it in both formulas (docs/vllm/kv-semantics.md
        # §2, docs/vllm/changes-0.33.md §1.2)
        in_sample = 0 if non_torch is None else non_torch["predicted"]
        held_out = held_out_non_torch(log, settings["gpu"], settings.get("tensor_parallel_size"),
                                      document["vllm_semantics"])
        rows.append({
            "log": log, "vllm_version": document["log"]["vllm_version"],
            "predicted_with": document["vllm_semantics"], "gpu": settings.get("gpu"),
            "tensor_parallel_size": settings.get("tensor_parallel_size"),
            "logged_bytes": term["logged"], "predicted_bytes": term["predicted"],
            "difference_bytes": term["difference"],
            "predicted_non_torch_bytes": in_sample, "held_out_non_torch_bytes": held_out,
            "held_out_difference_bytes": term["difference"] + in_sample - held_out,
        })
    errors = [abs(row["difference_bytes"]) for row in rows]
    held_out_errors = [abs(row["held_out_difference_bytes"]) for row in rows]
    return {
        "what": "available KV cache memory, kvplan's prediction minus the real vLLM log's, per log "
                "(scripts/measure_log_accuracy.py; docs/accuracy.md); held out: with the log's own "
                "non-torch figure left out of kvplan/data/accuracy/non_torch_from_logs.json, the margin "
                "plan and profile print",
        "median_abs_difference_bytes": int(statistics.median(errors)),
        "max_abs_difference_bytes": max(errors),
        "held_out_median_abs_difference_bytes": int(statistics.median(held_out_errors)),
        "held_out_max_abs_difference_bytes": max(held_out_errors),
        "logs": rows,
    }


def main() -> int:
    return write_or_check(__doc__.splitlines()[0], OUTPUT, measure)


if __name__ == "__main__":
    sys.exit(main())
