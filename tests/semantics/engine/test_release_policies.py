"""What vLLM 0.33.0's scheduler does differently from 0.17.1's (docs/vllm/replay-0.33.md §1),
one small scene each, in the synchronous loop; the free-queue order is in test_block_pool.py."""

from __future__ import annotations

import pytest

from kvplan.semantics.engine.config import EngineConfig
from kvplan.semantics.engine.replay import replay
from kvplan.semantics.engine.scheduler import Scheduler
from kvplan.semantics.engine.trace import Trace, TraceRequest
from kvplan.semantics.releases import release_named


def scheduler(version: str, num_gpu_blocks: int, **overrides) -> Scheduler:
    settings = {"max_num_batched_tokens": 32, "max_num_seqs": 4, "max_model_len": 512, **overrides}
    return Scheduler(EngineConfig(num_gpu_blocks=num_gpu_blocks, release=release_named(version), scheduling="sync",
                                  **settings))


@pytest.mark.parametrize(("version", "admitted"), [("0.17.1", ["r0", "r1"]), ("0.33.0", ["r0"])])
def test_0_33_0_admits_a_request_only_when_its_whole_prompt_fits(make_request, version, admitted) -> None:
    s = scheduler(version, 6)  # 5 usable blocks
    s.add_request(make_request("r0", 16, max_tokens=3))
    s.add_request(make_request("r1", 80, start=1000))  # a 16-token first chunk fits; all 5 blocks do not
    step = s.step()
    assert step.admitted == admitted
    if version == "0.33.0":
        assert [r.request_id for r in s.waiting] == ["r1"] and step.num_free_blocks == 4


@pytest.mark.parametrize(("version", "stalls_at", "preemptions"), [("0.17.1", 2, 1), ("0.33.0", 0, 0)])
def test_a_prompt_that_never_fits_whole_is_never_admitted_in_0_33_0(version, stalls_at, preemptions) -> None:
    config = EngineConfig(num_gpu_blocks=3, max_num_batched_tokens=16, max_num_seqs=4, max_model_len=512,
                          release=release_named(version), scheduling="sync")
    summary = replay(Trace(config, (TraceRequest("long", 0, 0, 4, unique_len=40),)))
    # 0.17.1 admits a first chunk, grows and preempts itself; 0.33.0 stalls at once.
    assert summary.stalled and summary.num_steps - 1 == stalls_at and summary.total_preemptions == preemptions


@pytest.mark.parametrize(("version", "lookups"), [("0.17.1", 3), ("0.33.0", 2)])
def test_0_33_0_counts_a_lookup_once_on_admission(make_request, version, lookups) -> None:
    s = scheduler(version, 6)
    s.add_request(make_request("r0", 64, max_tokens=2))  # two 32-token chunks (4 blocks), then a fifth block
    s.add_request(make_request("r1", 32, max_tokens=1, start=1000))
    steps = [s.step() for _ in range(4)]
    assert [step.admitted for step in steps] == [["r0"], [], [], ["r1"]]
    # r1 is looked up at step 2 (no block left: r0 took the last) and admitted at step 3 after r0
    # finished; 0.17.1 counts both lookups, 0.33.0 only the admission.
    assert sum(step.prefix_cache.requests for step in steps) == lookups
    assert s.prefix_cache_stats.queries == 64 + 32 * (lookups - 1)
