"""The profile record's writer: what it writes reads back as the profile's summary, and --save
refuses what is not a profile and leaves nothing behind."""

from __future__ import annotations

import json

import pytest

from kvplan.errors import KvplanError
from kvplan.report.profile_json import profile_record, save_profile
from kvplan.usecases.plan import PlanRequest
from kvplan.usecases.profile import ProfileRequest, run_profile
from kvplan.usecases.profile_summary import PROFILE_KIND, PROFILE_SCHEMA_VERSION, TOP_LEVEL_FIGURES, parse_profile

RECORD = {"schema_version": PROFILE_SCHEMA_VERSION, "kind": PROFILE_KIND, "plan": None, "provenance": {}}
MIB = 1 << 20


@pytest.mark.parametrize("gpu_memory_bytes", [64 * MIB, 2 * MIB])   # fits; weights above the budget
def test_the_record_reads_back_as_the_profiles_summary(tiny_config_only_dir, gpu_memory_bytes):
    plan = PlanRequest.of(model=str(tiny_config_only_dir), gpu_memory_bytes=gpu_memory_bytes)
    result = run_profile(ProfileRequest(plan=plan, backend="fake"))
    record = json.loads(json.dumps(profile_record(result)))
    assert parse_profile(record, "saved") == result.summary
    assert {key for key, _, _ in TOP_LEVEL_FIGURES} <= set(record)


def test_save_writes_the_record_and_no_temporary_file(tmp_path):
    path = tmp_path / "p.json"
    save_profile(RECORD, path)
    assert json.loads(path.read_text()) == RECORD
    save_profile(RECORD, path)   # a kvplan profile may be replaced
    assert [p.name for p in tmp_path.iterdir()] == ["p.json"]


def test_save_refuses_directories_and_foreign_files(tmp_path):
    with pytest.raises(KvplanError, match="is a directory"):
        save_profile(RECORD, tmp_path)
    foreign = tmp_path / "data.json"
    foreign.write_text("[1, 2, 3]")
    with pytest.raises(KvplanError, match="refusing to overwrite"):
        save_profile(RECORD, foreign)
    assert foreign.read_text() == "[1, 2, 3]"
