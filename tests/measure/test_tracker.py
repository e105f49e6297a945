"""The live-bytes tracker counts what a block of torch code allocates, on real and fake tensors."""

from __future__ import annotations

import pytest
import torch
from torch._subclasses.fake_tensor import FakeTensorMode

from kvplan.measure.tracker import LiveBytes
from kvplan.units import round_up


def _workload(weight: torch.Tensor) -> None:
    a = torch.empty(1000, dtype=torch.float32)        # 4000 B -> 4096
    b = a.view(10, 100)                                 # a view: no new storage
    c = b * 2                                           # 4096 more: peak 8192
    del a, b
    d = weight + 1                                      # weight is pre-registered, d is not: 8192 again
    del c, d
    torch.empty(100, dtype=torch.bfloat16)              # 200 B -> 512, dies at once


@pytest.mark.parametrize("fake", [False, True])
def test_peak_counts_new_storages_rounded_to_512_bytes(fake):
    mode = FakeTensorMode() if fake else None
    if mode:
        with mode:
            weight = torch.zeros(1000)
    else:
        weight = torch.zeros(1000)
    with torch.no_grad(), (mode or torch.no_grad()), LiveBytes() as live:
        live.register_existing([weight])
        _workload(weight)
    assert live.peak == 8192
    assert live.current == 0


def test_views_of_registered_tensors_never_count():
    weight = torch.zeros(4096)
    with LiveBytes() as live:
        live.register_existing([weight])
        weight.view(64, 64).t()
        weight[:10].mul_(2)
    assert live.peak == 0


def test_rounding_can_be_turned_off():
    with LiveBytes(round_to=1) as live:
        torch.empty(3, dtype=torch.int8)
    assert live.peak == 3
    assert round_up(513, 512) == 1024 and round_up(512, 512) == 512
