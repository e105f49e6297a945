
import pytest

from kvplan.errors import KvplanError
from kvplan.report.jsonout import dumps
from kvplan.report.simulate_json import result_document
from kvplan.semantics.engine.args import EngineArgs
from kvplan.semantics.releases import release_named
from kvplan.usecases.simulate.driver import SimOptions, prepare, run
from kvplan.usecases.simulate.engine_source import EngineOverrides
from kvplan.usecases.simulate.simulation import simulate
from kvplan.usecases.simulate.workload import load_workload
from tests.golden import GOLDEN_CASES, GoldenCase
from tests.usecases.simulate.factories import mix

# Simulating a trace is replaying it; workloads have no KV cache groups, so hybrid traces are out.
SINGLE_GROUP = [case for case in GOLDEN_CASES if not case.is_hybrid]


def setup_for(write_json, document, **options):
    return prepare(load_workload(write_json(document)), SimOptions(**options))


@pytest.mark.parametrize("case", SINGLE_GROUP, ids=[case.id for case in SINGLE_GROUP])
def test_a_trace_gives_vllms_numbers_step_by_step(case: GoldenCase):
    """One engine, two front ends: simulating a trace reproduces vLLM's replay records, for each
    release and scheduling mode."""
    golden = case.records()
    summary = golden.pop()["summary"]
    options = SimOptions(overrides=EngineOverrides(scheduling=case.scheduling),
                         release=release_named(case.vllm_version))
    setup = prepare(load_workload(case.trace), options)
    rows = []
    outcome = run(setup, on_step=rows.append)
    assert len(rows) == len(golden)
    usable = setup.config.num_gpu_blocks - 1
    for record, row in zip(golden, rows, strict=True):
        stats = record["prefix_cache"]
        expected = {
            "step": record["step"], "num_scheduled_tokens": record["num_scheduled_tokens"],
            "num_free_blocks": record["num_free_blocks"], "num_used_blocks": record["num_used_blocks"],
            "used_blocks_in_step": usable - record["free_blocks_after_schedule"],
            "num_cached_blocks": record["num_cached_blocks"],
            "num_evictable_cached_blocks": record["num_evictable_cached_blocks"],
            "running": len(record["running"]), "waiting": len(record["waiting"]), "arrived": len(record["arrived"]),
            "admitted": len(record["admitted"]), "resumed": len(record["resumed"]),
            "preempted": len(record["preempted"]), "finished": len(record["finished"]),
            "prefix_queries": stats["queries"], "prefix_hits": stats["hits"],
            "preempted_queries": stats["preempted_queries"], "preempted_hits": stats["preempted_hits"],
        }
        assert {k: getattr(row, k) for k in expected} == expected
    metrics = outcome.metrics
    assert metrics.num_steps == summary["num_steps"] and metrics.stalled == summary["stalled"]
    assert metrics.num_finished == summary["num_finished"]
    assert metrics.preemptions.total == summary["total_preemptions"]
    assert metrics.kv.peak_used_blocks == summary["max_used_blocks"]
    prefix = metrics.prefix_cache
    assert (prefix.prefix_cache_queries, prefix.prefix_cache_hits) == (
        summary["prefix_cache_queries"], summary["prefix_cache_hits"])
    assert (prefix.preempted_queries, prefix.preempted_hits) == (
        summary["preempted_queries"], summary["preempted_hits"])
    for request, record in zip(setup.explicit, outcome.records, strict=True):
        want = summary["requests"][request.request_id]
        assert (record.arrival_step, record.first_scheduled_step, record.finish_step, record.preemptions,
                record.cached_tokens) == (want["arrival_step"], want["first_scheduled_step"], want["finish_step"],
                                          want["num_preemptions"], want["num_cached_tokens"])
    # the per-class split of vLLM's lookups adds up to the totals
    (only,) = metrics.classes
    assert (only.prefix_cache_queries, only.prefix_cache_hits) == (
        prefix.prefix_cache_queries, prefix.prefix_cache_hits)


def test_the_same_workload_and_seed_give_the_same_bytes(write_json):
    path = write_json(mix())

    def once(seed=None):
        return dumps(result_document(simulate(prepare(load_workload(path), SimOptions(seed=seed)))))

    assert once() == once()
    assert once(seed=12) != once()


def test_per_class_lookups_add_up_to_vllms_totals(write_json):
    classes = [
        {"name": "short", "prompt_tokens": {"dist": "uniform", "min": 10, "max": 60}, "output_tokens": 20,
         "shared_prefix": {"name": "system", "tokens": 48}},
        {"name": "long", "prompt_tokens": {"dist": "uniform", "min": 200, "max": 400}, "output_tokens": 30},
    ]
    metrics = run(setup_for(write_json, mix(classes=classes, arrival={"process": "poisson", "rate": 60, "count": 80}))
                  ).metrics
    assert metrics.preemptions.total > 0 and metrics.queues.max_waiting > 0
    assert sum(c.prefix_cache_queries for c in metrics.classes) == metrics.prefix_cache.prefix_cache_queries
    assert sum(c.prefix_cache_hits for c in metrics.classes) == metrics.prefix_cache.prefix_cache_hits
    assert sum(c.num_requests for c in metrics.classes) == metrics.num_requests == 80


def test_a_later_turn_hits_the_whole_previous_conversation(write_json):
    classes = [{"name": "agent", "prompt_tokens": 100, "output_tokens": 30,
                "turns": {"count": 3, "user_tokens": 20, "think_time_s": 0.5}}]
    document = mix(classes=classes, arrival={"process": "constant", "rate": 1, "count": 1},
                   engine={"num_gpu_blocks": 200, "block_size": 16, "max_model_len": 1024})
    outcome = run(setup_for(write_json, document))
    turns = sorted(outcome.records, key=lambda r: r.turn)
    assert [r.prompt_tokens for r in turns] == [100, 150, 200]
    # turn k's prompt starts with turn k-1's prompt and output, whole blocks (of 16) of which are cached
    assert [r.cached_tokens for r in turns] == [0, 128, 176]
    assert turns[1].arrival_time == pytest.approx(turns[0].finish_time + 0.5)


def test_arrivals_join_at_the_first_step_that_starts_after_them(write_json):
    document = {"schema_version": 1, "engine": {"num_gpu_blocks": 64}, "timing": {"step_time_ms": 10},
                "requests": [{"arrival_time": 0.0, "unique_len": 40, "max_tokens": 10},
                             {"arrival_time": 0.015, "unique_len": 40, "max_tokens": 10}]}
    first, second = run(setup_for(write_json, document)).records
    assert (first.arrival_step, second.arrival_step) == (0, 2)
    assert second.first_scheduled_time == pytest.approx(0.02)
    assert second.first_token_time == pytest.approx(0.03)


@pytest.mark.parametrize(("scheduling", "num_steps"), [("sync", 20), ("async", 22)])
def test_idle_time_counts_in_the_time_weighted_usage(write_json, scheduling, num_steps):
    document = {"schema_version": 1, "engine": {"num_gpu_blocks": 64, "block_size": 16, "scheduling": scheduling},
                "timing": {"step_time_ms": 10},
                "requests": [{"arrival_time": 0.0, "unique_len": 64, "max_tokens": 10},
                             {"arrival_time": 10.0, "unique_len": 64, "max_tokens": 10}]}
    metrics = run(setup_for(write_json, document)).metrics
    assert metrics.throughput.duration_s_estimate == pytest.approx(10.1)
    # async: each request's last token arrives in one more step, which only waits for it (no time)
    assert metrics.num_steps == num_steps
    # each request holds 4 blocks of 16 for its prefill step, then 5 for its 9 decode steps; 10 ms per step
    assert metrics.kv.mean_used_blocks == pytest.approx(2 * (4 + 9 * 5) * 0.01 / 10.1, rel=1e-6)
    assert metrics.kv.p50_used_blocks == 0 and metrics.kv.peak_used_blocks == 5


def test_a_request_that_cannot_fit_alone_stalls(write_json):
    # 3 usable blocks of 16 tokens cannot hold its 70 (block size given: any release)
    document = {"schema_version": 1, "engine": {"num_gpu_blocks": 4, "block_size": 16}, "timing": {"step_time_ms": 10},
                "requests": [{"arrival_time": 0.0, "unique_len": 40, "max_tokens": 30}]}
    outcome = run(setup_for(write_json, document))
    assert outcome.metrics.stalled and outcome.metrics.num_finished == 0


def test_warnings_for_prefixes_that_cannot_hit(write_json):
    classes = [{"name": "tiny", "prompt_tokens": 10, "output_tokens": 2, "shared_prefix": {"name": "s", "tokens": 12}},
               {"name": "odd", "prompt_tokens": 10, "output_tokens": 2, "shared_prefix": {"name": "t", "tokens": 40}}]
    notes = setup_for(write_json, mix(classes=classes)).notes
    assert any("classes[0] (tiny): shared prefix 's' (12 tokens) is shorter than one block" in n for n in notes)
    assert any("only 32 of the 40 tokens of shared prefix 't' can hit" in n for n in notes)
    off = setup_for(write_json, mix(classes=classes), overrides=EngineOverrides(EngineArgs(enable_prefix_caching=False))
                    ).notes
    assert any("cannot hit: prefix caching is off" in n for n in off)


def test_too_long_prompts_are_rejected_and_long_conversations_cut(write_json):
    classes = [{"name": "huge", "prompt_tokens": 2000, "output_tokens": 2},
               {"name": "chatty", "prompt_tokens": 300, "output_tokens": 200,
                "turns": {"count": 6, "user_tokens": 100, "think_time_s": 0}}]
    document = mix(classes=classes, arrival={"process": "constant", "rate": 5, "count": 12},
                   engine={"num_gpu_blocks": 400, "max_model_len": 1024})
    result = simulate(setup_for(write_json, document))
    assert not result.stalled
    assert any("requests were rejected" in n for n in result.notes)
    assert any("conversations ended early" in n for n in result.notes)
    chatty = next(c for c in result.metrics.classes if c.name == "chatty")
    assert chatty.num_finished == chatty.num_requests and chatty.num_requests < 6 * 12


def test_seconds_need_a_time_model(write_json):
    with pytest.raises(KvplanError, match="timing: arrivals are in seconds but no step time"):
        setup_for(write_json, mix(timing={}))


def test_explicit_lists_use_the_trace_rules(write_json):
    document = {"schema_version": 1, "engine": {"num_gpu_blocks": 64, "max_model_len": 100},
                "timing": {"step_time_ms": 5},
                "requests": [{"arrival_time": 0, "unique_len": 100, "max_tokens": 1}]}
    with pytest.raises(KvplanError, match=r"requests\[0\].*must be shorter than max_model_len"):
        setup_for(write_json, document)
    mixed = {**document, "requests": [{"arrival_time": 0, "unique_len": 5, "max_tokens": 1},
                                      {"arrival_step": 3, "unique_len": 5, "max_tokens": 1}]}
    with pytest.raises(KvplanError, match=r"requests\[1\]: every request needs arrival_time"):
        setup_for(write_json, mixed)


def test_async_times_follow_the_pipeline(write_json):
    """A token is known when the batch that sampled it ends, though its output is processed a step
    later: per-request times are those of the synchronous loop, steps are not."""
    outcomes = {}
    for scheduling in ("sync", "async"):
        document = {"schema_version": 1, "engine": {"num_gpu_blocks": 64, "scheduling": scheduling},
                    "timing": {"step_time_ms": 10},
                    "requests": [{"arrival_time": 0.0, "unique_len": 40, "max_tokens": 5},
                                 {"arrival_time": 0.015, "unique_len": 40, "max_tokens": 3}]}
        outcomes[scheduling] = run(setup_for(write_json, document)).records
    for sync, served in zip(outcomes["sync"], outcomes["async"], strict=True):
        assert served.first_token_time == pytest.approx(sync.first_token_time)
        assert served.finish_time == pytest.approx(sync.finish_time)
        assert served.finish_step == sync.finish_step + 1
    assert [r.finish_time for r in outcomes["async"]] == pytest.approx([0.05, 0.05])
