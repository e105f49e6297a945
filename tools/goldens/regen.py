#!/usr/bin/env python3
"""Rebuild a golden set of tests/data/traces from one vLLM release's own classes.

    python3 tools/goldens/regen.py --vllm 0.33.0 [--set public] [--venv DIR] [--out DIR] [--check]
    make goldens VLLM=0.33.0 [SET=public]                        # the same, through the Makefile

Standard library only: it runs the release's harnesses (tools/goldens/vllm-RELEASE/) with the
interpreter of that release's virtual environment, which it builds with tools/goldens/venv.sh when
the folder does not exist yet (that needs the package index and ~3.5 GB). Records are written as the
harness writes them, into tests/data/traces (or --out); --check compares instead of writing and
exits 1 when a record differs. kvplan never imports this folder.

Which record each trace has, per release, and the harness options that made it, are the table
TRACES below; tests/data/README.md gives the provenance of each file in words.
"""

from __future__ import annotations

import argparse
import filecmp
import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass

HERE = os.path.dirname(os.path.abspath(__file__))
REPO = os.path.dirname(os.path.dirname(HERE))
TRACE_DIR = os.path.join(REPO, "tests", "data", "traces")
RELEASES = ("0.17.1", "0.33.0", "0.34.0")
MODES = ("sync", "async")


@dataclass(frozen=True)
class Trace:
    name: str
    set: str
    releases: tuple[str, ...]  # releases that have records of this trace
    free_queue: bool = True  # the records carry the free-queue order (--dump-free-queue)
    driver_both: bool = False  # 0.17.1 sync: replay.py --driver both (driver_check in the summary)
    own_block_sizes: bool = False  # groups with a block size of their own (0.17.1 sync only)
    modes: tuple[str, ...] = ("sync", "async")


def _traces() -> list[Trace]:
    all3 = RELEASES
    rows = [Trace("example", "public", all3, free_queue=False)]
    rows += [Trace(f"public-{n}", "public", all3) for n in (501, 502, 503)]
    rows += [Trace(f"stress-{n}", "stress", all3) for n in (701, 702, 703, 704)]
    rows += [Trace(f"hybrid-{n}", "hybrid", all3, driver_both=True) for n in (601, 602, 603, 604, 605, 606)]
    rows += [Trace(f"hybrid-{n}", "hybrid", all3, driver_both=True) for n in (701, 702, 703, 704)]
    # Mamba prefill checkpoint blocks: a MambaSpec field since 0.33.0 (tests/data/README.md).
    rows += [Trace(f"hybrid-{n}", "checkpoint", ("0.33.0", "0.34.0")) for n in (801, 802, 803, 804)]
    rows += [Trace("group-block-sizes-801", "hybrid", ("0.17.1",), own_block_sizes=True, modes=("sync",))]
    return rows


TRACES = _traces()
SETS = ("all", *sorted({t.set for t in TRACES}))


def record_name(trace: str, release: str, mode: str) -> str:
    if release == "0.17.1":
        return f"{trace}.vllm-0.17.1.jsonl" if mode == "sync" else f"{trace}.vllm-0.17.1.async.jsonl"
    return f"{trace}.vllm-{release}.{mode}.jsonl"


def has_groups(trace: str) -> bool:
    with open(os.path.join(TRACE_DIR, trace + ".json")) as f:
        return "kv_cache_groups" in json.load(f).get("config", {})


def harness_commands(release: str, traces: list[Trace], py: str, out: str,
                     modes: tuple[str, ...] = MODES) -> list[list[str]]:
    """The harness invocations that write the records of `traces` for `release` into `out`."""
    rel_dir = os.path.join(HERE, f"vllm-{release}")
    cmds: list[list[str]] = []

    def path(t: Trace) -> str:
        return os.path.join(TRACE_DIR, t.name + ".json")

    def fq(t: Trace) -> list[str]:
        return ["--dump-free-queue"] if t.free_queue else []

    if release == "0.17.1":
        for t in traces:
            sync = ["--driver", "both"] if t.driver_both else []
            if t.own_block_sizes:
                if "sync" in modes:
                    cmds.append([py, os.path.join(rel_dir, "replay_group_block_sizes.py"), path(t),
                                 "-o", os.path.join(out, record_name(t.name, release, "sync"))])
                continue
            if "sync" in modes:
                cmds.append([py, os.path.join(rel_dir, "replay.py"), path(t), *sync, *fq(t),
                             "-o", os.path.join(out, record_name(t.name, release, "sync"))])
            if "async" not in modes:
                continue
            script = "replay_hybrid_async.py" if has_groups(t.name) else "replay_async.py"
            mode = [] if has_groups(t.name) else ["--scheduling", "async"]
            cmds.append([py, os.path.join(rel_dir, script), path(t), *mode, *fq(t),
                         "-o", os.path.join(out, record_name(t.name, release, "async"))])
        return cmds
    tag = release.split(".")[1]  # 0.33.0 -> 33, 0.34.0 -> 34
    for hybrid in (False, True):
        for free_queue in (False, True):
            batch = [t for t in traces if has_groups(t.name) == hybrid and t.free_queue == free_queue]
            if not batch:
                continue
            script = f"replay_hybrid{tag}.py" if hybrid else f"replay{tag}.py"
            for mode in modes:
                cmds.append([py, os.path.join(rel_dir, script), *[path(t) for t in batch],
                             "--scheduling", mode, *(["--dump-free-queue"] if free_queue else []),
                             "--batch", out, "--suffix", mode])
    return cmds


def ensure_venv(release: str, venv: str) -> str:
    py = os.path.join(venv, "bin", "python")
    if not os.path.exists(py):
        print(f"goldens: building the vLLM {release} environment in {venv} (package index, ~3.5 GB)",
              file=sys.stderr, flush=True)
        subprocess.run(["bash", os.path.join(HERE, "venv.sh"), release, venv], check=True)
    return py


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--vllm", required=True, choices=RELEASES, help="the release whose records to rebuild")
    ap.add_argument("--set", default="all", choices=SETS, help="which traces (default: all)")
    ap.add_argument("--trace", action="append", default=[], help="only this trace (repeatable)")
    ap.add_argument("--mode", choices=[*MODES, "both"], default="both", help="scheduling mode (default: both)")
    ap.add_argument("--venv", help="the release's venv (default: $GOLDENS_VENVS/vllm-RELEASE,"
                    " GOLDENS_VENVS defaulting to ~/.cache/kvplan-goldens); built when missing")
    ap.add_argument("--out", default=TRACE_DIR, help="where to write the records (default: tests/data/traces)")
    ap.add_argument("--check", action="store_true", help="compare with the records in --out, write nothing")
    a = ap.parse_args(argv)

    traces = [t for t in TRACES if a.vllm in t.releases and a.set in ("all", t.set)
              and (not a.trace or t.name in a.trace)]
    if not traces:
        print(f"goldens: no trace of set {a.set!r} has vLLM {a.vllm} records", file=sys.stderr)
        return 2
    root = os.environ.get("GOLDENS_VENVS") or os.path.join(os.path.expanduser("~"), ".cache", "kvplan-goldens")
    py = ensure_venv(a.vllm, a.venv or os.path.join(root, f"vllm-{a.vllm}"))
    env = dict(os.environ, HF_HUB_OFFLINE="1")
    with tempfile.TemporaryDirectory(prefix="goldens-") as tmp:
        modes = MODES if a.mode == "both" else (a.mode,)
        for cmd in harness_commands(a.vllm, traces, py, tmp, modes):
            print("goldens: " + " ".join(os.path.relpath(c, REPO) if c.startswith(REPO) else c
                                         for c in cmd), file=sys.stderr, flush=True)
            rc = subprocess.run(cmd, env=env, cwd=tmp).returncode
            if rc not in (0, 3):  # 3 = the trace stalls, which its summary records
                print(f"goldens: the harness failed (exit {rc})", file=sys.stderr)
                return rc
        names = [record_name(t.name, a.vllm, m) for t in traces for m in modes if m in t.modes]
        differ = []
        for name in names:
            made, kept = os.path.join(tmp, name), os.path.join(a.out, name)
            same = os.path.exists(kept) and filecmp.cmp(made, kept, shallow=False)
            if not same:
                differ.append(name)
            if not a.check:
                os.makedirs(a.out, exist_ok=True)
                shutil.copyfile(made, kept)
    verb = "differ from" if a.check else "changed in"
    print(f"goldens: vLLM {a.vllm}, set {a.set}: {len(names)} records, {len(differ)} {verb} "
          f"{os.path.relpath(a.out, REPO) if a.out.startswith(REPO) else a.out}"
          + "".join(f"\n  {n}" for n in differ), file=sys.stderr)
    return 1 if a.check and differ else 0


if __name__ == "__main__":
    sys.exit(main())
