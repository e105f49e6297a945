#!/usr/bin/env python3
"""replay34.py (beside this file, unchanged) replaying the trace's own `config.kv_cache_groups`.

Run with the 0.34.0 venv (tools/goldens/venv.sh 0.34.0 DIR), with replay34.py's arguments:

    HF_HUB_OFFLINE=1 DIR/bin/python replay_hybrid34.py TRACE.json --scheduling sync|async --dump-free-queue -o OUT
    HF_HUB_OFFLINE=1 DIR/bin/python replay_hybrid34.py T1.json ... --scheduling async --dump-free-queue \
        --batch OUTDIR --suffix async

What changes and why: ../trace_groups.py. Without `kv_cache_groups` the output is replay34.py's.
"""

import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [HERE, os.path.dirname(HERE)]

import replay34  # noqa: E402
import trace_groups  # noqa: E402

trace_groups.install(replay34)

if __name__ == "__main__":
    sys.exit(replay34.main())
