"""The synchronous FCFS scheduler's rules for vLLM 0.17.1 (docs/vllm/replay-contract.md §2), one small
scene each; what other releases and async scheduling change is in test_release_policies.py and
test_async_scheduler.py."""

from __future__ import annotations

import pytest

from kvplan.errors import KvplanError
from kvplan.semantics.engine.config import EngineConfig
from kvplan.semantics.engine.replay import replay
from kvplan.semantics.engine.request import RequestStatus
from kvplan.semantics.engine.scheduler import Scheduler
from kvplan.semantics.engine.trace import Trace, TraceRequest
from kvplan.semantics.releases import VLLM_0_17_1

SYNC_0_17_1 = {"release": VLLM_0_17_1, "scheduling": "sync"}


def scheduler(num_gpu_blocks: int, **overrides) -> Scheduler:
    settings = {"max_num_batched_tokens": 64, "max_num_seqs": 4, "max_model_len": 512, **SYNC_0_17_1, **overrides}
    return Scheduler(EngineConfig(num_gpu_blocks=num_gpu_blocks, **settings))


def test_the_waiting_head_blocks_every_request_behind_it(make_request) -> None:
    s = scheduler(5, max_num_batched_tokens=128)
    for request in (make_request("r0", 40, start=0), make_request("r1", 40, start=100),
                    make_request("r2", 8, start=200)):
        s.add_request(request)
    step = s.step()
    assert step.scheduled == {"r0": 40}
    assert [r.request_id for r in s.waiting] == ["r1", "r2"]  # r2 would fit, but r1 is first
    assert step.num_free_blocks == 1
    assert step.prefix_cache.requests == 2  # r1's failed lookup counts too


def test_preemption_takes_the_last_running_request_and_stops_admissions(make_request) -> None:
    s = scheduler(5)
    s.add_request(make_request("r0", 32, max_tokens=2, start=0))
    s.add_request(make_request("r1", 32, start=100))
    assert s.step().admitted == ["r0", "r1"]  # 2 blocks each; each has 33 tokens now
    s.add_request(make_request("r2", 1, start=200))
    step = s.step()  # r0's 33rd token needs a third block
    assert step.preempted == ["r1"] and step.scheduled == {"r0": 1} and step.finished == ["r0"]
    assert step.admitted == [] and step.free_blocks_after_schedule == 1  # r2 fits, yet waits
    assert [r.request_id for r in s.waiting] == ["r1", "r2"]
    r1 = s.waiting[0]
    assert (r1.num_computed_tokens, r1.num_preemptions, r1.status) == (0, 1, RequestStatus.PREEMPTED)
    step = s.step()
    # r1 recomputes its generated token too; its second block was evicted when r0 grew.
    assert step.resumed == ["r1"] and step.admitted == ["r2"]
    assert step.prefix_hit_tokens == {"r1": 16, "r2": 0} and step.scheduled == {"r1": 17, "r2": 1}
    assert step.prefix_cache.preempted_requests == 1 and step.prefix_cache.requests == 1


def test_without_chunked_prefill_a_prompt_waits_for_a_whole_budget(make_request) -> None:
    s = scheduler(20, max_num_batched_tokens=64, max_model_len=64, enable_chunked_prefill=False)
    s.add_request(make_request("r0", 40, start=0))
    s.add_request(make_request("r1", 30, start=100))
    assert s.step().scheduled == {"r0": 40}
    chunked = scheduler(20, max_num_batched_tokens=64, max_model_len=64)
    chunked.add_request(make_request("r0", 40, start=0))
    chunked.add_request(make_request("r1", 30, start=100))
    assert chunked.step().scheduled == {"r0": 40, "r1": 24}


def test_max_num_seqs_caps_the_running_requests(make_request) -> None:
    s = scheduler(20, max_num_seqs=2)
    for i in range(3):
        s.add_request(make_request(f"r{i}", 4, start=100 * i))
    assert list(s.step().scheduled) == ["r0", "r1"]


def test_a_partial_prefill_chunk_gets_no_token(make_request) -> None:
    s = scheduler(20, max_num_batched_tokens=16, max_num_seqs=1)
    request = make_request("r0", 40)
    s.add_request(request)
    outputs = []
    for _ in range(3):
        s.step()
        outputs.append(request.num_output_tokens)
    assert outputs == [0, 0, 1]


def test_a_request_stops_at_max_model_len(make_request) -> None:
    s = scheduler(20, max_model_len=20)
    request = make_request("r0", 16, max_tokens=100)
    s.add_request(request)
    finished_at = next(step.step for step in iter(s.step, None) if step.finished)
    assert finished_at == 3 and request.num_output_tokens == 4 and request.num_tokens == 20
    assert not s.has_unfinished() and s.block_pool.num_free_blocks == 19


def test_a_request_that_cannot_grow_preempts_itself_and_the_run_stalls() -> None:
    trace = Trace(
        EngineConfig(num_gpu_blocks=3, max_num_batched_tokens=64, max_num_seqs=4, max_model_len=512, **SYNC_0_17_1),
        (TraceRequest("r0", 0, 0, 10, unique_len=32),),
    )
    steps = []
    summary = replay(trace, lambda result, scheduler, arrived: steps.append(result))
    assert steps[1].preempted == ["r0"] and steps[1].num_scheduled_tokens == 0
    assert summary.stalled and summary.num_steps == 2 and summary.num_finished == 0
    assert summary.requests["r0"].finish_step is None


def test_idle_steps_before_a_late_arrival_are_not_a_stall() -> None:
    trace = Trace(EngineConfig(num_gpu_blocks=10, **SYNC_0_17_1), (TraceRequest("r0", 0, 3, 2, unique_len=5),))
    summary = replay(trace)
    assert not summary.stalled and summary.num_steps == 5
    assert summary.requests["r0"].first_scheduled_step == 3


def test_requests_are_checked_when_added(make_request) -> None:
    s = scheduler(10, max_model_len=32)
    s.add_request(make_request("r0", 8))
    with pytest.raises(KvplanError, match="already"):
        s.add_request(make_request("r0", 8))
    with pytest.raises(KvplanError, match="shorter than max_model_len"):
        s.add_request(make_request("r1", 32))
