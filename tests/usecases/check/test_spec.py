from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.errors import KvplanError
from kvplan.usecases.check.assertions import KINDS, Concurrency
from kvplan.usecases.check.spec import load_spec, parse_required


def test_toml_spec_with_paths_relative_to_the_spec(write_spec, tmp_path):
    spec = write_spec("""
        [target]
        profile = "profiles/p.json"
        [[assert]]
        min_kv_tokens = 500_000
        min_concurrency = { tokens_per_request = 8192, at_least = 16 }
        [[assert]]
        workload = "w/chat.json"
        max_preemptions = 0
        max_p95_kv_usage = 0.9
        seed = 5
    """)
    assert spec.target.profile == tmp_path / "profiles" / "p.json"
    capacity, workload = spec.blocks
    assert [a.kind.key for a in capacity.assertions] == ["min_kv_tokens", "min_concurrency"]
    assert capacity.assertions[1].required == Concurrency(16.0, 8192)
    assert capacity.assertions[1].name == "min_concurrency@8192"
    assert workload.workload == tmp_path / "w" / "chat.json"
    assert workload.seed == 5
    assert [a.required for a in workload.assertions] == [0, 0.9]


def test_json_spec_reads_the_same(tmp_path):
    path = tmp_path / "spec.json"
    path.write_text(json.dumps({"target": {"model": "Qwen/Qwen2-0.5B-Instruct", "kv_cache_memory": "24GiB"},
                                "assert": [{"min_num_blocks": 1000, "fits": True}]}))
    spec = load_spec(path)
    assert spec.target.settings == {"kv_cache_memory": 24 * 2**30}
    assert [a.required for a in spec.blocks[0].assertions] == [1000, True]


def test_target_settings_are_held_in_one_spelling(write_spec):
    # a size as text or bytes, a whole number as 16.0: each is read by its kind, as a workload's engine reads it
    spec = write_spec("""
        [target]
        model = "m"
        gpu_memory = "24GiB"
        kv_cache_memory = "1G"
        block_size = 16.0
        [[assert]]
        fits = true
    """)
    settings = spec.target.settings
    assert (settings["gpu_memory"], settings["kv_cache_memory"], settings["block_size"]) == (24 << 30, 1 << 30, 16)
    assert type(settings["block_size"]) is int


def test_a_model_path_next_to_the_spec_is_resolved_from_the_spec(write_spec, tmp_path):
    spec = write_spec('[target]\nmodel = "cfg/config.json"\nkv_cache_memory = 1000000\n[[assert]]\nfits = true',
                      files={"cfg/config.json": "{}"})
    assert spec.target.model == str(tmp_path / "cfg" / "config.json")


@pytest.mark.parametrize(("text", "message"), [
    ('[[assert]]\nmin_kv_tokenz = 5', "assert[0].min_kv_tokenz: unknown key; did you mean min_kv_tokens?"),
    ('[target]\nmodel = "m"\nkv_cache_memory = "lots"\n[[assert]]\nfits = true', "target.kv_cache_memory"),
    ('[target]\nmodel = "m"\n[[assert]]\nmin_kv_tokens = -3',
     "assert[0].min_kv_tokens: -3 is out of range: expected an integer from 1 to 10**12"),
    ('[target]\nmodel = "m"\n[[assert]]\nmin_kv_tokens = 1.5',
     "assert[0].min_kv_tokens: expected an integer from 1 to 10**12, got 1.5"),
    ('[target]\nmodel = "m"\n[[assert]]\nmax_preemptions = 0', "needs workload = "),
    ('[[assert]]\nmin_kv_tokens = 5', "capacity assertions need a [target]"),
    ('[target]\n[[assert]]\nfits = true', "target: give profile"),
    ('[target]\nmodel = "m"\n[[assert]]\nmin_concurrency = { at_least = 2, tokens = 5 }',
     "min_concurrency.tokens: unknown key"),
    ('[target]\nmodel = "m"\n[[assert]]\nmin_concurrency = { tokens_per_request = 5 }', "at_least: required"),
    ('[target]\nmodel = "m"\n[[assert]]\nname = "x"', "assert[0]: no assertion in this block"),
    ('[target]\nmodel = "m"\n[[assert]]\nworkload = "w.json"\nmax_p95_kv_usage = 90',
     "assert[0].max_p95_kv_usage: 90 is out of range: expected a number from 0 to 1"),
    ('[target]\nmodel = "m"\ngpu_memory_utilization = 1.5\n[[assert]]\nfits = true',
     "target.gpu_memory_utilization: 1.5 is out of range: expected a number above 0 and at most 1"),
    ('target = 3\n[[assert]]\nfits = true', "target: expected an object (a [target] table), got 3"),
    ('[target]\nmodel = "m"', "assert: required key is missing (give at least one [[assert]] block"),
    ('[target\nmodel = "m"', "not valid TOML"),
])
def test_bad_specs_name_the_field(write_spec, text, message):
    with pytest.raises(KvplanError) as raised:
        write_spec(text)
    assert message in str(raised.value)
    assert str(raised.value).startswith("spec.toml: ")
    assert "\n" not in str(raised.value)


def test_a_missing_spec_file_is_one_line():
    with pytest.raises(KvplanError, match=r"spec\.toml: file not found"):
        load_spec(Path("/nonexistent/spec.toml"))


@pytest.mark.parametrize(("key", "text", "value"), [
    ("min_kv_tokens", "500_000", 500000),
    ("min_kv_tokens", "1,000", 1000),
    ("min_kv_cache_memory", "24GiB", 24 * 2**30),
    ("fits", "yes", True),
    ("max_p95_ttft_s", "2", 2.0),
    ("min_concurrency", "16@8192", Concurrency(16.0, 8192)),
    ("min_concurrency", "2.5", Concurrency(2.5, None)),
])
def test_required_values_from_flag_text(key, text, value):
    assert parse_required(KINDS[key], text, "--flag") == value


def test_every_kind_has_a_flag_and_a_unique_key():
    flags = [kind.flag for kind in KINDS.values()]
    assert len(set(flags)) == len(flags)
    assert KINDS["max_model_len_fits"].flag == "--assert-max-model-len-fits"
    assert all(kind.path for kind in KINDS.values() if kind.scope == "workload")
