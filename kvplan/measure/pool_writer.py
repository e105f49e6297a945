"""The model runner of `kvplan profile --workload`: inside every scheduler step, where vLLM's model
runs, K and V of each scheduled token are written through the step's slot mapping (slot =
block_table[pos // block_size] x block_size + pos % block_size) into every attention tensor of the
model; every few steps, and always when a request finishes, each running request's computed
positions are read back through its block table and compared with what must be there.

The values are a function of the token's content chain (every token id up to it, with positions)
and of the tensor, K or V, head and channel: a prefix-cache hit is right only if the block it
reuses was written for the very same prefix, and a block given to two live requests, a slot
mapping off by one, or a block reused before its data was dead shows as a mismatch.

    PoolWriter(pool, config, verify_every)     (the scheduler's `model_runner`)"""

from __future__ import annotations

from array import array
from bisect import bisect_right
from collections.abc import Sequence
from dataclasses import dataclass
from math import prod

import torch

from kvplan.errors import KvplanError
from kvplan.measure.backend import LayerLayout
from kvplan.measure.kv_tensors import KvCacheAllocation, slot_index
from kvplan.semantics.engine.config import EngineConfig
from kvplan.semantics.engine.request import Request
from kvplan.semantics.engine.scheduler import Scheduler
from kvplan.semantics.kv.layout import specs_by_layer
from kvplan.semantics.kv.specs import FullAttentionSpec

# A prime below 2**30: chain arithmetic stays inside int64 and a chain value plus a channel's offset
# inside int32, the width the per-channel arithmetic runs at.
_PRIME = 1_000_000_007
_TOKEN_MIX, _POSITION_MIX, _CHAIN_MIX = 1_103_515_245, 40_503, 1_664_525
_TENSOR_MIX, _CHANNEL_MIX = 97_531, 2_654_435_761


# ---------------------------------------------------------------------------- the values


def _mix(tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    return (tokens % _PRIME * _TOKEN_MIX + positions * _POSITION_MIX + 1) % _PRIME


def _mix_one(token: int, position: int) -> int:
    return (token % _PRIME * _TOKEN_MIX + position * _POSITION_MIX + 1) % _PRIME


def content_chain(tokens: torch.Tensor, start: int, before: int) -> torch.Tensor:
    """The chain value of each token: `before` (the value at position start - 1, 0 at the start)
    plus the mixes of the tokens up to it, modulo the prime."""
    positions = torch.arange(start, start + len(tokens), dtype=torch.int64)
    return (torch.cumsum(_mix(tokens, positions), 0) + before) % _PRIME


class KvValues:
    """What the tensors hold as K and V for tokens of given chain values: a byte per channel from
    (chain, tensor, K or V, channel), as k / 8 for k in [-128, 128) in float dtypes (exact down to
    16 bits, never NaN) and k in [0, 128) in integer ones."""

    def __init__(self, ordinals: Sequence[int], sides: Sequence[int], token_shape: tuple[int, ...],
                 dtype: torch.dtype, device: torch.device) -> None:
        tensors = torch.tensor(ordinals, dtype=torch.int64).view(-1, 1, 1)
        which = torch.tensor(sides, dtype=torch.int64).view(1, -1, 1)
        channels = torch.arange(prod(token_shape), dtype=torch.int64).view(1, 1, -1)
        offsets = ((2 * tensors + which + 1) * _TENSOR_MIX + channels * _CHANNEL_MIX) % _PRIME
        # (tensors, sides, 1, channels): one row per token is added at each call
        self.offsets = offsets.to(torch.int32).unsqueeze(2).to(device)
        codes = torch.arange(256)
        table = (codes - 128).to(torch.float32) / 8 if dtype.is_floating_point else codes & 127
        self.table = table.to(dtype).to(device)
        self.token_shape = token_shape

    def __call__(self, chain: torch.Tensor) -> torch.Tensor:
        """(tensors, sides, tokens, *token_shape) for `chain` (tokens,)."""
        row = (chain * _CHAIN_MIX % _PRIME).to(torch.int32).view(1, 1, -1, 1)
        codes = ((row + self.offsets) >> 8) & 255
        values = self.table.index_select(0, codes.flatten())
        return values.view(*codes.shape[:3], *self.token_shape)


def _bits(values: torch.Tensor) -> torch.Tensor:
    """The values' bit patterns, so that equality is exact for every dtype (fp8 included)."""
    integer = {1: torch.int8, 2: torch.int16, 4: torch.int32, 8: torch.int64}[values.element_size()]
    return values.contiguous().view(integer)


def _as_int64(ids: Sequence[int]) -> torch.Tensor:
    if isinstance(ids, range):
        return torch.arange(ids.start, ids.stop, ids.step, dtype=torch.int64)
    if isinstance(ids, array) and ids.typecode == "q" and len(ids):
        return torch.frombuffer(ids, dtype=torch.int64)
    return torch.tensor(list(ids), dtype=torch.int64)


# ---------------------------------------------------------------------------- the model runner


@dataclass(frozen=True)
class _Tensors:
    """KV tensors of one layout, dtype and token shape, written together: one value computation
    and one index per step. Each tensor is seen through the first layer that views it."""

    layout: LayerLayout
    layer_names: tuple[str, ...]
    views: tuple[torch.Tensor, ...]
    sides: torch.Tensor          # (sides, 1): K and V, or K alone (MLA)
    values: KvValues


@dataclass(frozen=True)
class Mismatch:
    step: int
    request_id: str
    position: int
    block_id: int
    layer: str


def _attention_layouts(pool: KvCacheAllocation) -> list[LayerLayout]:
    """One layout per KV tensor of the model, refusing what the simulated manager does not model."""
    groups = pool.config.kv_cache_groups
    specs = specs_by_layer(pool.config)
    if len(groups) != 1 or not all(isinstance(specs[name], FullAttentionSpec) for name in groups[0].layer_names):
        kinds = sorted({type(spec).__name__ for spec in specs.values()})
        raise KvplanError(
            f"--workload runs full-attention models only (one KV cache group), and this one has "
            f"{len(groups)} groups ({', '.join(kinds)}), which the simulated block manager does not model"
        )
    layer_names = set(groups[0].layer_names)
    layouts: dict[int, LayerLayout] = {}
    for layout in pool.layouts:
        if layout.layer_name in layer_names:
            layouts.setdefault(layout.tensor_index, layout)
    return list(layouts.values())


def _tensor_sets(pool: KvCacheAllocation, layouts: list[LayerLayout], ordinals: list[int]) -> list[_Tensors]:
    """Group the layouts (numbered by `ordinals`) by how they are indexed and what they hold."""
    keys: dict[tuple, list[tuple[int, LayerLayout, torch.Tensor]]] = {}
    for ordinal, layout in zip(ordinals, layouts, strict=True):
        (view,) = pool.views[layout.layer_name]
        probe = slot_index(layout, pool.backend, 0, torch.zeros(1, dtype=torch.int64, device=view.device))
        key = (layout.kind, layout.kernel_block_size, view.dtype, tuple(view[probe].shape[1:]))
        keys.setdefault(key, []).append((ordinal, layout, view))
    sets = []
    for (kind, _kernel, dtype, token_shape), members in keys.items():
        sides = (0,) if kind == "mla" else (0, 1)
        device = members[0][2].device
        sets.append(_Tensors(
            layout=members[0][1], layer_names=tuple(m[1].layer_name for m in members),
            views=tuple(m[2] for m in members), sides=torch.tensor(sides, device=device).view(-1, 1),
            values=KvValues([m[0] for m in members], sides, token_shape, dtype, device),
        ))
    return sets


class PoolWriter:
    """The scheduler's model runner: writes each step's K/V into the pool and reads it back."""

    def __init__(self, pool: KvCacheAllocation, config: EngineConfig, verify_every: int) -> None:
        if verify_every < 1:
            raise KvplanError(f"verify_every must be at least 1 step, got {verify_every}")
        self.backend = pool.backend
        self.block_size = config.block_size
        self.max_model_len = config.max_model_len
        self.verify_every = verify_every
        layouts = _attention_layouts(pool)
        self.written = _tensor_sets(pool, layouts, list(range(len(layouts))))
        # reading back is the costly half: the first and the last tensor catch a wrong slot mapping
        picked = [0, len(layouts) - 1] if len(layouts) > 1 else [0]
        self.checked = [_tensor_sets(pool, [layouts[i]], [i])[0] for i in picked]
        self.num_tensors = len(layouts)
        self.device = self.written[0].views[0].device
        self._chains: dict[str, tuple[int, int]] = {}   # request -> (positions known, last chain value)
        self._lives: dict[str, tuple[int, int]] = {}    # request -> (preemptions, first position it computed)
        self.steps = 0
        self.tokens_written = 0
        self.request_verifications = 0
        self.tokens_verified = 0
        self.prefix_hit_tokens_verified = 0
        self.mismatched_tokens = 0
        self.first_mismatch: Mismatch | None = None

    @property
    def layers_verified(self) -> tuple[str, ...]:
        return tuple(tensors.layer_names[0] for tensors in self.checked)

    def __call__(self, scheduler: Scheduler, scheduled: dict[str, int]) -> None:
        step = scheduler.num_steps
        self.steps = step + 1
        if scheduled:
            self._write(scheduler, scheduled)
        finishing = [scheduler.requests[rid] for rid in scheduled if self._finishes(scheduler.requests[rid])]
        if (step + 1) % self.verify_every == 0:
            self._verify(scheduler, list(scheduler.running), step)
        elif finishing:
            self._verify(scheduler, finishing, step)
        for request in finishing:
            self._chains.pop(request.request_id, None)
            self._lives.pop(request.request_id, None)

    def _finishes(self, request: Request) -> bool:
        # The tokens still to come from the batches scheduled so far: under async scheduling its
        # output placeholders (this batch's included), under sync this batch's token if it samples
        # one. The request ends when they reach max_tokens or the model length.
        coming = request.num_output_placeholders or int(request.num_computed_tokens == request.num_tokens)
        return coming > 0 and (request.num_output_tokens + coming >= request.max_tokens
                               or request.num_tokens + coming >= self.max_model_len)

    # -- writing

    def _chain_before(self, request: Request, start: int) -> int:
        """The chain value at position start - 1 (0 for the first token)."""
        known, last = self._chains.get(request.request_id, (0, 0))
        if start == known:
            return last
        if start == 0:
            return 0
        # a prefix hit or a restart after preemption: the tokens before are known, their chain is not
        return int(content_chain(_as_int64(request.token_ids(0, start)), 0, 0)[-1])

    def _write(self, scheduler: Scheduler, scheduled: dict[str, int]) -> None:
        block_size = self.block_size
        get_blocks = scheduler.kv_cache_manager.get_blocks
        single_chains: list[int] = []
        single_slots: list[int] = []
        chunk_chains: list[torch.Tensor] = []
        chunk_slots: list[torch.Tensor] = []
        for request_id, num_tokens in scheduled.items():
            request = scheduler.requests[request_id]
            end = request.num_computed_tokens
            start = end - num_tokens
            life = self._lives.get(request_id)
            if life is None or life[0] != request.num_preemptions:
                self._lives[request_id] = (request.num_preemptions, start)
            before = self._chain_before(request, start)
            blocks = get_blocks(request_id)
            if num_tokens == 1:
                # a decode step: plain integers, no tensor per request
                last = (before + _mix_one(request.token_ids(start, end)[0], start)) % _PRIME
                single_chains.append(last)
                single_slots.append(blocks[start // block_size].block_id * block_size + start % block_size)
            else:
                chain = content_chain(_as_int64(request.token_ids(start, end)), start, before)
                last = int(chain[-1])
                first = start // block_size
                table = torch.tensor([b.block_id for b in blocks[first:(end - 1) // block_size + 1]],
                                     dtype=torch.int64)
                positions = torch.arange(start, end, dtype=torch.int64)
                chunk_chains.append(chain)
                chunk_slots.append(table[positions // block_size - first] * block_size + positions % block_size)
            self._chains[request_id] = (end, last)
            self.tokens_written += num_tokens
        chains = torch.cat([torch.tensor(single_chains, dtype=torch.int64), *chunk_chains]).to(self.device)
        slots = torch.cat([torch.tensor(single_slots, dtype=torch.int64), *chunk_slots]).to(self.device)
        for tensors in self.written:
            index = slot_index(tensors.layout, self.backend, tensors.sides, slots.view(1, -1))
            values = tensors.values(chains)
            for view, own in zip(tensors.views, values, strict=True):
                write_kv(view, index, own)

    # -- reading back

    def _verify(self, scheduler: Scheduler, requests: list[Request], step: int) -> None:
        block_size = self.block_size
        ids: list[str] = []
        starts: list[int] = []
        chains: list[torch.Tensor] = []
        slots: list[torch.Tensor] = []
        offset = 0
        for request in requests:
            computed = request.num_computed_tokens
            if computed == 0:
                continue
            chains.append(content_chain(_as_int64(request.token_ids(0, computed)), 0, 0))
            blocks = scheduler.kv_cache_manager.get_blocks(request.request_id)
            table = torch.tensor([b.block_id for b in blocks[:(computed - 1) // block_size + 1]], dtype=torch.int64)
            positions = torch.arange(computed, dtype=torch.int64)
            slots.append(table[positions // block_size] * block_size + positions % block_size)
            ids.append(request.request_id)
            starts.append(offset)
            offset += computed
            life = self._lives.get(request.request_id)
            self.prefix_hit_tokens_verified += min(life[1], computed) if life else 0
        if not chains:
            return
        chain = torch.cat(chains).to(self.device)
        slot = torch.cat(slots).to(self.device)
        differs: list[tuple[str, torch.Tensor]] = []
        for tensors in self.checked:
            (view,) = tensors.views
            got = view[slot_index(tensors.layout, self.backend, tensors.sides, slot.view(1, -1))]
            (expected,) = tensors.values(chain)
            # (sides, tokens, ...) -> one flag per token: K or V differs somewhere
            wrong_here = (_bits(got) != _bits(expected)).transpose(0, 1).reshape(len(chain), -1).any(dim=1)
            differs.append((tensors.layer_names[0], wrong_here))
        wrong = torch.stack([flags for _, flags in differs]).any(dim=0)
        self.request_verifications += len(ids)
        self.tokens_verified += len(chain)
        count = int(wrong.sum())
        self.mismatched_tokens += count
        if count and self.first_mismatch is None:
            index = int(wrong.nonzero()[0])
            owner = bisect_right(starts, index) - 1
            self.first_mismatch = Mismatch(
                step=step, request_id=ids[owner], position=index - starts[owner],
                block_id=int(slot[index]) // block_size,
                layer=next(name for name, flags in differs if bool(flags[index])),
            )


def write_kv(view: torch.Tensor, index: tuple, values: torch.Tensor) -> None:
    """The model's `reshape_and_cache`: one indexed copy per tensor and step, K and V together."""
    view[index] = values
