import json

import pytest

from kvplan.errors import KvplanError
from kvplan.semantics.engine.args import EngineArgs
from kvplan.semantics.releases import VLLM_0_33_0
from kvplan.usecases.simulate.engine_source import EngineOverrides, resolve_engine
from kvplan.usecases.simulate.workload import load_workload
from tests.usecases.simulate.factories import mix

PLAN = {
    "model": "Qwen/Qwen2-0.5B-Instruct", "num_blocks": 5000, "block_size": 16, "max_model_len": 8192,
    "max_num_batched_tokens": 4096, "max_num_seqs": 96, "enable_prefix_caching": True,
    "kv_bytes_per_token": 12288, "weights_bytes": 988065536,
    "gpu": {"key": "l4-24gb", "name": "NVIDIA L4", "total_bytes": 23570219008, "bandwidth_gbps": 300.0,
            "bf16_tflops": 121.0},
}


def profile(**changes):
    document = {"schema_version": 1, "kind": "kvplan.profile",
                "provenance": {"kvplan_version": "0.1.0", "vllm_semantics": "0.17.1"}, "plan": dict(PLAN)}
    document.update(changes)
    return document


def resolve(write_json, engine, overrides=EngineOverrides(), **rest):
    # the profile above was saved under 0.17.1, and only a run of that release may use it
    pinned = {"vllm_version": "0.17.1"} if "profile" in engine and "vllm_version" not in engine else {}
    workload = load_workload(write_json(mix(engine={**engine, **pinned}, **rest)))
    return resolve_engine(workload.engine, overrides, workload.name)


def test_a_saved_profile_gives_the_pool_its_knobs_and_the_model_facts(write_json):
    write_json(profile(calibration={"step_time": [{"num_tokens": 1, "ms": 7.5}]}), "profile.json")
    engine = resolve(write_json, {"profile": "profile.json"})
    config = engine.config
    assert engine.source == "profile"
    assert (config.num_gpu_blocks, config.block_size, config.max_model_len) == (5000, 16, 8192)
    assert (config.max_num_batched_tokens, config.max_num_seqs, config.enable_prefix_caching) == (4096, 96, True)
    facts = engine.facts
    assert (facts.model, facts.gpu, facts.weights_bytes, facts.kv_bytes_per_token) == (
        "Qwen/Qwen2-0.5B-Instruct", "l4-24gb", 988065536, 12288)
    assert facts.calibration == ((1, 7.5),)


def test_the_command_line_overrides_the_file_and_the_profile(write_json):
    write_json(profile(), "profile.json")
    engine = resolve(write_json, {"profile": "profile.json", "max_num_seqs": 32},
                     EngineOverrides(EngineArgs(max_num_seqs=16, enable_chunked_prefill=False,
                                                 max_num_batched_tokens=8192)))
    assert engine.config.max_num_seqs == 16 and not engine.config.enable_chunked_prefill
    assert any("max_num_seqs is 32 here but 96 in the profile" in note for note in engine.notes)
    overridden = resolve(write_json, {"profile": "profile.json"},
                         EngineOverrides(EngineArgs(block_size=32), num_gpu_blocks=99))
    assert (overridden.config.num_gpu_blocks, overridden.config.block_size, overridden.source) == (
        99, 32, "--num-gpu-blocks")


def test_a_profile_for_another_block_size_is_refused(write_json):
    write_json(profile(), "profile.json")
    with pytest.raises(KvplanError, match="block_size 32 from the command line differs from the profile's"):
        resolve(write_json, {"profile": "profile.json"}, EngineOverrides(EngineArgs(block_size=32)))


@pytest.mark.parametrize(
    ("document", "message"),
    [
        (profile(kind="kvplan.plan"), "engine.profile (profile.json): kind: expected 'kvplan.profile'"),
        (profile(schema_version=7), "engine.profile (profile.json): schema_version: unsupported profile version 7"),
        (profile(plan={**PLAN, "num_blocks": "lots"}), "engine.profile (profile.json): plan.num_blocks: expected an"),
        (profile(plan={k: v for k, v in PLAN.items() if k != "block_size"}),
         "engine.profile (profile.json): plan.block_size: required key is missing"),
    ],
)
def test_bad_profiles_are_one_line(write_json, document, message):
    write_json(document, "profile.json")
    with pytest.raises(KvplanError) as error:
        resolve(write_json, {"profile": "profile.json"})
    assert str(error.value).startswith(f"workload.json: {message}")


@pytest.mark.parametrize(("engine", "release"), [
    ({"vllm_version": "0.33.0"}, None), ({}, VLLM_0_33_0), ({"vllm_version": "0.17.1"}, VLLM_0_33_0),
])
def test_a_profile_of_another_release_is_refused_as_check_refuses_it(write_json, engine, release):
    """Issue 25 item 9: one release rule (`release_mismatch`) for check and every workload run."""
    write_json(profile(), "profile.json")
    workload = load_workload(write_json(mix(engine={"profile": "profile.json", **engine})))
    with pytest.raises(KvplanError, match=r"does not match this run: it follows vLLM 0\.17\.1 semantics, this run "
                                          r"follows 0\.33\.0: give --vllm-version 0\.17\.1"):
        resolve_engine(workload.engine, EngineOverrides(), workload.name, release)


def test_a_missing_profile_names_the_field(write_json):
    with pytest.raises(KvplanError, match=r"workload\.json: engine\.profile \(nowhere\.json\): no such file"):
        resolve(write_json, {"profile": "nowhere.json"})


def test_block_count_comes_from_the_file_or_the_command_line(write_json):
    assert resolve(write_json, {"num_gpu_blocks": 64}).config.num_gpu_blocks == 64
    with pytest.raises(KvplanError, match="no pool size"):
        resolve(write_json, {})
    assert resolve(write_json, {}, EngineOverrides(num_gpu_blocks=40)).config.num_gpu_blocks == 40


def test_engine_rules_of_vllm_are_enforced(write_json):
    with pytest.raises(KvplanError, match=r"max_num_batched_tokens \(8\) must be greater than or equal to"):
        resolve(write_json, {"num_gpu_blocks": 64, "max_num_batched_tokens": 8, "max_num_seqs": 16})
    with pytest.raises(KvplanError, match="block_size: 24 is not a block size vLLM accepts: expected one of 1, 8, 16"):
        resolve(write_json, {"num_gpu_blocks": 64, "block_size": 24})


@pytest.mark.parametrize(("overrides", "flag"), [
    (EngineOverrides(EngineArgs(gpu_memory_utilization=0.8)), "--gpu-memory-utilization"),
    (EngineOverrides(EngineArgs(kv_cache_memory_bytes=1 << 30)), "--kv-cache-memory-bytes"),
    (EngineOverrides(EngineArgs(mamba_ssm_cache_dtype="float32")), "--mamba-ssm-cache-dtype"),
    (EngineOverrides(gpu_memory=24 << 30), "--gpu-memory"),
])
def test_what_sizes_a_planned_pool_needs_one(write_json, overrides, flag):
    # every setting that sizes a pool planned from engine.model (SIZES), none silently dropped on a fixed pool
    with pytest.raises(KvplanError, match=f"^{flag} applies only when the workload plans the pool"):
        resolve(write_json, {"num_gpu_blocks": 64}, overrides)


def test_a_model_is_planned_on_the_spot_exactly_as_vllm_sizes_it(write_json, data_dir):
    cases = json.loads((data_dir / "sizing" / "vllm-0.17.1-cases.json").read_text())["cases"]
    case = next(c for c in cases if c["model"] == "Qwen/Qwen2-0.5B-Instruct" and c["expect"].get("ok")
                and c["args"].get("kv_cache_memory_bytes") and c["args"].get("tensor_parallel_size", 1) == 1)
    args = case["args"]
    engine = resolve(write_json, {
        "model": case["model"], "kv_cache_memory": args["kv_cache_memory_bytes"],
        "block_size": args["block_size"], "max_model_len": args["max_model_len"],
        "max_num_batched_tokens": args["max_num_batched_tokens"], "max_num_seqs": args["max_num_seqs"],
    })
    assert engine.source == "plan"
    assert engine.config.num_gpu_blocks == case["expect"]["num_blocks"]
    assert engine.facts.kv_bytes_per_token == 12288 and engine.facts.model == case["model"]


def test_a_model_on_a_gpu_is_planned_with_the_predicted_kv_memory(write_json):
    """docs/workload.md: `model` + `gpu` + `gpu_memory_utilization` plans the pool, no profile needed."""
    from kvplan.usecases.plan import PlanRequest
    from kvplan.usecases.profile import plan_for_device

    engine = resolve(write_json, {"model": "Qwen/Qwen2-0.5B-Instruct", "gpu": "l4-24gb", "gpu_memory_utilization": 0.8})
    expected = plan_for_device(PlanRequest.of(model="Qwen/Qwen2-0.5B-Instruct", gpu="l4-24gb",
                                              gpu_memory_utilization=0.8))
    assert engine.source == "plan"
    assert engine.config.num_gpu_blocks == expected.num_blocks > 0
    assert expected.memory_source.startswith("predicted")


def test_a_model_without_gpu_or_kv_memory_names_what_to_give(write_json):
    with pytest.raises(KvplanError, match=r"engine\.gpu .*engine\.kv_cache_memory"):
        resolve(write_json, {"model": "Qwen/Qwen2-0.5B-Instruct"})


def test_utilization_and_kv_cache_memory_exclude_each_other(write_json):
    engine = {"model": "Qwen/Qwen2-0.5B-Instruct", "kv_cache_memory": "1GiB"}
    with pytest.raises(KvplanError, match="would have no effect"):
        resolve(write_json, engine, EngineOverrides(EngineArgs(gpu_memory_utilization=0.5)))
