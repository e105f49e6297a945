"""Saved profiles read back into typed summaries, refused when they are not profiles, and checked
for staleness."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.errors import KvplanError
from kvplan.semantics.releases import VLLM_0_17_1
from kvplan.usecases.profile_summary import (
    PROFILE_KIND,
    PROFILE_SCHEMA_VERSION,
    knobs_sha256,
    load_profile,
    parse_plan,
    parse_profile,
    profile_mismatches,
)

EXAMPLE = Path(__file__).resolve().parents[3] / "examples" / "checks" / "profiles" / "qwen2-0.5b-l4.json"
KNOBS = {"model": "Qwen/Qwen2-0.5B-Instruct", "gpu_memory_utilization": 0.9, "max_num_seqs": None}


def record(**provenance):
    base = {"vllm_semantics": "0.17.1", "config_sha256": "a" * 64, "knobs": KNOBS, "knobs_sha256": knobs_sha256(KNOBS)}
    base.update(provenance)
    return {"schema_version": PROFILE_SCHEMA_VERSION, "kind": PROFILE_KIND, "plan": None, "provenance": base}


def test_a_saved_profile_reads_back_as_its_figures():
    document = json.loads(EXAMPLE.read_text())
    profile = load_profile(EXAMPLE, EXAMPLE.name)
    assert (profile.fits, profile.total_bytes, profile.weights_bytes, profile.available_kv_bytes) == (
        document["fits"], document["total_bytes"], document["weights_bytes"], document["available_kv_bytes"])
    assert profile.profile_run_tokens == document["profile_run"]["num_tokens"]
    plan = profile.plan
    assert plan is not None
    assert (plan.num_blocks, plan.block_size, plan.gpu, plan.max_concurrency) == (
        document["plan"]["num_blocks"], document["plan"]["block_size"], document["plan"]["gpu"]["key"],
        document["plan"]["max_concurrency"])
    assert plan.group_block_sizes == tuple(g["spec"]["block_size"] for g in document["plan"]["kv_cache_groups"])
    assert profile.provenance.knobs == document["provenance"]["knobs"]


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ('{"kind": "kvplan.plan"}', "p.json: kind: expected 'kvplan.profile'"),
        ("not json", "p.json: not valid JSON"),
        (json.dumps({"kind": PROFILE_KIND, "schema_version": 99}), "unsupported profile version 99"),
        (json.dumps({**record(), "plan": {"num_blocks": "lots"}}), "p.json: plan.block_size: required key is missing"),
    ],
)
def test_files_that_are_not_readable_profiles(tmp_path, content, words):
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.raises(KvplanError, match=words):
        load_profile(path, "p.json")


def test_missing_file_says_how_to_make_one(tmp_path):
    with pytest.raises(KvplanError, match="kvplan profile --save"):
        load_profile(tmp_path / "none.json", "none.json")


def test_mismatches_name_what_changed():
    saved = parse_profile(record(), "saved")
    assert profile_mismatches(saved, VLLM_0_17_1, config_sha256="a" * 64, knobs=KNOBS) == []
    changed = dict(KNOBS, max_num_seqs=64)
    (reason,) = profile_mismatches(saved, VLLM_0_17_1, knobs=changed)
    assert reason == "its knobs differ: max_num_seqs"
    assert "different model config" in profile_mismatches(saved, VLLM_0_17_1, config_sha256="b" * 64)[0]
    old = parse_profile(record(vllm_semantics="0.9.2"), "old")
    assert "vLLM 0.9.2 semantics" in profile_mismatches(old, VLLM_0_17_1)[0]


@pytest.mark.parametrize(("version", "checkpoint_blocks"), [("0.33.0", {1}), ("0.17.1", {0}), (None, {0})])
def test_a_records_mamba_groups_take_the_checkpoint_blocks_of_its_release(tmp_path, version, checkpoint_blocks):
    """A plan record of a Mamba-2 hybrid runs in check and simulate with its own release's engine
    groups: 0.33.0's MambaSpec takes one prefill checkpoint block, 0.17.1's none (as does a record
    from before `vllm_semantics` existed)."""
    from kvplan.report.plan_json import plan_record
    from kvplan.semantics.releases import RELEASES
    from kvplan.usecases.plan import PlanRequest, plan

    request = PlanRequest.of(model="nvidia/Nemotron-H-56B-Base-8K", kv_cache_memory_bytes=20 << 30,
                          enable_prefix_caching=True, release=RELEASES[version or "0.17.1"])
    document = plan_record(plan(request))
    if version is None:
        document.pop("vllm_semantics")
    summary = parse_plan(document, "plan")
    mamba = [group for group in summary.kv_cache_groups if group.spec.kind == "mamba"]
    assert mamba and {group.num_prefill_checkpoint_blocks for group in mamba} == checkpoint_blocks
