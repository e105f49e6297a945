#!/usr/bin/env python3
"""Replay a hybrid trace whose groups have block sizes of their own, through vLLM 0.17.1's classes.

Run with the 0.17.1 venv (tools/goldens/venv.sh 0.17.1 DIR):

    HF_HUB_OFFLINE=1 DIR/bin/python replay_group_block_sizes.py TRACE.json -o OUT.jsonl

vLLM's page-size unification gives each KV cache group its own block size (tests/data/README.md,
`group-block-sizes-801`); `replay.py`'s `Env.make_group_spec` gives every group the trace's
`block_size`. This script is `replay.py`'s minimal loop (`run_minimal`, over vLLM 0.17.1's real
KVCacheManager and BlockPool, free queue dumped) with `make_group_spec` taking a group's own
`block_size` when the group gives one (the pool, block hashes and the other groups keep the trace's).
The records are `run_minimal`'s records and summary, written as they come: the summary has no
`vllm_version` / `driver` keys, which `replay.py`'s command line adds.
"""

from __future__ import annotations

import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import replay  # the 0.17.1 harness, unchanged


class OwnBlockSizeEnv(replay.Env):
    def make_group_spec(self, g):
        if "block_size" not in g:
            return super().make_group_spec(g)
        trace_block = self.block_size
        self.block_size = int(g["block_size"])
        try:
            return super().make_group_spec(g)
        finally:
            self.block_size = trace_block


replay.Env = OwnBlockSizeEnv


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("trace")
    ap.add_argument("-o", "--output", required=True)
    a = ap.parse_args(argv)
    cfg, trace = replay.load_trace(a.trace)
    lines, summary = replay.run_minimal(cfg, trace, dump_free_queue=True)
    with open(a.output, "w") as out:
        for rec in [*lines, summary]:
            out.write(json.dumps(rec) + "\n")
    return 3 if summary["summary"]["stalled"] else 0


if __name__ == "__main__":
    sys.exit(main())
