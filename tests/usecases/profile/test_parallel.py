"""plan and profile with a named GPU under tensor and pipeline parallelism (issue 11 part 3): each
rank loads its shard (vLLM's sharding of the weights, the layers of its pipeline stage), runs its
own profile run on fake tensors, and the pool takes the smallest KV memory over the ranks."""

from __future__ import annotations

import pytest

from kvplan.report.plan_json import plan_record
from kvplan.report.profile_json import profile_record
from kvplan.semantics.memory.budget import requested_memory
from kvplan.semantics.releases import VLLM_0_17_1
from kvplan.usecases.plan import PlanRequest, plan
from kvplan.usecases.profile import ProfileRequest, plan_for_device, run_profile

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


@pytest.fixture(scope="module")
def on_l4() -> dict[int, dict]:
    """`kvplan plan --model Llama-3.1-8B-Instruct --gpu l4-24gb -tp N` for N = 1 and 2."""
    return {tp: plan_record(plan_for_device(PlanRequest.of(model=LLAMA, gpu="l4-24gb", tensor_parallel_size=tp,
                                                        max_model_len=8192)))
            for tp in (1, 2)}


def test_plan_answers_tp2_on_a_named_gpu_with_half_the_weights_per_gpu(on_l4):
    one, two = on_l4[1], on_l4[2]
    assert one["fits"] and two["fits"]
    assert one["weights_per_gpu_bytes"] == one["weights_bytes"] == two["weights_bytes"]
    # each rank holds half of every sharded layer; norms (and nothing else here) are replicated
    assert two["weights_per_gpu_bytes"] == pytest.approx(one["weights_per_gpu_bytes"] / 2, rel=1e-3)
    # each rank has the memory its half of the model leaves, and half the KV heads per token
    assert two["kv_cache_memory_bytes"] > one["kv_cache_memory_bytes"] + one["weights_per_gpu_bytes"] // 3
    assert two["kv_bytes_per_token"] * 2 == one["kv_bytes_per_token"]
    assert two["num_blocks"] == two["kv_cache_memory_bytes"] // (two["page_size_bytes"] * 32)
    (stage,) = two["pipeline_stages"]
    assert (stage["weights_bytes"], stage["kv_cache_memory_bytes"]) == (
        two["weights_per_gpu_bytes"], two["kv_cache_memory_bytes"])


def test_profile_reports_each_stages_rank_and_the_binding_one():
    result = run_profile(ProfileRequest(
        plan=PlanRequest.of(model=LLAMA, gpu="l4-24gb", tensor_parallel_size=2, pipeline_parallel_size=2,
                         max_model_len=8192, release=VLLM_0_17_1), backend="fake", allocate=False))
    record = profile_record(result)
    first, last = record["ranks"]
    assert (first["layers"], last["layers"]) == ([0, 16], [16, 32])
    # only the last stage samples: its profile run peaks higher, so its KV memory bounds the pool
    assert last["activation_peak_bytes"] > first["activation_peak_bytes"]
    requested = requested_memory(result.snapshot.total_bytes, 0.9)
    for rank in record["ranks"]:
        assert rank["available_kv_bytes"] == requested - rank["weights_bytes"] - rank["activation_peak_bytes"]
    binding = min(record["ranks"], key=lambda rank: rank["available_kv_bytes"])
    assert record["available_kv_bytes"] == binding["available_kv_bytes"]
    stages = record["plan"]["pipeline_stages"]
    assert [s["kv_cache_memory_bytes"] for s in stages] == [r["available_kv_bytes"] for r in record["ranks"]]
    assert {s["num_blocks"] for s in stages} == {record["num_blocks"]}
    assert record["num_blocks"] == binding["available_kv_bytes"] // (32768 * 16)


def test_the_pipeline_partition_moves_weights_and_kv_layers_together(monkeypatch):
    monkeypatch.setenv("VLLM_PP_LAYER_PARTITION", "20,12")
    record = plan_record(plan(PlanRequest.of(model=LLAMA, kv_cache_memory_bytes=8 << 30, pipeline_parallel_size=2,
                                          max_model_len=8192)))
    first, last = record["pipeline_stages"]
    assert (first["layers"], last["layers"]) == ([0, 20], [20, 32])
    assert (first["num_kv_cache_layers"], last["num_kv_cache_layers"]) == (20, 12)
    monkeypatch.delenv("VLLM_PP_LAYER_PARTITION")
    even = plan_record(plan(PlanRequest.of(model=LLAMA, kv_cache_memory_bytes=8 << 30, pipeline_parallel_size=2,
                                        max_model_len=8192)))["pipeline_stages"]
    layer = (first["weights_bytes"] - even[0]["weights_bytes"]) // 4
    # four decoder layers moved from the last stage to the first, weights with them
    assert last["weights_bytes"] == even[1]["weights_bytes"] - 4 * layer
    assert record["weights_per_gpu_bytes"] == first["weights_bytes"]
