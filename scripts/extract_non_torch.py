"""The non-torch memory real vLLM start-ups logged (cuBLAS workspaces, NCCL and custom all-reduce
buffers, attention-backend buffers: what vLLM's profile adds outside torch's allocator,
docs/vllm/kv-semantics.md §2), per GPU and tensor-parallel size: `kvplan explain --json` on each
real log in tests/data/logs that logs the term on its own ("non-torch forward increase memory",
"GiB for non-torch memory"). Writes kvplan/data/accuracy/non_torch_from_logs.json, which the fake
and plan backends read instead of taking the term as 0 (usecases/non_torch.py; issue 24, item 3);
tests/usecases/test_non_torch.py checks that the file is what this extracts.

Several logs of one (GPU, TP) give their median. A log whose wording logs the term only inside
another (0.3x: "consumed memory (weights + non-torch)", runner state included) is listed as skipped
with the reason, as are synthetic logs and start-ups that end before the term.

    .venv/bin/python scripts/extract_non_torch.py          # rewrite
    .venv/bin/python scripts/extract_non_torch.py --check  # verify only"""

from __future__ import annotations

import sys

from log_data import LOGS, REPO, explained, write_or_check

sys.path.insert(0, str(REPO))   # the kvplan of this checkout, for extract()'s imports

OUTPUT = REPO / "kvplan" / "data" / "accuracy" / "non_torch_from_logs.json"


def extract() -> dict[str, object]:
    from kvplan.gpus.catalog import get_gpu
    from kvplan.semantics.releases import release_named
    from kvplan.usecases.explain.log_reader import decode_log, read_startup_log
    from kvplan.usecases.non_torch import table_of, table_record

    readings: list[dict[str, object]] = []
    skipped: list[dict[str, str]] = []
    for path in sorted(LOGS.glob("*.log")):
        where = f"tests/data/logs/{path.name}"
        if path.name.startswith("synthetic-"):
            skipped.append({"log": where, "why": "synthetic (tests/data/logs/SOURCES.md): it measures nothing"})
            continue
        log = read_startup_log(decode_log(path.read_bytes()), where)
        if log.figure("non_torch") is None:
            why = ("logs non-torch memory only inside consumed memory (weights + non-torch, the runner's state "
                   "included), not on its own" if log.figure("consumed") is not None else
                   "ends before the profile run logs non-torch memory")
            skipped.append({"log": where, "why": why})
            continue
        document = explained(path)
        settings = {row["name"]: row for row in document["settings"]}  # type: ignore[attr-defined]
        [term] = [term for term in document["terms"] if term["key"] == "non_torch"]  # type: ignore[attr-defined]
        gpu = get_gpu(settings["gpu"]["value"])
        rules = release_named(str(document["vllm_semantics"]))
        readings.append({
            "log": where, "vllm_version": document["log"]["vllm_version"],  # type: ignore[index]
            "model": settings["model"]["value"], "gpu": gpu.key,
            "gpu_from": settings["gpu"]["note"] or settings["gpu"]["source"],
            "tensor_parallel_size": settings["tensor_parallel_size"]["value"],
            "rules": rules.version, "non_kv_memory": rules.non_kv_memory,
            "non_torch_bytes": term["logged"], "line": term["line"],
        })
    measured = table_record(table_of(readings))
    return {
        "what": "non-torch memory real vLLM start-ups logged, per GPU and tensor-parallel size: the median of "
                "the logs of each (scripts/extract_non_torch.py; docs/accuracy.md)",
        "measured": measured,
        "readings": readings,
        "skipped": skipped,
    }


def main() -> int:
    return write_or_check(__doc__.splitlines()[0], OUTPUT, extract)


if __name__ == "__main__":
    sys.exit(main())
