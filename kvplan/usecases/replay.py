"""`kvplan replay`: a request trace through the engine, step by step (docs/vllm/replay-contract.md).

    ReplayRequest(trace, overrides) -> load_replay(request) -> Trace
    replay_trace(trace, observe=None) -> ReplaySummary    (`observe` sees every step as it happens)"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kvplan.hostmem import require_memory
from kvplan.semantics.engine.args import EngineArgs
from kvplan.semantics.engine.config import EngineConfig
from kvplan.semantics.engine.replay import ReplaySummary, StepObserver, replay
from kvplan.semantics.engine.trace import CONFIG_KEYS, RELEASE_KEY, Trace
from kvplan.semantics.releases import Release, Scheduling
from kvplan.sources.traces import load_trace


@dataclass(frozen=True)
class EngineSettings:
    """The engine's settings that replace a trace's config (or a workload's engine section, see
    `simulate`'s `EngineOverrides`): vLLM's engine arguments (`EngineArgs`) and kvplan's own pool
    size and engine loop; None keeps the trace's value."""

    args: EngineArgs = field(default_factory=EngineArgs)
    num_gpu_blocks: int | None = None
    scheduling: Scheduling | None = None

    def trace_config(self) -> dict[str, Any]:
        """The settings that are set, under the keys of a trace's config (docs/vllm/replay-contract.md §1)."""
        own = {"num_gpu_blocks": self.num_gpu_blocks, "scheduling": self.scheduling}
        return {key: value for key, value in (*self.args.given().items(), *own.items())
                if key in CONFIG_KEYS and value is not None}


@dataclass(frozen=True)
class ReplayRequest:
    trace: Path
    settings: EngineSettings = EngineSettings()
    # None: the trace's `vllm_version`, else the default release
    release: Release | None = None


def load_replay(request: ReplayRequest) -> Trace:
    """The trace with the request's settings and release in place of its config's (validated: exit 2)."""
    release = request.release.version if request.release is not None else None
    trace = load_trace(request.trace, {**request.settings.trace_config(), RELEASE_KEY: release})
    require_pool_memory(trace.config)
    return trace


def replay_trace(trace: Trace, observe: StepObserver | None = None) -> ReplaySummary:
    """A per-step observer reads every request's counters, so it gets the per-step path."""
    require_pool_memory(trace.config)
    return replay(trace, observe, bulk_decode=observe is None and bulk_decode())


# The scheduler's bulk fast path for steady decodes (`semantics/engine/cruise.py`) gives the same
# records as the per-step path; KVPLAN_BULK_DECODE=0 turns it off, so that tests compare both.
BULK_DECODE_VARIABLE = "KVPLAN_BULK_DECODE"


def bulk_decode() -> bool:
    return os.environ.get(BULK_DECODE_VARIABLE, "1") != "0"


# what the engine keeps per block (a KVCacheBlock and its place in the free queue), measured with
# CPython 3.11: the pool's memory on the host, checked before the pool is built
ENGINE_BYTES_PER_BLOCK = 240


def require_pool_memory(config: EngineConfig) -> None:
    require_memory(config.num_gpu_blocks * ENGINE_BYTES_PER_BLOCK,
                   f"simulating a pool of {config.num_gpu_blocks:,} blocks",
                   "simulate a smaller pool (num_gpu_blocks), or a larger block size")
