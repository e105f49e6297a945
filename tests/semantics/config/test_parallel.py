"""Pipeline-parallel layer split, as vLLM's get_pp_indices does it (vllm-kv-semantics.md 3.2)."""

from __future__ import annotations

import pytest

from kvplan.errors import KvplanError
from kvplan.semantics.config.parallel import pp_layer_ranges, pp_partition


@pytest.mark.parametrize(("layers", "pp", "counts"), [
    (32, 3, [11, 11, 10]), (61, 4, [15, 15, 16, 15]), (80, 3, [27, 27, 26]),
    (28, 8, [3, 3, 3, 4, 4, 4, 4, 3]), (118, 4, [29, 30, 30, 29]), (24, 1, [24]), (7, 4, [2, 2, 2, 1]),
])
def test_split_matches_vllm(layers, pp, counts):
    assert list(pp_partition(layers, pp)[0]) == counts
    ranges = pp_layer_ranges(layers, pp)
    assert [len(r) for r in ranges] == counts and ranges[0].start == 0 and ranges[-1].stop == layers


@pytest.mark.parametrize(("layers", "pp"), [(4, 5), (4, 0)])
def test_impossible_split_is_bad_input(layers, pp):
    with pytest.raises(KvplanError):
        pp_layer_ranges(layers, pp)
