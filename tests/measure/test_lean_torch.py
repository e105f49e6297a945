"""A tracked meta-tensor forward runs without importing torch's compiler; the kernels still work."""

from __future__ import annotations

import subprocess
import sys
import textwrap

import pytest
import torch

from kvplan.measure.lean_torch import skip_dynamo_imports

SCRIPT = textwrap.dedent("""
    import sys
    import torch
    from kvplan.measure.tracker import LiveBytes
    with torch.no_grad(), LiveBytes() as live:  # meta tensors, as kvplan's own decoder runs them
        x = torch.ones(64, 32, device="meta")
        y = (torch.nn.functional.linear(x, torch.ones(16, 32, device="meta")) + 1).softmax(-1)
        positions = torch.arange(64, device="meta") + 0
        del x
    print(live.peak, "torch._dynamo" in sys.modules)
""")


def test_a_tracked_meta_forward_does_not_import_dynamo():
    done = subprocess.run([sys.executable, "-c", SCRIPT], capture_output=True, text=True, check=True)
    peak, imported = done.stdout.split(" ", 1)
    assert int(peak) > 0
    assert imported.strip() == "False"


def test_marked_kernels_still_compute_and_refuse():
    skip_dynamo_imports()
    assert skip_dynamo_imports.cache_info().currsize == 1
    assert torch.add(torch.ones(2, device="meta"), 1).shape == (2,)
    assert torch.equal(torch.ops.aten.add.Tensor(torch.ones(2), 1), torch.full((2,), 2.0))
    with pytest.raises(RuntimeError):
        torch.ones(2, 3, device="meta") @ torch.ones(2, 3, device="meta")
