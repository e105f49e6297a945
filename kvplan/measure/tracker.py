"""Live tensor bytes: the peak of the bytes held by tensors during a block of torch code.

It sees every storage an op creates, on real and on fake tensors alike, and forgets it when
the storage dies. Rounding each storage up to 512 bytes mimics the CUDA caching allocator's
granularity, so the number predicts `allocated_bytes.all.peak - allocated_bytes.all.current`.

Run it under `torch.no_grad()`, never `torch.inference_mode()`: under inference mode a dispatch
mode sees composite ops (sdpa, linear, softmax) whole and misses their temporaries."""

from __future__ import annotations

import weakref
from collections.abc import Iterable
from typing import Any

import torch
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_leaves

from kvplan.measure.lean_torch import skip_dynamo_imports
from kvplan.units import round_up

CUDA_ALLOCATOR_ROUNDING = 512


class LiveBytes(TorchDispatchMode):
    """`with LiveBytes() as live: ...` then `live.peak` is the most bytes alive at once, counting
    only storages created inside the block (pre-register the ones that exist already)."""

    def __init__(self, round_to: int = CUDA_ALLOCATOR_ROUNDING) -> None:
        super().__init__()
        skip_dynamo_imports()
        self.round_to = round_to
        self.current = 0
        self.peak = 0
        self._live: dict[int, int] = {}
        self._known: set[int] = set()

    def register_existing(self, tensors: Iterable[torch.Tensor]) -> None:
        """Storages that exist before the block (weights, inputs) never count, nor do their views."""
        for tensor in tensors:
            self._known.add(tensor.untyped_storage()._cdata)

    def _forget(self, key: int) -> None:
        self.current -= self._live.pop(key, 0)

    def _track(self, tensor: torch.Tensor) -> None:
        storage = tensor.untyped_storage()
        key = storage._cdata
        if key in self._known or key in self._live:
            return
        size = round_up(storage.nbytes(), self.round_to)
        self._live[key] = size
        self.current += size
        self.peak = max(self.peak, self.current)
        # the storage's Python object lives exactly as long as the storage itself
        weakref.finalize(storage, self._forget, key)

    @classmethod
    def _should_skip_dynamo(cls) -> bool:
        # nothing here is ever compiled: without this, torch wraps the method in dynamo's disable
        # and the first tracked op imports torch._dynamo (about 2 s, a third of a fake profile)
        return False

    def __torch_dispatch__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        out = func(*args, **(kwargs or {}))
        for leaf in tree_leaves(out):
            if isinstance(leaf, torch.Tensor):
                self._track(leaf)
        return out
