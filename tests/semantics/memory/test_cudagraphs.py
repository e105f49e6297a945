"""The CUDA graphs vLLM captures (`_set_cudagraph_sizes` of each release) and 0.33.0's estimate of
their pool (`profile_cudagraph_memory`, `_extrapolate_full_graph_memory`)."""

from __future__ import annotations

import pytest

from kvplan.semantics.memory.cudagraphs import (
    MIN_PER_GRAPH_BYTES,
    CapturePlan,
    capture_plan,
    capture_sizes,
    extrapolate_from_largest,
    extrapolate_full_graphs,
    extrapolate_graph_pool,
    predicted_samples,
)
from kvplan.semantics.releases import VLLM_0_17_1, VLLM_0_33_0

A100, B200 = (8, 0), (10, 0)
MIB = 1 << 20
GRID_512 = (1, 2, 4, *range(8, 256, 8), *range(256, 513, 16))


def test_vllm_serve_on_an_a100_captures_51_sizes_up_to_512():
    # max_num_seqs 256: min(2 x 256, 512) = 512; the 2,048-token budget is above it
    assert capture_sizes(256, 2048, A100, release=VLLM_0_33_0) == GRID_512
    assert capture_sizes(256, 2048, A100, release=VLLM_0_17_1) == GRID_512
    assert len(GRID_512) == 51


@pytest.mark.parametrize(("seqs", "tokens", "capability", "in_0_17_1", "in_0_33_0"), [
    # SM100: 0.33.0's ceiling is 1024
    (1024, 16384, B200, GRID_512, (*GRID_512, *range(528, 1025, 16))),
    # a budget below the ceiling is captured as it is (0.33.0), off the 16-token stride
    (256, 300, A100, tuple(s for s in GRID_512 if s <= 300),
     tuple(sorted({*(s for s in GRID_512 if s <= 300), 300}))),
    # the uniform-decode size max_num_seqs joins the list when it fits
    (100, 2048, A100, tuple(s for s in GRID_512 if s <= 200), tuple(sorted({*(s for s in GRID_512 if s <= 200), 100}))),
])
def test_capture_sizes_by_release(seqs, tokens, capability, in_0_17_1, in_0_33_0):
    assert capture_sizes(seqs, tokens, capability, release=VLLM_0_17_1) == in_0_17_1
    assert capture_sizes(seqs, tokens, capability, release=VLLM_0_33_0) == in_0_33_0


def test_full_graphs_are_the_uniform_decode_sizes_largest_first():
    plan = capture_plan(256, 2048, A100, release=VLLM_0_33_0)
    assert plan.piecewise[0] == 512 and len(plan.piecewise) == 51
    assert plan.full[0] == 256 and len(plan.full) == 35 and plan.num_graphs == 86


def test_full_graphs_extrapolate_from_two_samples_with_a_floor():
    assert extrapolate_full_graphs([10 * MIB, 2 * MIB], 35) == 10 * MIB + 34 * 2 * MIB
    assert extrapolate_full_graphs([10 * MIB, 1000], 35) == 10 * MIB + 34 * MIB_FLOOR
    assert extrapolate_full_graphs([10 * MIB], 1) == 10 * MIB
    assert extrapolate_full_graphs([], 35) == 0


MIB_FLOOR = MIN_PER_GRAPH_BYTES


def test_piecewise_graphs_are_measured_in_full():
    plan = CapturePlan(piecewise=(512, 256, 8), full=(256, 8))
    assert extrapolate_graph_pool(plan, [100 * MIB, 2 * MIB, MIB], [3 * MIB, MIB]) == 103 * MIB + 4 * MIB


def test_the_gpu_method_extrapolates_every_graph_from_the_two_largest():
    plan = CapturePlan(piecewise=(512, 256, 8), full=(256, 8))
    assert extrapolate_from_largest(plan, [80 * MIB, 3 * MIB]) == 80 * MIB + 4 * 3 * MIB


def test_predicted_samples_put_the_forward_peak_first_and_outputs_after():
    plan = capture_plan(256, 2048, A100, release=VLLM_0_33_0)
    piecewise, full = predicted_samples(plan, 58 * MIB, 4096, 2)
    assert piecewise[0] == 58 * MIB
    assert piecewise[1] == 496 * 4096 * 2                 # the 496-token graph's hidden states
    assert piecewise[-1] == MIB                           # a 1-token graph: the 1 MiB floor
    assert full == (256 * 4096 * 2, 248 * 4096 * 2)
