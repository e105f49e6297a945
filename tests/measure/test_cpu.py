"""The cpu backend: real tensors, dummy or safetensors weights, a real pool that must fit in RAM."""

from __future__ import annotations

import pytest
import torch

from kvplan.errors import EXIT_FINDING, DoesNotFitError, KvplanError
from kvplan.measure import cpu
from kvplan.measure.backend import ModelSource
from kvplan.measure.cpu import CpuBackend, check_pool_fits_ram, check_weights_fit_ram, ram_available_bytes
from kvplan.measure.hf import build_dummy_model, hf_config, weights_bytes
from kvplan.semantics.kv.specs import FullAttentionSpec, KVCacheConfig, KVCacheGroupSpec, KVCacheTensor
from kvplan.semantics.memory.profile_batch import profile_batch

GIB = 1 << 30
SPEC = FullAttentionSpec(block_size=16, num_kv_heads=2, head_size=16, dtype="bfloat16")


def pool(num_blocks: int, layers: int = 2) -> KVCacheConfig:
    names = tuple(f"model.layers.{i}.self_attn.attn" for i in range(layers))
    tensors = tuple(KVCacheTensor(SPEC.page_size_bytes * num_blocks, (n,)) for n in names)
    return KVCacheConfig(num_blocks, tensors, (KVCacheGroupSpec(names, SPEC),))


@pytest.fixture(scope="module")
def saved_tiny_model(tmp_path_factory, tiny_config):
    directory = tmp_path_factory.mktemp("tiny-safetensors")
    build_dummy_model(hf_config(tiny_config), torch.bfloat16, "cpu").save_pretrained(directory)
    return directory


def test_dummy_weights_are_in_vllms_range_and_tied(tiny_config):
    model = build_dummy_model(hf_config(tiny_config), torch.bfloat16, "cpu")
    assert model.lm_head.weight is model.model.embed_tokens.weight
    assert float(model.model.layers[0].mlp.up_proj.weight.abs().max()) <= 1e-3


def test_safetensors_load_measures_the_same_weights_as_dummy(saved_tiny_model, tiny_config):
    dummy = CpuBackend(GIB, "cpu").load_model(ModelSource("tiny", tiny_config, "bfloat16"))
    backend = CpuBackend(GIB, "cpu")
    loaded = backend.load_model(
        ModelSource("tiny", tiny_config, "bfloat16", load_format="auto", directory=saved_tiny_model)
    )
    assert loaded.weights_bytes == dummy.weights_bytes and loaded.parameter_bytes == dummy.parameter_bytes
    measured = backend.profile(profile_batch(256, 4), 132)
    assert measured.activation_peak_bytes > 0
    assert "vmhwm_increase_bytes" in measured.cross_checks


def test_auto_needs_a_local_directory(tiny_config):
    with pytest.raises(KvplanError, match="local directory"):
        CpuBackend(GIB, "cpu").load_model(ModelSource("org/m", tiny_config, "bfloat16", load_format="auto"))


def test_pickled_checkpoints_are_never_loaded(tmp_path, tiny_config):
    (tmp_path / "pytorch_model.bin").write_bytes(b"not unpickled")
    source = ModelSource("tiny", tiny_config, "bfloat16", load_format="auto", directory=tmp_path)
    with pytest.raises(KvplanError, match="never unpickles"):
        CpuBackend(GIB, "cpu").load_model(source)


def test_pool_larger_than_free_ram_is_refused_with_advice():
    with pytest.raises(KvplanError, match=r"--gpu-memory .*--no-allocate"):
        check_pool_fits_ram(10 * GIB, 4 * GIB)
    check_pool_fits_ram(1, None)
    available = ram_available_bytes()
    assert available is not None
    blocks = available // SPEC.page_size_bytes  # two layers of this: twice the free RAM
    with pytest.raises(KvplanError, match="does not fit"):
        CpuBackend(4 * available, "cpu").allocate(pool(blocks), "flash_attn")


def test_weights_larger_than_free_ram_are_refused():
    with pytest.raises(KvplanError, match="--backend fake"):
        check_weights_fit_ram(16 * GIB, 8 * GIB)
    check_weights_fit_ram(16 * GIB, None)


def test_pool_is_really_allocated_in_ram_and_checked():
    blocks = (64 << 20) // SPEC.page_size_bytes   # 64 MiB per layer: fresh mmapped pages
    report = CpuBackend(GIB, "cpu").allocate(pool(blocks), "cpu")
    assert report.real and report.pool_bytes == 2 * (64 << 20)
    assert report.committed_bytes is not None and report.committed_bytes >= 0.9 * report.pool_bytes
    assert report.layouts[0].shapes == ((2, blocks, 2, 16, 16),)
    assert report.check.passed and report.check.layers_checked == 2


def test_weights_round_like_the_cuda_allocator(tiny_config):
    model = build_dummy_model(hf_config(tiny_config), torch.bfloat16, "cpu")
    assert weights_bytes(model, 512) % 512 == 0
    assert weights_bytes(model, 512) >= weights_bytes(model, 1)


def test_weights_larger_than_the_device_are_a_finding_before_a_byte_is_loaded(tiny_config, monkeypatch):
    """Issue 12: gemma-2-9b with --gpu-memory 2GiB allocated 18 GB of weights before failing."""
    built = []
    monkeypatch.setattr(cpu, "build_dummy_model", lambda *args: built.append(args))
    with pytest.raises(DoesNotFitError, match=r"do not fit in the 0\.0 GiB of a 1 KiB GPU") as error:
        CpuBackend(1 << 10, "a 1 KiB GPU").load_model(ModelSource("tiny", tiny_config, "bfloat16"))
    assert error.value.exit_code == EXIT_FINDING and built == []


def test_free_memory_counts_the_cgroup_limit(tiny_config, monkeypatch):
    built = []
    monkeypatch.setattr(cpu, "build_dummy_model", lambda *args: built.append(args))
    monkeypatch.setattr(cpu, "available_memory_bytes", lambda: 1024)      # what the cgroup leaves
    with pytest.raises(KvplanError, match="within this process's memory limit"):
        CpuBackend(GIB, "cpu").load_model(ModelSource("tiny", tiny_config, "bfloat16"))
    assert built == []
