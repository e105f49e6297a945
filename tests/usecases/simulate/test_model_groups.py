"""simulate and check on the model's own KV cache groups (issue 11 part 2): a pool planned from
engine.model runs on the groups and the pool `plan` computes, and says so (engine.kv_cache_groups,
engine.gpu_kv_cache_tokens); a pool given by hand keeps the model's groups."""

from __future__ import annotations

import pytest

from kvplan.report.plan_json import plan_record
from kvplan.report.simulate_json import result_document
from kvplan.semantics.engine.args import EngineArgs
from kvplan.semantics.releases import VLLM_0_17_1, VLLM_0_33_0, Release
from kvplan.sources.installed import default_release
from kvplan.usecases.check.workload_checks import on_target_pool
from kvplan.usecases.plan import PlanRequest, plan
from kvplan.usecases.simulate.driver import SimOptions, prepare
from kvplan.usecases.simulate.engine_source import EngineOverrides
from kvplan.usecases.simulate.simulation import simulate
from kvplan.usecases.simulate.workload import load_workload
from tests.usecases.simulate.factories import mix

SPEC_KINDS = {"FullAttentionSpec": "full_attention", "MLAAttentionSpec": "full_attention",
              "SlidingWindowSpec": "sliding_window", "MambaSpec": "mamba"}
HYBRIDS = ["google/gemma-2-9b-it", "openai/gpt-oss-20b", "Qwen/Qwen3-Next-80B-A3B-Thinking",
           "nvidia/Nemotron-H-56B-Base-8K"]
# the plan of the issue: vLLM 0.17.1's "GPU KV cache size" for gemma-2-9b-it with 4 GiB of KV cache
SIZING = {"kv_cache_memory": "4GiB", "max_model_len": 8192}


def planned(model: str, release: Release | None = None) -> dict:
    return plan_record(plan(PlanRequest.of(model=model, kv_cache_memory_bytes=4 << 30, max_model_len=8192,
                                        with_weights=False, release=release or default_release())))


def on_model(write_json, model: str, overrides: EngineOverrides = EngineOverrides(), release: Release | None = None,
             **engine):
    workload = load_workload(write_json(mix(engine={"model": model, **SIZING, **engine},
                                            arrival={"process": "poisson", "rate": 20.0, "count": 24})))
    return prepare(workload, SimOptions(overrides=overrides, release=release))


@pytest.mark.parametrize("model", HYBRIDS)
def test_a_planned_pool_runs_on_the_groups_and_the_tokens_of_the_plan(write_json, model):
    record = planned(model)
    result = simulate(on_model(write_json, model))
    engine = result_document(result)["engine"]
    assert engine["source"] == "plan" and engine["num_gpu_blocks"] == record["num_blocks"]
    assert engine["gpu_kv_cache_tokens"] == record["gpu_kv_cache_tokens"]
    assert [(g["type"], g["num_layers"]) for g in engine["kv_cache_groups"]] == \
        [(SPEC_KINDS[g["spec"]["type"]], g["num_layers"]) for g in record["kv_cache_groups"]]
    # the engine's block size is the plan's, a Mamba hybrid's 544 or 2080 included
    assert engine["block_size"] == record["block_size"]
    attention = [g for g in engine["kv_cache_groups"] if g["type"] != "mamba"]
    assert {g["block_size"] for g in attention} == {record["block_size"]}
    metrics = result.metrics
    assert metrics.num_finished == metrics.num_requests == 24
    assert [g.spec.kind for g in metrics.kv.groups] == [g["type"] for g in engine["kv_cache_groups"]]
    assert all(0 < g.peak_used_blocks <= metrics.kv.usable_blocks for g in metrics.kv.groups)


def test_gemma2_runs_the_pool_vllm_reports_not_a_full_attention_one(write_json):
    """The issue: vLLM 0.17.1 reports 12,480 tokens for this plan; one full-attention group of the
    same blocks would hold 24,944."""
    setup = on_model(write_json, "google/gemma-2-9b-it", release=VLLM_0_17_1)
    assert setup.engine.gpu_kv_cache_tokens == 12_480 == \
        planned("google/gemma-2-9b-it", VLLM_0_17_1)["gpu_kv_cache_tokens"]
    window, full = setup.config.groups
    assert (window.spec.kind, window.sliding_window, full.spec.kind) == ("sliding_window", 4096, "full_attention")


def test_a_pool_given_by_hand_keeps_the_models_groups(write_json):
    setup = on_model(write_json, "Qwen/Qwen3-Next-80B-A3B-Thinking", EngineOverrides(num_gpu_blocks=100),
                     release=VLLM_0_33_0)
    assert setup.engine.source == "--num-gpu-blocks" and setup.config.num_gpu_blocks == 100
    assert [g.spec.kind for g in setup.config.groups] == ["mamba"] * 3 + ["full_attention"]
    # four groups of 0.33.0's 544-token attention blocks (0.34.0 aligns them to 576): 100 // 4 x 544
    assert setup.engine.gpu_kv_cache_tokens == 25 * 544
    assert simulate(setup).metrics.num_finished == 24


def test_a_single_full_attention_group_runs_the_single_group_engine(write_json):
    setup = on_model(write_json, "meta-llama/Llama-3.1-8B-Instruct")
    assert setup.config.kv_cache_groups is None
    assert [(g.spec.kind, g.num_layers) for g in setup.engine.kv_cache_groups] == [("full_attention", 32)]
    assert setup.engine.gpu_kv_cache_tokens == planned("meta-llama/Llama-3.1-8B-Instruct")["gpu_kv_cache_tokens"]


@pytest.mark.parametrize("model", ["google/gemma-2-9b-it", "nvidia/Nemotron-H-56B-Base-8K"])
def test_a_hybrid_runs_on_its_groups_under_0_33_0_too(write_json, model):
    workload = load_workload(write_json(mix(engine={"model": model, **SIZING})))
    setup = prepare(workload, SimOptions(release=VLLM_0_33_0))
    assert setup.config.release is VLLM_0_33_0 and setup.config.kv_cache_groups is not None
    assert simulate(setup).metrics.num_finished == 40


def test_a_check_target_hands_its_groups_to_the_workload(write_json):
    from kvplan.usecases.check.target import Target

    request = PlanRequest.of(model="openai/gpt-oss-20b", kv_cache_memory_bytes=4 << 30, max_model_len=8192,
                          with_weights=False)
    summary = plan(request).summary
    target = Target(kind="plan", label="gpt-oss", plan=summary, profile=None, request=request)
    workload = on_target_pool(load_workload(write_json(mix())), summary, target)
    setup = prepare(workload, SimOptions())
    assert setup.config.num_gpu_blocks == summary.num_blocks
    assert [(g.spec.kind, g.sliding_window) for g in setup.config.groups] == [("sliding_window", 128),
                                                                         ("full_attention", None)]


def test_the_zero_preemption_pool_is_found_on_the_groups_engine(write_json):
    """Every group holds its own blocks for a request: the pool that never runs out counts them all,
    and the smallest pool without preemption is checked by simulating on it."""
    from kvplan.usecases.simulate.driver import blocks_at_length, run, with_pool

    setup = on_model(write_json, "google/gemma-2-9b-it", EngineOverrides(EngineArgs(block_size=16), num_gpu_blocks=60))
    assert blocks_at_length(setup.config, 100) == 2 * 7   # a window group and a full one, 16-token blocks
    result = simulate(setup)
    assert result.metrics.preemptions.total > 0
    zero = result.capacity.zero_preemption
    assert zero.num_gpu_blocks is not None and not zero.configured_is_enough
    assert zero.kv_tokens == (zero.num_gpu_blocks - 1) // 2 * 16
    enough = run(setup, config=with_pool(setup.config, zero.num_gpu_blocks))
    assert enough.metrics.preemptions.total == 0


@pytest.mark.parametrize(("model", "alignments"), [("nvidia/Nemotron-H-56B-Base-8K", {1}),
                                                   ("Qwen/Qwen3-Next-80B-A3B-Thinking", {544})])
def test_planned_mamba2_and_gdn_groups_take_0_33_0s_prefill_checkpoint_blocks(write_json, model, alignments):
    workload = load_workload(write_json(mix(engine={"model": model, **SIZING, "enable_prefix_caching": True})))
    setup = prepare(workload, SimOptions(release=VLLM_0_33_0))
    mamba = [g for g in setup.config.groups if g.spec.kind == "mamba"]
    assert mamba and {g.num_prefill_checkpoint_blocks for g in mamba} == {1}
    assert {g.prefill_checkpoint_alignment for g in mamba} == alignments
    assert simulate(setup).metrics.num_finished == 40
    # vLLM 0.17.1's MambaSpec has no such field.
    older = prepare(workload, SimOptions(release=VLLM_0_17_1))
    assert all(g.num_prefill_checkpoint_blocks == 0 for g in older.config.groups)
