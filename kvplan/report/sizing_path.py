"""Which path sized the KV cache and why, and 0.34.0's measured terms beside the formula of
`docs/vllm/changes-0.34.md` section 1.4, for the console and the JSON documents of plan and profile.

A release whose block count always comes from the estimate (0.17.1, 0.33.0) has no choice of path:
its documents do not name one (STATES_PATH), so they stay as they were."""

from __future__ import annotations

from typing import Any

from kvplan.semantics.memory.measured import MeasuredSizing, SizingPath
from kvplan.semantics.releases import KvSizing, Release
from kvplan.units import format_gib

# Release.kv_sizing -> whether a document names the sizing path (only where the release has two)
STATES_PATH: dict[KvSizing, bool] = {"profiled_estimate": False, "measured_after_capture": True}


def states_path(release: Release) -> bool:
    return STATES_PATH[release.kv_sizing]


def path_line(path: SizingPath) -> str:
    return f"KV cache sizing path: {path.kv_sizing} ({path.reason})"


def measured_terms(sizing: MeasuredSizing) -> list[tuple[str, str, int]]:
    """(term, the changes document's formula, bytes), in the order of the formula."""
    terms, segments = sizing.terms, sizing.segments
    return [
        ("I", "free memory at start-up", terms.init_free_bytes),
        ("U", "I - F - C: resident after capture (weights, non-torch, runner state, CUDA-graph pool)",
         terms.resident_bytes),
        ("C", f"committed KV prefix: the null block, {len(segments.strides)} segments rounded to "
              f"{segments.granule >> 20} MiB", terms.committed_bytes),
        ("F", "free memory after warmup and capture", terms.free_bytes),
        ("R", "requested: ceil(total x gpu_memory_utilization)", terms.requested_bytes),
        ("P", "transient peak of the sizing step", terms.transient_peak_bytes),
        ("G", "torch reservation growth of the sizing step", terms.torch_reserve_growth_bytes),
        ("margin", "max(1 GiB, 0.75 x P)", sizing.margin_bytes),
        ("avail", "max(min(R - U, F + C - margin) - max(P, G), 0)", sizing.kv_bytes),
        ("footprint(n)", "sum over segments of round_up(n x stride, granule)", sizing.footprint_bytes),
    ]


def measured_lines(sizing: MeasuredSizing) -> list[str]:
    """The terms as console lines, then the block count and what capped it."""
    lines = [f"  {term:<12} {format_gib(value):>8} GiB {value:>16,} B   {formula}"
             for term, formula, value in measured_terms(sizing)]
    bytes_per_block = sizing.segments.bytes_per_block
    lines.append(f"  n            {sizing.num_blocks:,} blocks: avail // {bytes_per_block:,} B = "
                 f"{sizing.blocks_by_bytes:,}, capacity {sizing.segments.capacity_blocks:,}, then the largest n "
                 "whose footprint fits in avail")
    return lines


def path_record(path: SizingPath, measured: MeasuredSizing | None) -> dict[str, Any]:
    record: dict[str, Any] = {"path": path.kv_sizing, "reason": path.reason, "measured": None}
    if measured is not None:
        record["measured"] = {
            **{f"{term}_bytes" if term != "footprint(n)" else "footprint_bytes": value
               for term, _formula, value in measured_terms(measured)},
            "bytes_per_block": measured.segments.bytes_per_block,
            "segment_strides": list(measured.segments.strides),
            "commit_granule_bytes": measured.segments.granule,
            "capacity_blocks": measured.segments.capacity_blocks,
            "blocks_by_bytes": measured.blocks_by_bytes,
            "num_blocks": measured.num_blocks,
            "torch_limit_bytes": measured.torch_limit_bytes,
        }
    return record
