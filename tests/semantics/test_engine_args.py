"""One declaration per engine argument (issue 19): `EngineArgs` names each as vLLM does, checks it,
stacks layers of settings with `over`, and reads its defaults from the release table."""

from __future__ import annotations

from dataclasses import fields

import pytest

from kvplan.errors import KvplanError
from kvplan.semantics.engine.args import EngineArgs, setting, settings
from kvplan.semantics.releases import RELEASES


def test_every_argument_is_spelled_as_vllm_names_it():
    for name, declared in settings():
        assert declared.flags[0].split("/")[0] == "--" + name.replace("_", "-"), name
        assert declared.help


def test_a_layer_over_another_keeps_what_it_sets_and_nothing_else():
    file = EngineArgs(max_num_seqs=8, block_size=32, enable_chunked_prefill=False)
    pool = EngineArgs(block_size=16)
    command_line = EngineArgs(max_num_seqs=4)
    assert command_line.over(pool.over(file)) == EngineArgs(max_num_seqs=4, block_size=16,
                                                            enable_chunked_prefill=False)
    assert EngineArgs().over(file) == file and file.over(EngineArgs()) == file
    assert EngineArgs(enable_prefix_caching=False).over(EngineArgs(enable_prefix_caching=True)).enable_prefix_caching \
        is False


@pytest.mark.parametrize("version", list(RELEASES))
def test_the_defaults_are_the_release_tables(version):
    release = RELEASES[version]
    defaults = EngineArgs.defaults(release)
    assert defaults.gpu_memory_utilization == release.gpu_memory_utilization
    assert defaults.block_size == release.default_block_size
    assert defaults.enable_chunked_prefill is True and defaults.tensor_parallel_size == 1
    assert defaults.max_num_seqs is None and defaults.max_model_len is None    # derived from the GPU and model
    assert f"{release.gpu_memory_utilization}" in setting("gpu_memory_utilization").help


@pytest.mark.parametrize("version", sorted(RELEASES))
def test_a_value_is_the_one_given_else_the_releases_default(version):
    release = RELEASES[version]
    given = EngineArgs(block_size=32, tensor_parallel_size=2, enable_chunked_prefill=False)
    assert given.value("block_size", release) == 32 and given.value("tensor_parallel_size", release) == 2
    assert given.value("enable_chunked_prefill", release) is False
    assert EngineArgs().value("block_size", release) == release.default_block_size
    assert EngineArgs().value("gpu_memory_utilization", release) == release.gpu_memory_utilization
    assert EngineArgs().value("max_num_seqs", release) is None     # vLLM derives it from the GPU


def test_values_are_read_and_checked_as_every_reader_reads_them():
    args = EngineArgs.read({"max_num_batched_tokens": "8K", "kv_cache_memory_bytes": "1GiB", "max_model_len": "auto",
                            "max_num_seqs": 4})
    assert (args.max_num_batched_tokens, args.kv_cache_memory_bytes, args.max_model_len, args.max_num_seqs) == \
        (8192, 1 << 30, -1, 4)
    with pytest.raises(KvplanError, match=r"^--gpu-memory-utilization: 1.5 is out of range"):
        EngineArgs.read({"gpu_memory_utilization": 1.5})
    with pytest.raises(KvplanError, match=r"^engine.max_num_seqs: 0 is out of range"):
        EngineArgs.read({"max_num_seqs": 0}, {"max_num_seqs": "engine.max_num_seqs"})
    with pytest.raises(ValueError, match="no engine argument"):
        EngineArgs.read({"max_num_sequences": 4})


def test_a_whole_number_a_file_writes_as_a_float_is_held_as_the_integer():
    # JSON and TOML may write 16.0 for 16: every reader holds 16, so ids hashed from it do not depend on the spelling
    args = EngineArgs.read({"block_size": 16.0, "max_model_len": 4096.0, "max_num_seqs": 8.0,
                            "gpu_memory_utilization": 1})
    assert (args.block_size, args.max_model_len, args.max_num_seqs) == (16, 4096, 8)
    assert all(type(value) is int for value in (args.block_size, args.max_model_len, args.max_num_seqs))
    assert type(args.gpu_memory_utilization) is float
    with pytest.raises(KvplanError, match=r"^--block-size: expected"):
        EngineArgs.read({"block_size": 16.5})


def test_the_old_spellings_are_declared_with_their_argument():
    assert setting("tensor_parallel_size").flags == ("--tensor-parallel-size", "-tp")
    assert setting("tensor_parallel_size").hidden_flags == ("--tp",)
    assert setting("kv_cache_memory_bytes").prefix_flags == ("--kv-cache-memory",)
    assert {f.name for f in fields(EngineArgs)} == {name for name, _ in settings()}
