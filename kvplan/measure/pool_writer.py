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
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from math import prod

import torch

from kvplan.errors import KvplanError
from kvplan.measure.backend import LayerLayout
from kvplan.measure.kv_tensors import KvCacheAllocation, slot_index
from kvplan.semantics.engine.config import EngineConfig
from kvplan.semantics.engine.request import Request
from kvplan.semantics.engine.scheduler import Scheduler
from kvplan.semantics.kv.specs import KVCacheGroupSpec

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


# Mamba states: this many leading elements of each state of a block carry the request's signature
STATE_SIGNATURE = 8


@dataclass(frozen=True)
class _States:
    """The Mamba layers of one group: each layer's states (conv, ssm, ...) seen per block, flat; the
    request's state after its last computed token is its content chain's signature in the leading
    elements of every state."""

    layer_names: tuple[str, ...]
    flats: tuple[tuple[torch.Tensor, ...], ...]      # per layer, per state: (blocks, elements)
    values: tuple[KvValues, ...]                     # per state kind (its dtype)


@dataclass(frozen=True)
class _Group:
    """One KV cache group: its block size, its attention tensors or its Mamba states."""

    group_id: int
    block_size: int
    written: tuple[_Tensors, ...] = ()
    checked: tuple[_Tensors, ...] = ()
    states: _States | None = None

    @property
    def layers_verified(self) -> tuple[str, ...]:
        if self.states is not None:
            return self.states.layer_names[:1]
        return tuple(tensors.layer_names[0] for tensors in self.checked)


def _group_layouts(pool: KvCacheAllocation, group: KVCacheGroupSpec) -> list[LayerLayout]:
    """One layout per KV tensor the group's layers view (the first of its layers that views it)."""
    layer_names = set(group.layer_names)
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


def _mamba_states(pool: KvCacheAllocation, layouts: list[LayerLayout], first_ordinal: int) -> _States:
    views = [pool.views[layout.layer_name] for layout in layouts]
    # `view` (not flatten) so that a layout that cannot be seen flat fails instead of copying
    flats = tuple(tuple(state.view(state.shape[0], -1)[:, :STATE_SIGNATURE] for state in states) for states in views)
    device = views[0][0].device
    values = tuple(
        KvValues(range(first_ordinal, first_ordinal + len(layouts)), (0,), (STATE_SIGNATURE,), state.dtype, device)
        for state in views[0]
    )
    return _States(tuple(layout.layer_name for layout in layouts), flats, values)


def _groups(pool: KvCacheAllocation, config: EngineConfig) -> list[_Group]:
    """Every KV cache group of the pool, checked against the engine's: one kind of group each."""
    engine_groups = config.groups
    pool_groups = pool.config.kv_cache_groups
    if len(engine_groups) != len(pool_groups):
        raise KvplanError(f"the engine runs {len(engine_groups)} KV cache group(s) but the pool has "
                          f"{len(pool_groups)}: give the engine the pool's groups")
    groups, ordinal = [], 0
    for group_id, (engine_group, group) in enumerate(zip(engine_groups, pool_groups, strict=True)):
        layouts = _group_layouts(pool, group)
        if not layouts:
            groups.append(_Group(group_id, engine_group.block_size or config.block_size))
            continue
        block_size = engine_group.block_size or config.block_size
        if layouts[0].kind == "mamba":
            groups.append(_Group(group_id, block_size, states=_mamba_states(pool, layouts, ordinal)))
        else:
            ordinals = list(range(ordinal, ordinal + len(layouts)))
            # reading back is the costly half: the first and the last tensor catch a wrong slot mapping
            picked = [0, len(layouts) - 1] if len(layouts) > 1 else [0]
            groups.append(_Group(
                group_id, block_size, written=tuple(_tensor_sets(pool, layouts, ordinals)),
                checked=tuple(_tensor_sets(pool, [layouts[i]], [ordinals[i]])[0] for i in picked),
            ))
        ordinal += len(layouts)
    return groups


class PoolWriter:
    """The scheduler's model runner: writes each step's K/V (and Mamba states) into the pool, group by
    group through the group's own block table, and reads them back."""

    def __init__(self, pool: KvCacheAllocation, config: EngineConfig, verify_every: int) -> None:
        if verify_every < 1:
            raise KvplanError(f"verify_every must be at least 1 step, got {verify_every}")
        self.backend = pool.backend
        self.max_model_len = config.max_model_len
        self.verify_every = verify_every
        self.groups = _groups(pool, config)
        self.num_tensors = len({layout.tensor_index for layout in pool.layouts})
        first = next(g for g in self.groups if g.written or g.states)
        self.device = first.written[0].views[0].device if first.written else first.states.flats[0][0].device  # type: ignore[union-attr]
        self._chains: dict[str, tuple[int, int]] = {}   # request -> (positions known, last chain value)
        self._lives: dict[str, tuple[int, int]] = {}    # request -> (preemptions, first position it computed)
        self.steps = 0
        self.tokens_written = 0
        self.request_verifications = 0
        self.tokens_verified = 0
        self.prefix_hit_tokens_verified = 0
        self.mismatched_tokens = 0
        self.first_mismatch: Mismatch | None = None
        # positions (attention) or states (Mamba) read back, per group
        self.verified_by_group = [0] * len(self.groups)

    @property
    def layers_verified(self) -> tuple[str, ...]:
        return tuple(name for group in self.groups for name in group.layers_verified)

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
        chains: list[torch.Tensor] = []
        spans: list[tuple[int, int]] = []
        tables: list[tuple[list[int], ...]] = []
        for request_id, num_tokens in scheduled.items():
            request = scheduler.requests[request_id]
            end = request.num_computed_tokens
            start = end - num_tokens
            life = self._lives.get(request_id)
            if life is None or life[0] != request.num_preemptions:
                self._lives[request_id] = (request.num_preemptions, start)
            before = self._chain_before(request, start)
            if num_tokens == 1:
                chain = torch.tensor([(before + _mix_one(request.token_ids(start, end)[0], start)) % _PRIME])
            else:
                chain = content_chain(_as_int64(request.token_ids(start, end)), start, before)
            self._chains[request_id] = (end, int(chain[-1]))
            chains.append(chain)
            spans.append((start, end))
            tables.append(scheduler.kv_cache_manager.get_block_ids_by_group(request_id))
            self.tokens_written += num_tokens
        all_chains = torch.cat(chains).to(self.device)
        last_chains = torch.stack([chain[-1] for chain in chains]).to(self.device)
        for group in self.groups:
            if group.states is not None:
                blocks = torch.tensor([table[group.group_id][-1] for table in tables], dtype=torch.int64)
                _write_states(group.states, blocks.to(self.device), last_chains)
                continue
            if not group.written:
                continue
            slots = torch.cat([_slots(table[group.group_id], start, end, group.block_size)
                               for table, (start, end) in zip(tables, spans, strict=True)]).to(self.device)
            for tensors in group.written:
                index = slot_index(tensors.layout, self.backend, tensors.sides, slots.view(1, -1))
                for view, own in zip(tensors.views, tensors.values(all_chains), strict=True):
                    write_kv(view, index, own)

    # -- reading back

    def _verify(self, scheduler: Scheduler, requests: list[Request], step: int) -> None:
        ids: list[str] = []
        chains: list[torch.Tensor] = []
        tables: list[tuple[list[int], ...]] = []
        for request in requests:
            computed = request.num_computed_tokens
            if computed == 0:
                continue
            chains.append(content_chain(_as_int64(request.token_ids(0, computed)), 0, 0))
            tables.append(scheduler.kv_cache_manager.get_block_ids_by_group(request.request_id))
            ids.append(request.request_id)
            life = self._lives.get(request.request_id)
            self.prefix_hit_tokens_verified += min(life[1], computed) if life else 0
        if not chains:
            return
        self.request_verifications += len(ids)
        for group in self.groups:
            if group.states is not None:
                self._verify_states(group, ids, chains, tables, step)
            elif group.checked:
                self._verify_attention(group, ids, chains, tables, step)

    def _verify_attention(self, group: _Group, ids: list[str], chains: list[torch.Tensor],
                          tables: list[tuple[list[int], ...]], step: int) -> None:
        """Every position whose block the group still holds (a window drops the older ones)."""
        block_size = group.block_size
        kept_chains, slots, owners, positions = [], [], [], []
        for index, (chain, table) in enumerate(zip(chains, tables, strict=True)):
            blocks = torch.tensor(table[group.group_id], dtype=torch.int64)
            at = torch.arange(len(chain), dtype=torch.int64)
            ids_at = blocks[at // block_size]
            held = ids_at != 0
            kept_chains.append(chain[held])
            slots.append(ids_at[held] * block_size + at[held] % block_size)
            owners.append(torch.full((int(held.sum()),), index, dtype=torch.int64))
            positions.append(at[held])
        chain = torch.cat(kept_chains).to(self.device)
        self.verified_by_group[group.group_id] += len(chain)
        if not len(chain):
            return
        slot = torch.cat(slots).to(self.device)
        differs: list[tuple[str, torch.Tensor]] = []
        for tensors in group.checked:
            (view,) = tensors.views
            got = view[slot_index(tensors.layout, self.backend, tensors.sides, slot.view(1, -1))]
            (expected,) = tensors.values(chain)
            # (sides, tokens, ...) -> one flag per token: K or V differs somewhere
            wrong_here = (_bits(got) != _bits(expected)).transpose(0, 1).reshape(len(chain), -1).any(dim=1)
            differs.append((tensors.layer_names[0], wrong_here))
        wrong = torch.stack([flags for _, flags in differs]).any(dim=0)
        self._count(wrong, len(chain), step, lambda i: (
            ids[int(torch.cat(owners)[i])], int(torch.cat(positions)[i]), int(slot[i]) // block_size,
            next(name for name, flags in differs if bool(flags[i]))))

    def _verify_states(self, group: _Group, ids: list[str], chains: list[torch.Tensor],
                       tables: list[tuple[list[int], ...]], step: int) -> None:
        """The state block a request runs on holds the state after its last computed token."""
        states = group.states
        assert states is not None
        blocks = torch.tensor([table[group.group_id][-1] for table in tables], dtype=torch.int64).to(self.device)
        last = torch.stack([chain[-1] for chain in chains]).to(self.device)
        wrong = torch.zeros(len(ids), dtype=torch.bool, device=self.device)
        self.verified_by_group[group.group_id] += len(ids)
        for layer, flats in zip(range(len(states.layer_names)), states.flats, strict=True):
            for flat, values in zip(flats, states.values, strict=True):
                expected = values(last)[layer, 0]
                wrong |= (_bits(flat[blocks]) != _bits(expected)).any(dim=1)
        self._count(wrong, len(ids), step, lambda i: (
            ids[i], len(chains[i]) - 1, int(blocks[i]), states.layer_names[0]))

    def _count(self, wrong: torch.Tensor, checked: int, step: int,
               where: Callable[[int], tuple[str, int, int, str]]) -> None:
        self.tokens_verified += checked
        count = int(wrong.sum())
        self.mismatched_tokens += count
        if count and self.first_mismatch is None:
            request_id, position, block_id, layer = where(int(wrong.nonzero()[0]))
            self.first_mismatch = Mismatch(step=step, request_id=request_id, position=position, block_id=block_id,
                                           layer=layer)


def _slots(block_ids: list[int], start: int, end: int, block_size: int) -> torch.Tensor:
    """The slot mapping of positions [start, end) through one group's block table."""
    first = start // block_size
    table = torch.tensor(block_ids[first:(end - 1) // block_size + 1], dtype=torch.int64)
    positions = torch.arange(start, end, dtype=torch.int64)
    return table[positions // block_size - first] * block_size + positions % block_size


def _write_states(states: _States, blocks: torch.Tensor, chains: torch.Tensor) -> None:
    """Each request's state after its last token into the state block it runs on."""
    for layer, flats in enumerate(states.flats):
        for flat, values in zip(flats, states.values, strict=True):
            flat[blocks] = values(chains)[layer, 0]


def write_kv(view: torch.Tensor, index: tuple, values: torch.Tensor) -> None:
    """The model's `reshape_and_cache`: one indexed copy per tensor and step, K and V together."""
    view[index] = values
