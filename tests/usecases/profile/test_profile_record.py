"""Saved profiles: read back, refused when they are not profiles, and checked for staleness."""

from __future__ import annotations

import json

import pytest

from kvplan.errors import KvplanError
from kvplan.usecases.profile_record import (
    PROFILE_KIND,
    PROFILE_SCHEMA_VERSION,
    knobs_sha256,
    load_profile,
    profile_mismatches,
    save_profile,
)

KNOBS = {"model": "Qwen/Qwen2-0.5B-Instruct", "gpu_memory_utilization": 0.9, "max_num_seqs": None}


def record(**provenance):
    base = {"vllm_semantics": "0.17.1", "config_sha256": "a" * 64, "knobs": KNOBS, "knobs_sha256": knobs_sha256(KNOBS)}
    base.update(provenance)
    return {"schema_version": PROFILE_SCHEMA_VERSION, "kind": PROFILE_KIND, "plan": {}, "provenance": base}


def test_round_trip(tmp_path):
    path = tmp_path / "p.json"
    save_profile(record(), path)
    assert load_profile(path) == record()
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]   # no temporary file left behind


@pytest.mark.parametrize(
    ("content", "words"),
    [
        ('{"kind": "kvplan.plan"}', "is not a kvplan profile"),
        ("not json", "cannot read it as JSON"),
        (json.dumps({"kind": PROFILE_KIND, "schema_version": 99}), "schema_version 99"),
    ],
)
def test_files_that_are_not_readable_profiles(tmp_path, content, words):
    path = tmp_path / "p.json"
    path.write_text(content)
    with pytest.raises(KvplanError, match=words):
        load_profile(path)


def test_missing_file_says_how_to_make_one(tmp_path):
    with pytest.raises(KvplanError, match="kvplan profile --save"):
        load_profile(tmp_path / "none.json")


def test_save_refuses_directories_and_foreign_files(tmp_path):
    with pytest.raises(KvplanError, match="is a directory"):
        save_profile(record(), tmp_path)
    foreign = tmp_path / "data.json"
    foreign.write_text("[1, 2, 3]")
    with pytest.raises(KvplanError, match="refusing to overwrite"):
        save_profile(record(), foreign)
    assert foreign.read_text() == "[1, 2, 3]"


def test_mismatches_name_what_changed():
    saved = record()
    assert profile_mismatches(saved, config_sha256="a" * 64, knobs=KNOBS) == []
    changed = dict(KNOBS, max_num_seqs=64)
    (reason,) = profile_mismatches(saved, knobs=changed)
    assert reason == "its knobs differ: max_num_seqs"
    assert "different model config" in profile_mismatches(saved, config_sha256="b" * 64)[0]
    assert "vLLM 0.9.2 semantics" in profile_mismatches(record(vllm_semantics="0.9.2"))[0]
