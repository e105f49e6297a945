import pytest

from kvplan.errors import KvplanError
from kvplan.usecases.simulate.capacity_search import search_max_rate, sustained, zero_preemption_pool
from kvplan.usecases.simulate.driver import SimOptions, prepare, request_block_sizes, run, with_pool
from kvplan.usecases.simulate.engine_source import EngineOverrides
from kvplan.usecases.simulate.workload import load_workload
from tests.usecases.simulate.factories import mix

PRESSURE = {"arrival": {"process": "poisson", "rate": 40, "count": 60},
            "classes": [{"name": "chat", "prompt_tokens": {"dist": "uniform", "min": 50, "max": 250},
                         "output_tokens": {"dist": "uniform", "min": 20, "max": 120}}]}


def setup_for(write_json, document, **options):
    return prepare(load_workload(write_json(document)), SimOptions(**options))


def test_the_zero_preemption_pool_really_avoids_preemptions(write_json):
    setup = setup_for(write_json, mix(**PRESSURE))
    outcome = run(setup)
    assert outcome.metrics.preemptions.total > 0
    answer = zero_preemption_pool(setup, outcome)
    assert answer.num_gpu_blocks > setup.config.num_gpu_blocks and not answer.configured_is_enough
    assert answer.kv_tokens == answer.num_gpu_blocks * 16      # the null block included
    # check the answer by simulating with exactly that pool
    checked = run(prepare(load_workload(write_json(mix(**PRESSURE))),
                          SimOptions(overrides=EngineOverrides(num_gpu_blocks=answer.num_gpu_blocks))))
    assert checked.metrics.preemptions.total == 0
    assert checked.metrics.kv.peak_used_blocks == answer.peak_used_blocks


def test_a_pool_that_never_runs_out_is_its_own_answer(write_json):
    setup = setup_for(write_json, mix(**PRESSURE), overrides=EngineOverrides(num_gpu_blocks=20_000))
    outcome = run(setup)
    answer = zero_preemption_pool(setup, outcome)
    assert answer.method.startswith("the configured pool already holds")
    assert answer.num_gpu_blocks == outcome.metrics.kv.peak_used_blocks + 1 and answer.configured_is_enough


MULTI_TURN = {"name": "agent", "prompt_tokens": {"dist": "uniform", "min": 40, "max": 200},
              "output_tokens": {"dist": "uniform", "min": 8, "max": 60}, "shared_prefix": {"name": "s", "tokens": 48},
              "turns": {"count": {"dist": "uniform", "min": 2, "max": 5},
                        "user_tokens": {"dist": "uniform", "min": 20, "max": 120},
                        "think_time_s": {"dist": "uniform", "min": 0.05, "max": 0.5}}}


@pytest.mark.parametrize(("classes", "blocks", "one_pass"), [
    (None, 40, False),              # the pool refuses blocks
    (None, 64, True),               # it evicts hashed blocks, but none of them is ever looked up again
    (None, 100, True),
    ([MULTI_TURN], 200, False),
    ([MULTI_TURN], 260, False),     # no refusal, but later turns miss the history an eviction dropped
])
def test_one_pass_gives_the_answer_of_a_pool_that_never_runs_out(write_json, classes, blocks, one_pass):
    document = mix(engine={"num_gpu_blocks": blocks, "block_size": 16, "max_num_seqs": 8,
                           "max_num_batched_tokens": 256, "max_model_len": 1024},
                   arrival={"process": "poisson", "rate": 20.0, "count": 60})
    if classes:
        document["classes"] = classes
    setup = setup_for(write_json, document)
    outcome = run(setup)
    bound = sum(sorted(request_block_sizes(setup), reverse=True)[:setup.config.max_num_seqs]) + 1
    assert blocks < bound
    answer = zero_preemption_pool(setup, outcome)
    assert (not outcome.pool_was_short) is one_pass
    assert answer.method.startswith("peak in-step usage of this run") is one_pass
    unbounded = run(setup, config=with_pool(setup.config, bound))
    assert answer.peak_used_blocks == unbounded.metrics.kv.peak_used_blocks
    if one_pass:    # the very same steps, not only the same peak
        assert outcome.metrics.throughput == unbounded.metrics.throughput
        assert [r.finish_time for r in outcome.records] == [r.finish_time for r in unbounded.records]
    elif classes:   # the lost hits change the run: its own peak would be a wrong answer
        assert outcome.metrics.kv.peak_used_blocks != unbounded.metrics.kv.peak_used_blocks


def test_the_max_rate_is_sustained_and_a_little_more_is_not(write_json):
    document = mix(arrival={"process": "poisson", "rate": 5, "count": 120},
                   engine={"num_gpu_blocks": 400, "max_num_seqs": 8, "max_num_batched_tokens": 256},
                   classes=PRESSURE["classes"])
    setup = setup_for(write_json, document)
    answer = search_max_rate(setup)
    assert answer.bounded_above and answer.nominal_rate_rps == 5
    best = answer.max_sustained_rate_rps_estimate
    rates = [t.rate_rps_estimate for t in answer.trials]
    assert rates == sorted(rates) and best in rates
    above = min((t for t in answer.trials if t.rate_rps_estimate > best), key=lambda t: t.rate_rps_estimate)
    assert not above.sustained and above.rate_rps_estimate <= best * 1.02 + 1e-9
    assert sustained(run(setup, rate_factor=best / 5))[0]
    assert not sustained(run(setup, rate_factor=2 * best / 5))[0]


def test_the_max_rate_needs_a_rate(write_json, data_dir):
    with pytest.raises(KvplanError, match="'all_at_once' has no rate"):
        search_max_rate(setup_for(write_json, mix(arrival={"process": "all_at_once", "count": 20})))
    trace = prepare(load_workload(data_dir / "traces" / "example.json"), SimOptions())
    with pytest.raises(KvplanError, match="needs arrivals in seconds"):
        search_max_rate(trace)
