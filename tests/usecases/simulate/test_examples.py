"""Every example workload runs end to end, offline, and shows what it was written to show."""

from functools import cache
from pathlib import Path

import pytest

from kvplan.usecases.simulate.driver import SimOptions, prepare
from kvplan.usecases.simulate.simulation import simulate
from kvplan.usecases.simulate.workload import load_workload

EXAMPLES = Path(__file__).resolve().parents[3] / "examples" / "workloads"


@cache
def result(name):
    return simulate(prepare(load_workload(EXAMPLES / name), SimOptions()))


@pytest.mark.slow
@pytest.mark.parametrize("path", sorted(EXAMPLES.glob("*.json")), ids=lambda p: p.name)
def test_every_example_runs_to_completion(path):
    outcome = result(path.name)
    assert not outcome.stalled
    assert outcome.metrics.num_finished == outcome.metrics.num_requests > 0
    assert outcome.setup.timer is not None


@pytest.mark.slow
def test_the_shared_system_prompt_is_mostly_cache_hits():
    metrics = result("chat-shared-prompt.json").metrics
    assert metrics.prefix_cache.first_admission_hit_rate > 0.5


@pytest.mark.slow
def test_bursts_queue_up_and_conversations_have_turns():
    bursty = result("bursty.json").metrics
    assert bursty.queues.max_waiting > 0 and bursty.kv.peak_usage == 1.0
    agent = result("multi-turn-agent.json")
    assert agent.metrics.num_requests > agent.setup.workload.arrival.count
