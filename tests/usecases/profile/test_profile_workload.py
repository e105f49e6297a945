"""`kvplan profile --workload`: the workload simulated on the really allocated pool, K/V written
through each step's slot mapping and read back through the block tables."""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path

import jsonschema
import pytest

import kvplan.measure.pool_writer as pool_writer
from kvplan.errors import KvplanError
from kvplan.report.profile_json import workload_check_record
from kvplan.semantics.releases import VLLM_0_17_1
from kvplan.usecases.plan import PlanRequest
from kvplan.usecases.profile import ProfileRequest, run_profile
from kvplan.usecases.profile_workload import run_workload_check
from kvplan.usecases.simulate.driver import SimOptions, prepare, run
from kvplan.usecases.simulate.workload import load_workload

REPO = Path(__file__).resolve().parents[3]
MIB = 1 << 20
# 19 usable blocks of 16 tokens for 40 requests at once, with a 64-token system prompt: prefix hits
# and preemptions. vLLM 0.17.1 applies the override after its memory check, so a pool smaller than one
# max_model_len request is accepted (0.33.0 refuses it)
POOL = ("--gpu-memory", "32MiB", "--num-gpu-blocks-override", "20", "--max-num-seqs", "8",
        "--max-num-batched-tokens", "256", "--max-model-len", "1024", "--vllm-version", "0.17.1")
KNOBS = {"gpu_memory_bytes": 32 * MIB, "num_gpu_blocks_override": 20, "max_num_seqs": 8,
         "max_num_batched_tokens": 256, "max_model_len": 1024, "release": VLLM_0_17_1}
WORKLOAD = {
    "schema_version": 1, "seed": 11,
    "engine": {"num_gpu_blocks": 5000, "block_size": 32},   # replaced by the profile's pool
    "timing": {"step_time_ms": 10},
    "classes": [{"name": "chat", "prompt_tokens": {"dist": "uniform", "min": 20, "max": 120},
                 "output_tokens": {"dist": "uniform", "min": 4, "max": 40},
                 "shared_prefix": {"name": "system", "tokens": 64}}],
    "arrival": {"process": "all_at_once", "count": 40},
}


def write(directory: Path, document: dict, name: str = "workload.json") -> Path:
    path = directory / name
    path.write_text(json.dumps(document))
    return path


@pytest.fixture(scope="module")
def tiny_profile(tiny_config_only_dir):
    result = run_profile(ProfileRequest(plan=PlanRequest.of(model=str(tiny_config_only_dir), **KNOBS), backend="cpu"))
    assert result.fits and result.allocation is not None and result.allocation.pool is not None
    return result


@pytest.fixture
def workload(tmp_path):
    return load_workload(write(tmp_path, WORKLOAD))


# ---------------------------------------------------------------------------- on the profile's pool


def test_the_workload_runs_on_the_allocated_pool_with_hits_and_preemptions(tiny_profile, workload):
    check = run_workload_check(tiny_profile, workload, verify_every=1)
    assert check.passed and check.finding is None
    engine = check.prepared.config
    assert engine.num_gpu_blocks == 20 == tiny_profile.allocation.pool.config.num_blocks
    assert engine.block_size == 16 and engine.max_model_len == 1024
    assert check.tensors_written == 2 and check.tokens_verified > check.tokens_written > 0
    assert check.metrics.preemptions.total > 0 and check.metrics.prefix_cache.prefix_cache_hits > 0
    assert check.prefix_hit_tokens_verified > 0
    assert check.steps == check.metrics.num_steps and check.metrics.num_finished == 40
    assert any("engine section is replaced by the profile's pool: 20 blocks" in note for note in check.notes)


def test_writing_the_pool_does_not_change_the_simulation(tiny_profile, workload, tmp_path):
    """The same workload through `kvplan simulate` on the same knobs: the very same metrics."""
    check = run_workload_check(tiny_profile, workload)
    engine = {"num_gpu_blocks": 20, "block_size": 16, "max_num_batched_tokens": 256, "max_num_seqs": 8,
              "max_model_len": 1024}
    plain = load_workload(write(tmp_path, {**WORKLOAD, "engine": engine}, "plain.json"))
    outcome = run(prepare(plain, SimOptions(release=VLLM_0_17_1)))
    assert outcome.metrics == check.metrics


def test_verifying_less_often_verifies_fewer_tokens_but_every_request(tiny_profile, workload):
    every_step = run_workload_check(tiny_profile, workload, verify_every=1)
    sparse = run_workload_check(tiny_profile, workload, verify_every=1000)
    assert sparse.passed and sparse.tokens_written == every_step.tokens_written
    # at the end of each request at least
    assert 40 <= sparse.request_verifications < every_step.request_verifications
    assert 0 < sparse.tokens_verified < every_step.tokens_verified


def test_the_record_is_json_with_the_simulation_summary(tiny_profile, workload):
    record = workload_check_record(run_workload_check(tiny_profile, workload))
    assert json.loads(json.dumps(record)) == record
    assert record["passed"] and record["mismatched_tokens"] == 0 and record["first_mismatch"] is None
    assert record["simulation"]["num_finished"] == 40 and record["simulation"]["preemptions"]["total"] > 0
    assert record["layers_verified"] == ["model.layers.0.self_attn.attn", "model.layers.1.self_attn.attn"]


TINY_GEMMA2 = {
    "architectures": ["Gemma2ForCausalLM"], "model_type": "gemma2", "hidden_size": 64, "intermediate_size": 128,
    "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16, "vocab_size": 1024,
    "max_position_embeddings": 4096, "sliding_window": 64, "torch_dtype": "bfloat16", "tie_word_embeddings": True,
    "query_pre_attn_scalar": 16,
}


def test_a_hybrid_model_is_written_and_read_group_by_group(tmp_path, workload):
    """A tiny gemma-2 (a 64-token window on even layers): each group's layers are written through
    that group's block table, the window group's only inside its window."""
    write(tmp_path, TINY_GEMMA2, "config.json")
    request = PlanRequest.of(model=str(tmp_path), **{**KNOBS, "num_gpu_blocks_override": 40})
    profile = run_profile(ProfileRequest(plan=request, backend="cpu"))
    groups = profile.allocation.pool.config.kv_cache_groups
    assert [(type(g.kv_cache_spec).__name__, len(g.layer_names)) for g in groups] == [
        ("SlidingWindowSpec", 2), ("FullAttentionSpec", 2)]
    check = run_workload_check(profile, workload, verify_every=1)
    assert check.passed and check.metrics.num_finished == 40
    assert [(g.spec.kind, g.sliding_window) for g in check.prepared.config.groups] == [("sliding_window", 64),
                                                                                  ("full_attention", None)]
    assert len(check.layers_verified) == 4 and check.tensors_written == 2
    assert [g.spec.kind for g in check.metrics.kv.groups] == ["sliding_window", "full_attention"]


def test_a_profile_without_a_real_pool_is_refused(tiny_profile, workload):
    with pytest.raises(KvplanError, match="use --backend cpu"):
        run_workload_check(replace(tiny_profile, backend="fake", allocation=None), workload)


# ---------------------------------------------------------------------------- the command line


def test_cli_end_to_end(kvplan, tiny_model_dir, tmp_path):
    path = write(tmp_path, WORKLOAD)
    code, out, _err = kvplan("profile", "--model", str(tiny_model_dir), "--backend", "cpu", *POOL,
                             "--workload", str(path), "--json")
    assert code == 0
    record = json.loads(out)
    check = record["workload_check"]
    assert check["passed"] and check["tokens_verified"] > 0 and check["mismatched_tokens"] == 0
    assert check["simulation"]["preemptions"]["total"] > 0 and check["prefix_hit_tokens_verified"] > 0
    schema = json.loads((REPO / "docs" / "schemas" / "profile.json").read_text())
    jsonschema.Draft202012Validator(schema).validate(record)

    code, out, _err = kvplan("profile", "--model", str(tiny_model_dir), "--backend", "cpu", *POOL,
                             "--workload", str(path))
    assert code == 0
    out = " ".join(out.split())
    for text in ("Workload check PASSED on the allocated pool", "prefix-cache hits: 0 mismatches",
                 "Workload on this pool", "preemptions", "engine section is replaced"):
        assert text in out, text


def test_cli_a_mismatch_is_a_finding(kvplan, tiny_model_dir, tmp_path, monkeypatch):
    original = pool_writer.write_kv
    calls = []

    def corrupt_once(view, index, values):
        calls.append(1)
        original(view, index, values + 1 if len(calls) == 5 else values)

    monkeypatch.setattr(pool_writer, "write_kv", corrupt_once)
    code, out, _err = kvplan("profile", "--model", str(tiny_model_dir), "--backend", "cpu", *POOL,
                             "--workload", str(write(tmp_path, WORKLOAD)))
    assert code == 1
    out = " ".join(out.split())      # the report wraps at 80 columns
    assert "Workload check FAILED" in out and "Finding:" in out and "differ from what was written" in out


def test_cli_refuses_what_has_no_real_pool_before_profiling(kvplan, tiny_model_dir, tmp_path):
    path = write(tmp_path, WORKLOAD)
    cases = {
        ("--backend", "fake"): "use --backend cpu with a --gpu-memory small enough for RAM (e.g. 4GiB)",
        ("--backend", "cpu", "--no-allocate"): "drop --no-allocate",
    }
    for args, message in cases.items():
        code, out, err = kvplan("profile", "--model", str(tiny_model_dir), *args, *POOL, "--workload", str(path))
        assert code == 2 and out == "" and message in err, err
        assert len(err.strip().splitlines()) == 1
    broken = write(tmp_path, {**WORKLOAD, "arrival": {"process": "poisson", "rate": -1, "count": 3}}, "bad.json")
    code, out, err = kvplan("profile", "--model", str(tiny_model_dir), "--backend", "cpu", *POOL,
                            "--workload", str(broken))
    assert code == 2 and "rate" in err and len(err.strip().splitlines()) == 1


def test_cli_a_request_that_cannot_fit_alone_stalls(kvplan, tiny_model_dir, tmp_path):
    # 600 prompt tokens need 38 blocks; the pool has 19
    stalled = {**WORKLOAD, "classes": [{"name": "long", "prompt_tokens": {"dist": "constant", "value": 600},
                                        "output_tokens": {"dist": "constant", "value": 4}}],
               "arrival": {"process": "all_at_once", "count": 1}}
    code, out, err = kvplan("profile", "--model", str(tiny_model_dir), "--backend", "cpu", *POOL,
                            "--workload", str(write(tmp_path, stalled)), "--json")
    assert code == 3 and "stalled" in err
    assert json.loads(out)["workload_check"]["simulation"]["stalled"] is True
