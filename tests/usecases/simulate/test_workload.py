import json
from pathlib import Path

import pytest

from kvplan.errors import KvplanError
from kvplan.usecases.simulate.workload import load_workload, plan_conversations
from tests.usecases.simulate.factories import mix

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "workloads"


@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.json")), ids=lambda p: p.name)
def test_every_example_parses(path):
    workload = load_workload(path)
    assert workload.classes or workload.requests


def test_a_mix_parses_into_classes_and_arrivals(write_json):
    workload = load_workload(write_json(mix()))
    assert [c.name for c in workload.classes] == ["chat"]
    assert workload.classes[0].shared_prefix.tokens == 64
    assert workload.arrival.rate == 20.0 and workload.arrival.count == 40
    assert workload.engine.num_gpu_blocks == 64 and workload.engine.args.max_num_seqs == 8
    assert workload.timing.step_time_ms == 10
    assert not workload.is_explicit and not workload.arrivals_in_steps


def test_the_engine_settings_are_read_as_every_reader_reads_them(write_json):
    engine = {"num_gpu_blocks": 64, "block_size": 16.0, "max_num_seqs": 8.0, "enable_prefix_caching": False}
    args = load_workload(write_json(mix(engine=engine))).engine.args
    assert (args.block_size, args.max_num_seqs, args.enable_prefix_caching) == (16, 8, False)
    assert type(args.block_size) is int and type(args.max_num_seqs) is int
    planned = load_workload(write_json(mix(engine={"model": "m", "gpu_memory": "24GiB"}))).engine
    assert planned.gpu_memory == 24 << 30


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"schema_version": 2}, "schema_version: unsupported version 2"),
        ({"seed": "x"}, "seed: expected an integer from 0 to 2**63 - 1, got 'x'"),
        ({"engine": {"num_gpu_blocks": 64, "max_num_seq": 8}}, "engine.max_num_seq: unknown key"),
        ({"engine": {"num_gpu_blocks": 64, "profile": "p.json"}}, "engine.profile: give one pool source"),
        ({"engine": {"num_gpu_blocks": 64, "gpu_memory_utilization": 0.8}},
         "engine.gpu_memory_utilization: only applies when the engine is planned from engine.model"),
        ({"engine": {"model": "m", "gpu_memory_utilization": 1.5}},
         "engine.gpu_memory_utilization: 1.5 is out of range: expected a number above 0 and at most 1"),
        ({"engine": {"num_gpu_blocks": "many"}},
         "engine.num_gpu_blocks: expected an integer from 2 to 10**8, got 'many'"),
        ({"engine": {"num_gpu_blocks": 64, "enable_prefix_caching": "yes"}},
         "engine.enable_prefix_caching: expected true or false"),
        ({"timing": {"step_time_ms": -5}},
         "timing.step_time_ms: -5 is out of range: expected a number above 0 and at most 10**6"),
        ({"timing": {"calibration": [{"num_tokens": 1}]}}, "timing.calibration[0].ms: required key is missing"),
        ({"arrival": {"process": "poisson", "rate": -2, "count": 5}},
         "arrival.rate: -2 is out of range: expected a number from 1e-06 to 10**6"),
        ({"classes": []}, "classes: expected a list of 1 to 1,000 items, got 0 items"),
        ({"classes": [{"name": "a", "prompt_tokens": {"dist": "zipf"}, "output_tokens": 4}]},
         "classes[0].prompt_tokens.dist: expected one of: constant, uniform, normal, lognormal, empirical, "
         "histogram, got 'zipf'"),
        ({"classes": [{"name": "a", "prompt_tokens": 5}]}, "classes[0].output_tokens: required key is missing"),
        ({"classes": [{"name": "a", "prompt_tokens": 5, "output_tokens": 0}]},
         "classes[0].output_tokens: 0 is out of range: expected an integer from 1 to 10**8"),
        ({"classes": [{"name": "a", "weight": 0, "prompt_tokens": 5, "output_tokens": 1}]},
         "classes[0].weight: 0 is out of range: expected a number above 0 and at most 10**9"),
        ({"classes": [{"name": "a", "prompt_tokens": 5, "output_tokens": 1},
                      {"name": "a", "prompt_tokens": 5, "output_tokens": 1}]}, "classes[1].name: class name 'a'"),
        ({"classes": [{"name": "a", "prompt_tokens": 5, "output_tokens": 1, "turns": {"count": 2}}]},
         "classes[0].turns.user_tokens: required key is missing"),
        ({"requests": []}, "requests: expected a list of 1 to 10**7 items, got 0 items"),
        ({"requests": [{"max_tokens": 1, "unique_len": 4}]}, "requests: give either classes + arrival"),
        ({"banana": 1}, "banana: unknown key"),
    ],
)
def test_bad_workloads_name_the_field_in_one_line(write_json, change, message):
    with pytest.raises(KvplanError) as error:
        load_workload(write_json(mix(**change)))
    text = str(error.value)
    assert text == text.strip() and "\n" not in text
    assert text.startswith(f"workload.json: {message}")


def test_unreadable_files_are_one_line(tmp_path):
    with pytest.raises(KvplanError, match=r"missing\.json: file not found"):
        load_workload(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text('{"schema_version": 1,')
    with pytest.raises(KvplanError, match=r"bad.json: not valid JSON \(line 1"):
        load_workload(bad)


def test_a_trace_replay_file_is_an_explicit_workload(data_dir):
    workload = load_workload(data_dir / "traces" / "example.json")
    assert workload.is_explicit and workload.arrivals_in_steps
    assert workload.engine.num_gpu_blocks == 14 and len(workload.requests) == 6


def test_requests_may_live_in_a_json_lines_file_beside_the_workload(tmp_path, write_json):
    (tmp_path / "log.jsonl").write_text('{"arrival_time": 0.5, "unique_len": 30, "max_tokens": 4}\n\n'
                                        '{"arrival_time": 0.1, "prompt_token_ids": [1, 2, 3], "max_tokens": 2}\n')
    workload = load_workload(write_json({"schema_version": 1, "engine": {"num_gpu_blocks": 32},
                                         "timing": {"step_time_ms": 5}, "requests": "log.jsonl"}))
    assert [r["request_id"] for r in workload.requests] == ["r0", "r1"]
    assert workload.requests_source == "log.jsonl" and not workload.arrivals_in_steps


def test_a_bare_json_lines_file_needs_the_pool_from_the_command_line(tmp_path):
    path = tmp_path / "log.jsonl"
    path.write_text(json.dumps({"arrival_step": 0, "unique_len": 3, "max_tokens": 1}) + "\n")
    workload = load_workload(path)
    assert workload.engine.num_gpu_blocks is None and workload.arrivals_in_steps


def test_plans_are_reproducible_and_streams_independent(write_json):
    workload = load_workload(write_json(mix()))
    first = plan_conversations(workload, seed=3)
    assert first == plan_conversations(workload, seed=3)
    assert first != plan_conversations(workload, seed=4)
    # a different arrival rate leaves the lengths alone: arrivals and lengths are separate streams
    faster = load_workload(write_json(mix(arrival={"process": "poisson", "rate": 80.0, "count": 40})))
    again = plan_conversations(faster, seed=3)
    assert [c.turns for c in again] == [c.turns for c in first]
    assert [c.arrival_time for c in again] == pytest.approx([c.arrival_time / 4 for c in first])


def test_class_weights_split_the_arrivals(write_json):
    classes = [{"name": "a", "weight": 3, "prompt_tokens": 8, "output_tokens": 1},
               {"name": "b", "weight": 1, "prompt_tokens": 8, "output_tokens": 1}]
    workload = load_workload(write_json(mix(classes=classes, arrival={"process": "all_at_once", "count": 4000})))
    picks = [c.class_index for c in plan_conversations(workload, seed=0)]
    assert picks.count(0) / len(picks) == pytest.approx(0.75, abs=0.02)


def test_multi_turn_plans_draw_turn_counts_and_think_times(write_json):
    classes = [{"name": "agent", "prompt_tokens": 50, "output_tokens": 10,
                "turns": {"count": {"dist": "uniform", "min": 2, "max": 4}, "user_tokens": 7,
                          "think_time_s": {"dist": "uniform", "min": 1, "max": 2}}}]
    workload = load_workload(write_json(mix(classes=classes)))
    for conversation in plan_conversations(workload, seed=0):
        assert 2 <= len(conversation.turns) <= 4
        assert conversation.turns[0].user_tokens == 50 and conversation.turns[0].think_time_s == 0
        assert all(t.user_tokens == 7 and 1 <= t.think_time_s <= 2 for t in conversation.turns[1:])
