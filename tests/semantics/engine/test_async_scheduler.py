"""Async scheduling (`vllm serve`'s default; docs/vllm/replay-async-0.17.1.md, docs/vllm/replay-0.33.md
§2): two batches in flight, one small scene each, in both releases."""

from __future__ import annotations

import pytest

from kvplan.semantics.engine.config import EngineConfig
from kvplan.semantics.engine.replay import replay
from kvplan.semantics.engine.scheduler import Scheduler
from kvplan.semantics.engine.trace import Trace, TraceRequest
from kvplan.semantics.releases import release_named

RELEASES = pytest.mark.parametrize("version", ["0.17.1", "0.33.0"])


def scheduler(version: str, num_gpu_blocks: int = 20, scheduling: str = "async", **overrides) -> Scheduler:
    settings = {"max_num_batched_tokens": 64, "max_num_seqs": 4, "max_model_len": 512, **overrides}
    return Scheduler(EngineConfig(num_gpu_blocks=num_gpu_blocks, release=release_named(version), scheduling=scheduling,
                                  **settings))


@RELEASES
def test_a_decode_is_scheduled_before_its_previous_token_is_known(make_request, version) -> None:
    s = scheduler(version)
    request = make_request("r", 20, max_tokens=3)
    s.add_request(request)
    first = s.step()
    assert first.scheduled == {"r": 20} and request.num_output_tokens == 0  # its first token is in flight
    assert request.num_output_placeholders == 1 and not first.output_of_earlier_batch
    second = s.step()
    # The second token is scheduled while the first is still unknown; then the first arrives.
    assert second.scheduled == {"r": 1} and second.output_of_earlier_batch and request.num_output_tokens == 1
    third = s.step()
    assert third.scheduled == {"r": 1} and request.num_output_tokens == 2
    # The token in flight is the last one: nothing more is scheduled, and its arrival finishes r.
    fourth = s.step()
    assert fourth.scheduled == {} and fourth.finished == ["r"] and request.num_output_tokens == 3
    assert fourth.free_blocks_after_schedule == 17 and fourth.num_free_blocks == 19  # freed after the schedule
    assert not s.has_unfinished()


@RELEASES
def test_sync_finishes_the_same_request_a_step_earlier(make_request, version) -> None:
    s = scheduler(version, scheduling="sync")
    s.add_request(make_request("r", 20, max_tokens=3))
    assert [s.step().finished for _ in range(3)] == [[], [], ["r"]]


@RELEASES
def test_a_block_is_hashed_when_the_token_completing_it_is_known(make_request, version) -> None:
    cached = {}
    for scheduling in ("sync", "async"):
        s = scheduler(version, scheduling=scheduling)
        s.add_request(make_request("r", 31, max_tokens=4))  # token 32 (the first output) fills block 2
        cached[scheduling] = [s.step().num_cached_blocks for _ in range(3)]
    # sync hashes block 2 when token 32 is computed (step 1); async when its output arrives (step 2).
    assert cached == {"sync": [1, 2, 2], "async": [1, 1, 2]}


@RELEASES
def test_a_preempted_request_still_gets_the_token_it_had_in_flight(make_request, version) -> None:
    s = scheduler(version, num_gpu_blocks=3)  # two usable blocks
    r0, r1 = make_request("r0", 15, max_tokens=10), make_request("r1", 15, max_tokens=10, start=100)
    s.add_request(r0)
    s.add_request(r1)
    s.step()  # both prompts, one block each
    s.step()  # both fill their block with their first decode
    step = s.step()  # r0's next token needs a block: r1 is preempted while its second token is in flight
    assert step.preempted == ["r1"] and step.scheduled == {"r0": 1}
    assert r1.num_output_tokens == 2 and r1.num_computed_tokens == 0 and r1.num_output_placeholders == 0
    assert [r.request_id for r in s.waiting] == ["r1"]


@RELEASES
def test_a_request_that_cannot_fit_alone_stalls_once_nothing_is_in_flight(version) -> None:
    config = EngineConfig(num_gpu_blocks=3, max_num_batched_tokens=64, max_num_seqs=4, max_model_len=512,
                          release=release_named(version), scheduling="async")
    steps = []
    summary = replay(Trace(config, (TraceRequest("r0", 0, 0, 10, unique_len=32),)),
                     lambda result, scheduler, arrived: steps.append(result))
    # Step 1 preempts r0 (its 33rd token needs a third block) as its first token arrives.
    assert steps[1].preempted == ["r0"] and steps[1].output_of_earlier_batch
    assert summary.stalled and summary.num_steps == 2 and summary.requests["r0"].finish_step is None
