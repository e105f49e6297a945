"""vLLM 0.17.1's parallel settings: the pipeline split of `get_pp_indices` (docs/vllm/kv-semantics.md
§3.2) and the tensor-parallel head checks."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvplan.errors import ConfigRejected, KvplanError
from kvplan.semantics.config import parallel
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


@pytest.mark.parametrize(
    ("layers", "stages", "sizes"),
    [(32, 3, (11, 11, 10)), (61, 4, (15, 15, 16, 15)), (80, 3, (27, 27, 26)),
     (28, 8, (3, 3, 3, 4, 4, 4, 4, 3)), (118, 4, (29, 30, 30, 29)), (32, 4, (8, 8, 8, 8))],
)
def test_pipeline_partitions(layers, stages, sizes) -> None:
    partition, log = parallel.pp_partition(layers, stages)
    assert partition == sizes
    assert (log is None) == (layers % stages == 0)
    ranges = [parallel.get_pp_indices(layers, rank, stages) for rank in range(stages)]
    assert [end - start for start, end in ranges] == list(sizes)
    assert ranges[0][0] == 0 and ranges[-1][1] == layers


def test_pipeline_partition_log_and_override() -> None:
    assert parallel.pp_partition(32, 3)[1] == (
        "Hidden layers were unevenly partitioned: [11,11,10]. This can be manually overridden using the "
        "VLLM_PP_LAYER_PARTITION environment variable"
    )
    assert parallel.pp_partition(32, 3, "10,10,12") == ((10, 10, 12), None)
    assert parallel.get_pp_indices(32, 2, 3, "10,10,12") == (20, 32)
    with pytest.raises(ConfigRejected, match=r"len\(partitions\)=2 does not match pp_size=3\."):
        parallel.pp_partition(32, 3, "16,16")
    with pytest.raises(ConfigRejected, match=r"sum\(partitions\)=30 does not match num_hidden_layers=32\."):
        parallel.pp_partition(32, 3, "10,10,10")
    with pytest.raises(ConfigRejected, match="Invalid partition string: a,b"):
        parallel.pp_partition(32, 2, "a,b")


def test_kv_heads_per_rank() -> None:
    assert [parallel.kv_heads_per_rank(8, tp) for tp in (1, 2, 4, 8, 16)] == [8, 4, 2, 1, 1]
    assert parallel.kv_heads_per_rank(2, 4) == 1  # replicated: the page no longer shrinks
    assert parallel.kv_heads_per_rank(8, 16, replicate=False) == 0


def test_tensor_parallel_checks(catalog_shape) -> None:
    parallel.verify_tensor_parallel(catalog_shape("Qwen/Qwen3-Next-80B-A3B-Thinking"), 4)  # 2 KV heads, replicated
    parallel.verify_tensor_parallel(catalog_shape("deepseek-ai/DeepSeek-V3"), 8)  # MLA latent: no KV split
    with pytest.raises(ConfigRejected) as rejected:
        parallel.verify_tensor_parallel(catalog_shape("Qwen/Qwen2-0.5B-Instruct"), 4)
    assert str(rejected.value) == (
        "Total number of attention heads (14) must be divisible by tensor parallel size (4)."
    )
    smol = catalog_shape("HuggingFaceTB/SmolLM2-135M-Instruct")  # 9 heads, 3 KV heads
    parallel.verify_tensor_parallel(smol, 9)  # each KV head replicated on 3 ranks
    with pytest.raises(ConfigRejected, match=r"Total number of KV heads \(3\) must be divisible"):
        parallel.verify_tensor_parallel(replace(smol, num_attention_heads=12), 2)
    with pytest.raises(ConfigRejected, match=r"Tensor parallel size \(14\) must be divisible"):
        parallel.verify_tensor_parallel(catalog_shape("Qwen/Qwen2.5-7B-Instruct"), 14)  # 28 heads, 4 KV heads
    # gpt-oss splits its 8 KV heads without replicating them: 64 ranks would hold none (issue 12)
    parallel.verify_tensor_parallel(catalog_shape("openai/gpt-oss-20b"), 8)
    with pytest.raises(ConfigRejected, match=r"with tensor parallel size 64 a rank holds none .* at most 8\."):
        parallel.verify_tensor_parallel(catalog_shape("openai/gpt-oss-20b"), 64)
