"""The pool writer of `kvplan profile --workload`: K/V written through each step's slot mapping and
read back through the block tables, on hand-made pools of every layout; a wrong write, a wrong slot
or a prefix cache that reuses the wrong blocks is found."""

from __future__ import annotations

import hashlib

import pytest
import torch

import kvplan.measure.pool_writer as pool_writer
from kvplan.errors import KvplanError
from kvplan.measure.kv_tensors import allocate_kv_cache
from kvplan.measure.pool_writer import KvValues, PoolWriter, content_chain
from kvplan.semantics.engine.config import EngineConfig
from kvplan.semantics.engine.groups import groups_from_kv_cache_config
from kvplan.semantics.engine.request import Request
from kvplan.semantics.engine.scheduler import Scheduler
from kvplan.semantics.kv.layout import ATTENTION_BACKENDS
from kvplan.semantics.kv.specs import (
    FullAttentionSpec,
    KVCacheConfig,
    KVCacheGroupSpec,
    KVCacheTensor,
    MambaSpec,
    MLAAttentionSpec,
    SlidingWindowSpec,
)
from tests.references import block_ids

# ---------------------------------------------------------------------------- the values


def test_the_chain_is_the_same_in_one_chunk_or_token_by_token():
    tokens = [5, 10**12 + 3, 7, 7, 0, 2**40]
    whole = content_chain(torch.tensor(tokens), 0, 0).tolist()
    value = 0
    for position, token in enumerate(tokens):
        value = (value + pool_writer._mix_one(token, position)) % pool_writer._PRIME
        assert value == whole[position]
    # a chunk continues from the value before it
    assert content_chain(torch.tensor(tokens[3:]), 3, whole[2]).tolist() == whole[3:]
    # the same token after a different prefix has a different chain value
    assert content_chain(torch.tensor([6, 7]), 0, 0)[1] != content_chain(torch.tensor([5, 7]), 0, 0)[1]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16, torch.float8_e4m3fn, torch.uint8])
def test_values_are_exact_distinct_and_never_nan(dtype):
    values = KvValues([0, 1], [0, 1], (2, 16), dtype, torch.device("cpu"))
    chain = content_chain(torch.arange(64), 0, 0)
    out = values(chain)
    assert out.shape == (2, 2, 64, 2, 16) and out.dtype == dtype
    assert torch.equal(pool_writer._bits(out), pool_writer._bits(values(chain)))
    if dtype in (torch.bfloat16, torch.float16):
        # k / 8 for k in [-128, 128): exact in 16 bits
        as_float = out.float()
        assert torch.equal(as_float * 8, (as_float * 8).round()) and as_float.abs().max() <= 16
    flat = out.float().reshape(2, 2, 64, -1)
    assert not torch.isnan(flat).any()
    # tensors, K and V, and tokens all differ
    assert not torch.equal(flat[0, 0], flat[1, 0]) and not torch.equal(flat[0, 0], flat[0, 1])
    assert all(not torch.equal(flat[0, 0, i], flat[0, 0, i + 1]) for i in range(63))


# ---------------------------------------------------------------------------- the writer on a hand-made pool


def one_group(spec, num_layers: int, num_blocks: int) -> KVCacheConfig:
    names = tuple(f"model.layers.{i}.self_attn.attn" for i in range(num_layers))
    tensors = tuple(KVCacheTensor(spec.page_size_bytes * num_blocks, (name,)) for name in names)
    return KVCacheConfig(num_blocks, tensors, (KVCacheGroupSpec(names, spec),))


def drive(writer: PoolWriter, config: EngineConfig, prompts: list[list[int]], outputs: int) -> tuple[Scheduler, int]:
    """Run the prompts to the end with `writer` as the model; the scheduler and the tokens it scheduled."""
    scheduler = Scheduler(config, writer)
    for index, prompt in enumerate(prompts):
        first = 10**9 + index * 1000
        scheduler.add_request(Request(f"r{index}", prompt, outputs, range(first, first + outputs)))
    scheduled = 0
    while scheduler.has_unfinished():
        result = scheduler.step()
        assert result.num_scheduled_tokens or result.preempted or result.output_of_earlier_batch, "stalled"
        scheduled += result.num_scheduled_tokens
    return scheduler, scheduled


SHARED = list(range(100, 148))      # three 16-token blocks shared by every prompt
PROMPTS = [SHARED + list(range(1000 * i, 1000 * i + 20 + 7 * i)) for i in range(6)]


@pytest.mark.parametrize(("backend", "spec"), [
    *[(backend, FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=8, dtype="bfloat16"))
      for backend in ATTENTION_BACKENDS],
    # one 128-token manager block is two 64-token FlashInfer kernel blocks
    ("flashinfer", FullAttentionSpec(block_size=128, num_kv_heads=1, head_size=8, dtype="float16")),
    # an fp8 cache is stored as uint8
    ("flash_attn", FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=8, dtype="uint8")),
    ("flash_attn", MLAAttentionSpec(block_size=16, num_kv_heads=1, head_size=24, dtype="bfloat16")),
])
def test_every_layout_round_trips_through_prefix_hits_and_preemptions(backend, spec):
    block_size = spec.block_size
    num_blocks = 12 if block_size == 16 else 4
    pool = allocate_kv_cache(one_group(spec, 3, num_blocks), backend, "cpu")
    config = EngineConfig(num_gpu_blocks=num_blocks, block_size=block_size, max_num_batched_tokens=64,
                          max_num_seqs=4, max_model_len=512)
    writer = PoolWriter(pool, config, verify_every=1)
    scheduler, scheduled = drive(writer, config, PROMPTS, outputs=24)
    assert writer.mismatched_tokens == 0 and writer.first_mismatch is None
    assert writer.tokens_verified > 0 and writer.request_verifications >= len(PROMPTS)
    assert writer.tokens_written == scheduled and writer.steps == scheduler.num_steps
    if block_size == 16:
        assert scheduler.total_preemptions > 0 and writer.prefix_hit_tokens_verified > 0
    assert writer.layers_verified == ("model.layers.0.self_attn.attn", "model.layers.2.self_attn.attn")


def test_the_values_sit_where_the_kernels_read_them():
    """Read the raw int8 bytes of the flash_attn layout (2, blocks, block_size, heads, head) by hand."""
    spec = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=8, dtype="bfloat16")
    pool = allocate_kv_cache(one_group(spec, 2, 8), "flash_attn", "cpu")
    config = EngineConfig(num_gpu_blocks=8, block_size=16, max_num_batched_tokens=64, max_num_seqs=2,
                          max_model_len=256)
    writer = PoolWriter(pool, config, verify_every=1)
    prompt = list(range(7, 7 + 40))
    scheduler = Scheduler(config, writer)
    scheduler.add_request(Request("only", prompt, 4, range(500, 504)))
    scheduler.step()                         # the whole prompt in one step, then the first token
    blocks = block_ids(scheduler.kv_cache_manager, "only")
    raw = pool.raw[1].view(torch.bfloat16).view(2, 8, 16, 2, 8)
    expected = KvValues([1], [0, 1], (2, 8), torch.bfloat16, torch.device("cpu"))(
        content_chain(torch.tensor(prompt), 0, 0))[0]
    for position in (0, 15, 16, 39):
        block, offset = blocks[position // 16], position % 16
        for which in (0, 1):
            assert torch.equal(raw[which, block, offset], expected[which, position])


@pytest.mark.parametrize("corruption", ["values", "block"])
def test_a_wrong_write_is_found(corruption, monkeypatch):
    spec = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=8, dtype="bfloat16")
    pool = allocate_kv_cache(one_group(spec, 2, 12), "flash_attn", "cpu")
    config = EngineConfig(num_gpu_blocks=12, block_size=16, max_num_batched_tokens=64, max_num_seqs=4,
                          max_model_len=512)
    calls = []
    original = pool_writer.write_kv

    def corrupt(view, index, values):
        calls.append(1)
        if len(calls) == 9:
            if corruption == "values":
                values = values + 1
            else:
                which, blocks, offsets = index
                index = (which, blocks % 11 + 1, offsets)    # the next block (11 -> 1)
        original(view, index, values)

    monkeypatch.setattr(pool_writer, "write_kv", corrupt)
    writer = PoolWriter(pool, config, verify_every=1)
    drive(writer, config, PROMPTS, outputs=24)
    assert writer.mismatched_tokens > 0
    mismatch = writer.first_mismatch
    assert mismatch is not None and mismatch.request_id.startswith("r")
    assert mismatch.layer.startswith("model.layers.")


@pytest.mark.parametrize("broken", [False, True])
def test_a_prefix_cache_that_reuses_the_wrong_blocks_is_found(broken, monkeypatch):
    """A block hash over the first token of each block only: the second prompt 'hits' the first
    one's blocks though only some of their tokens match, and reads K/V written for other tokens."""
    from kvplan.semantics.engine import hashing

    def first_token_only(self, request):
        size, hashes = self.block_size, request.block_hashes
        for block in range(len(hashes), request.num_tokens // size):
            parent = hashes[-1] if hashes else self.none_hash
            token = request.token_ids(block * size, block * size + 1)
            hashes.append(hashlib.sha256(parent + hashing.encode_tokens(token)).digest())

    if broken:
        monkeypatch.setattr(hashing.RequestBlockHasher, "update", first_token_only)
    spec = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=8, dtype="bfloat16")
    pool = allocate_kv_cache(one_group(spec, 2, 12), "flash_attn", "cpu")
    config = EngineConfig(num_gpu_blocks=12, block_size=16, max_num_batched_tokens=128, max_num_seqs=4,
                          max_model_len=512)
    writer = PoolWriter(pool, config, verify_every=1)
    # the same first token in each of the three blocks, other tokens after it
    other = [token if position % 16 == 0 else token + 7 for position, token in enumerate(SHARED)]
    scheduler, _ = drive(writer, config, [[*SHARED, 1, 2, 3], [*other, 4, 5, 6]], outputs=2)
    hits = scheduler.prefix_cache_stats.hits
    assert (hits, writer.mismatched_tokens > 0) == ((48, True) if broken else (0, False))


def test_the_cuda_backend_hands_over_its_pool():
    """A fake torch.cuda with tensors in RAM: the pool the cuda backend allocated is the one written."""
    from types import SimpleNamespace

    from kvplan.measure.cuda import CudaBackend

    fake = SimpleNamespace(
        is_available=lambda: True, device_count=lambda: 1, set_device=lambda device: None,
        get_device_properties=lambda device: SimpleNamespace(name="NVIDIA H100", multi_processor_count=132),
        memory_allocated=lambda device: 0, synchronize=lambda device=None: None,
    )
    spec = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=8, dtype="bfloat16")
    report = CudaBackend(0, cuda=fake, tensor_device="cpu").allocate(one_group(spec, 2, 12), "flash_attn")
    assert report.real and report.pool is not None and report.check.passed
    config = EngineConfig(num_gpu_blocks=12, block_size=16, max_num_batched_tokens=64, max_num_seqs=4,
                          max_model_len=512)
    writer = PoolWriter(report.pool, config, verify_every=4)
    drive(writer, config, PROMPTS, outputs=8)
    assert writer.tokens_verified > 0 and writer.mismatched_tokens == 0
    assert bool((report.pool.raw[0] != 0).any())


# ---------------------------------------------------------------------------- hybrid pools: several groups


FULL = FullAttentionSpec(block_size=16, num_kv_heads=1, head_size=8, dtype="float16")   # 512-byte pages


def hybrid_pool(other, num_blocks: int) -> KVCacheConfig:
    """Two full-attention layers and two `other` layers, tensor i shared by layer i of each group."""
    groups = (KVCacheGroupSpec(("a0", "a1"), FULL), KVCacheGroupSpec(("b0", "b1"), other))
    tensors = tuple(KVCacheTensor(FULL.page_size_bytes * num_blocks, (f"a{i}", f"b{i}")) for i in range(2))
    return KVCacheConfig(num_blocks, tensors, groups)


def test_a_sliding_window_group_is_written_and_read_through_its_own_block_table():
    window = SlidingWindowSpec(block_size=16, num_kv_heads=1, head_size=8, dtype="float16", sliding_window=32)
    pool = allocate_kv_cache(hybrid_pool(window, 24), "flash_attn", "cpu")
    config = EngineConfig(num_gpu_blocks=24, block_size=16, max_num_batched_tokens=64, max_num_seqs=4,
                          max_model_len=512,
                          kv_cache_groups=groups_from_kv_cache_config(pool.config.kv_cache_groups))
    writer = PoolWriter(pool, config, verify_every=1)
    scheduler, scheduled = drive(writer, config, PROMPTS, outputs=24)
    assert writer.mismatched_tokens == 0 and writer.tokens_written == scheduled
    assert writer.layers_verified == ("a0", "a1", "b0", "b1")
    # the window group drops the blocks that fall out of its window: its tables hold nulls
    assert scheduler.prefix_cache_stats.hits > 0 and writer.prefix_hit_tokens_verified > 0
    full, windowed = writer.verified_by_group
    assert 0 < windowed < full


@pytest.mark.parametrize("broken", [False, True])
def test_mamba_states_sit_in_the_block_each_request_runs_on(broken, monkeypatch):
    state = MambaSpec(block_size=512, shapes=((3, 8), (2, 4, 4)), dtypes=("float16", "float32"),
                      page_size_padded=FULL.page_size_bytes, mamba_cache_mode="none")
    pool = allocate_kv_cache(hybrid_pool(state, 16), "flash_attn", "cpu")
    config = EngineConfig(num_gpu_blocks=16, block_size=16, enable_prefix_caching=False, max_num_batched_tokens=64,
                          max_num_seqs=4, max_model_len=512,
                          kv_cache_groups=groups_from_kv_cache_config(pool.config.kv_cache_groups))
    if broken:  # every request's state written into one block: the requests overwrite each other
        original = pool_writer._write_states
        monkeypatch.setattr(pool_writer, "_write_states",
                            lambda states, blocks, chains: original(states, blocks.clamp(max=1), chains))
    writer = PoolWriter(pool, config, verify_every=1)
    drive(writer, config, PROMPTS, outputs=8)
    assert writer.layers_verified == ("a0", "a1", "b0")
    assert (writer.mismatched_tokens > 0) == broken and writer.tokens_verified > 0
    if broken:
        assert writer.first_mismatch is not None and writer.first_mismatch.layer in ("a0", "a1", "b0")
    # the states really are in the pool's bytes
    assert bool((pool.views["b1"][1] != 0).any())


def test_an_engine_without_the_pools_groups_is_refused():
    window = SlidingWindowSpec(block_size=16, num_kv_heads=1, head_size=8, dtype="float16", sliding_window=32)
    pool = allocate_kv_cache(hybrid_pool(window, 4), "flash_attn", "cpu")
    with pytest.raises(KvplanError, match=r"engine runs 1 KV cache group\(s\) but the pool has 2"):
        PoolWriter(pool, EngineConfig(num_gpu_blocks=4), verify_every=1)
