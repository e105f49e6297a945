"""vLLM 0.34.0's measured KV-cache sizing, from the formula and the worked example of
docs/vllm/changes-0.34.md section 1.4 (docs/versions.md: kv_sizing, measured_kv_margin), with the
terms the test supplies."""

from __future__ import annotations

import pytest

from kvplan.semantics.memory.measured import (
    MeasuredTerms,
    Segments,
    blocks_within,
    default_utilization,
    measured_kv_bytes,
    measured_sizing,
    memory_after_warmup_line,
    sizing_path,
    withheld_warning,
)
from kvplan.semantics.releases import VLLM_0_17_1, VLLM_0_33_0, VLLM_0_34_0

GIB = 1 << 30
# Llama-3.1-8B bf16 at block size 64: 32 layer segments of 256 KiB per block (8 MiB per block), a
# capacity of 80 - 17.00 GiB = 8,064 blocks; the null block commits one 2 MiB granule per segment
SEGMENTS = Segments((256 << 10,) * 32, 8064)
COMMITTED = SEGMENTS.footprint(1)
INIT_FREE, RESIDENT = int(79.5 * GIB), int(16.45 * GIB)
FREE = INIT_FREE - RESIDENT - COMMITTED


def worked_example(requested: int) -> MeasuredTerms:
    return MeasuredTerms(init_free_bytes=INIT_FREE, free_bytes=FREE, committed_bytes=COMMITTED,
                         requested_bytes=requested, transient_peak_bytes=int(1.35 * GIB),
                         torch_reserve_growth_bytes=int(1.5 * GIB))


def test_the_changes_documents_worked_example():
    terms = worked_example(80 * GIB)
    assert COMMITTED == 32 * (2 << 20) and terms.resident_bytes == RESIDENT
    sizing = measured_sizing(terms, SEGMENTS, torch_reserved_bytes=0, release=VLLM_0_34_0)
    # margin = max(1, 0.75 x 1.35) = 1.0125 GiB; avail = min(80 - 16.45, 62.9875 + 0.0625 - 1.0125) - 1.50
    assert sizing.margin_bytes == int(1.35 * GIB * 0.75)
    assert sizing.kv_bytes == pytest.approx(60.5375 * GIB, abs=2)
    # 7,748 blocks by bytes; the per-layer granule rounding leaves 7,744 (495,616 tokens of 64)
    assert (sizing.blocks_by_bytes, sizing.num_blocks) == (7748, 7744)
    assert sizing.footprint_bytes <= sizing.kv_bytes < SEGMENTS.footprint(7745)


def test_an_explicit_utilization_caps_the_measured_size_and_is_warned_about():
    terms = worked_example(int(0.92 * 80 * GIB))
    assert measured_kv_bytes(terms, VLLM_0_34_0) == pytest.approx(55.65 * GIB, abs=2)
    assert blocks_within(measured_kv_bytes(terms, VLLM_0_34_0), SEGMENTS) == 7120
    warning = withheld_warning(terms, 0.92, VLLM_0_34_0)
    assert warning is not None and "caps this instance at 73.6 GiB, keeping 4.89 GiB" in warning
    assert withheld_warning(worked_example(80 * GIB), 1.0, VLLM_0_34_0) is None


def test_the_margin_floor_and_the_larger_of_peak_and_growth():
    small = MeasuredTerms(10 * GIB, 8 * GIB, 0, 10 * GIB, GIB // 4, GIB // 2)
    # margin: the 1 GiB floor (0.75 x 0.25 GiB is less); kept: G, the larger
    assert measured_kv_bytes(small, VLLM_0_34_0) == 8 * GIB - GIB - GIB // 2
    large = MeasuredTerms(10 * GIB, 8 * GIB, 0, 10 * GIB, 2 * GIB, GIB)
    assert measured_kv_bytes(large, VLLM_0_34_0) == 8 * GIB - int(1.5 * GIB) - 2 * GIB
    assert measured_kv_bytes(MeasuredTerms(GIB, GIB // 2, 0, GIB, GIB, 0), VLLM_0_34_0) == 0


def test_the_capacity_caps_the_block_count():
    assert blocks_within(100 * GIB, Segments((256 << 10,) * 32, 1000)) == 1000


def test_the_line_vllm_logs_after_warmup():
    sizing = measured_sizing(worked_example(80 * GIB), SEGMENTS, torch_reserved_bytes=15 * GIB,
                             release=VLLM_0_34_0)
    assert memory_after_warmup_line(sizing) == (
        "Memory after warmup: 62.99 GiB free, 0.06 GiB committed to the KV cache, 1.5 GiB kept for transient "
        "activations (1.35 GiB allocated at peak, 1.5 GiB of torch reservation growth); 7744 KV cache blocks "
        "(60.5 GiB) fit within the requested 80.0 GiB. Torch may reserve up to 17.05 GiB.")


@pytest.mark.parametrize(("knobs", "measured", "decides"), [
    ({}, True, "on by default on CUDA"),
    ({"extensible": True}, True, "--enable-extensible-kv-cache"),
    ({"kv_cache_memory_given": True}, False, "--kv-cache-memory"),
    ({"blocks_override_given": True}, False, "--num-gpu-blocks-override"),
    ({"extensible": False}, False, "--no-enable-extensible-kv-cache"),
])
def test_which_path_sizes_the_cache_in_0_34_0(knobs, measured, decides):
    settings = {"kv_cache_memory_given": False, "blocks_override_given": False, **knobs}
    path = sizing_path(VLLM_0_34_0, **settings)
    assert path.measured is measured and decides in path.reason
    assert default_utilization(VLLM_0_34_0, path) == (1.0 if measured else 0.92)


@pytest.mark.parametrize("release", [VLLM_0_17_1, VLLM_0_33_0])
def test_earlier_releases_always_size_from_the_estimate(release):
    path = sizing_path(release, kv_cache_memory_given=False, blocks_override_given=False)
    assert not path.measured and default_utilization(release, path) == release.gpu_memory_utilization
