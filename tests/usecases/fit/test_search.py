"""fit's search: the plan round's bisection decides exactly what planning every point would, the
lengths and the ranking follow their rules."""

from __future__ import annotations

from dataclasses import replace

import pytest

from kvplan.errors import KvplanError
from kvplan.semantics.engine.args import EngineArgs
from kvplan.semantics.releases import VLLM_0_33_0
from kvplan.usecases.configuration import Configuration
from kvplan.usecases.executors import InProcessExecutor
from kvplan.usecases.fit.request import ConcurrencyTarget, FitRequest, SearchSpace
from kvplan.usecases.fit.result import FitConfiguration, PlannedPoint, RateCheck
from kvplan.usecases.fit.search import (
    PlanGroup,
    _memory_note,
    _pareto,
    _with_workload_defaults,
    fit,
    length_candidates,
    plan_group,
    plan_point,
)
from kvplan.usecases.simulate.workload import parse_workload
from tests.usecases.simulate.factories import mix

LLAMA = "meta-llama/Llama-3.1-8B-Instruct"   # 128 KiB of KV cache per token: 131,072 tokens need 16 GiB
GIB = 1 << 30
MIB = 1 << 20


def group(memories, lengths=(None,), concurrency=None, release=None, **args):
    configuration = Configuration(model=LLAMA, args=EngineArgs(**args), **({"release": release} if release else {}))
    return PlanGroup(configuration, lengths, (), tuple(memories), concurrency)


def test_bisection_decides_what_planning_every_point_decides():
    # 16 points. 16 GiB holds exactly one 131,072-token request, and vLLM 0.33.0's capacity check
    # holds one block back: 18 GiB is the first that fits.
    memories = [g * GIB for g in range(2, 34, 2)]
    planned = plan_group(group(memories, lengths=(None, 16384)))
    one_by_one = [plan_point(Configuration(model=LLAMA).with_args(kv_cache_memory_bytes=m), None) for m in memories]
    assert [p.status for p in planned.points] == [p.status for p in one_by_one]
    assert [p.status for p in planned.points].index("fits") == 8
    # the points below the boundary were not planned, and the shorter length was not needed
    assert sum(p.inferred for p in planned.points) >= 4
    assert planned.planned == 16 - sum(p.inferred for p in planned.points)
    assert planned.skipped_lengths == 1
    assert all(p.configuration.args.max_model_len == 131072 for p in planned.points)
    fitting = [p for p in planned.points if p.meets_memory]
    assert [p.num_gpu_blocks for p in fitting] == [p.num_gpu_blocks for p in one_by_one[8:]]


def test_a_shorter_length_is_tried_when_the_longest_does_not_fit():
    # 16,384 tokens take 2 GiB, and vLLM 0.33.0's capacity check holds one block (of 16 tokens, 2 MiB) back
    planned = plan_group(group([2 * GIB + 2 * MIB, 3 * GIB], lengths=(None, 16384), release=VLLM_0_33_0))
    assert [p.status for p in planned.points] == ["fits", "fits"]
    assert {p.configuration.args.max_model_len for p in planned.points} == {16384}
    nothing = plan_group(group([GIB], lengths=(None, 65536)))
    assert nothing.points[0].status == "does_not_fit" and "max_model_len" in nothing.points[0].reason


def test_concurrency_goal_is_judged_on_the_pool():
    # 32 requests of 8,192 tokens: 32 x 512 blocks of 16 tokens = 16,384 blocks = 32 GiB at 2 MiB per block
    planned = plan_group(group([30 * GIB, 32 * GIB, 34 * GIB], lengths=(8192,), concurrency=(32, 8192),
                               max_num_seqs=64))
    assert [p.status for p in planned.points] == ["short_of_concurrency", "fits", "fits"]
    assert planned.points[1].concurrency_at_target == pytest.approx(32.0, abs=0.01)
    few_seqs = plan_group(group([34 * GIB], lengths=(8192,), concurrency=(32, 8192), max_num_seqs=16))
    assert few_seqs.points[0].status == "short_of_concurrency" and "max_num_seqs 16" in few_seqs.points[0].reason


def test_refusals_are_results():
    args = EngineArgs(kv_cache_memory_bytes=20 * GIB, tensor_parallel_size=3)
    refused = plan_point(Configuration(model=LLAMA, args=args), None)
    assert refused.status == "refused" and "divisible" in refused.reason


def test_lengths_from_the_traffic():
    workload = parse_workload(mix(), None, "w.json")       # prompts up to 64 + 120 tokens, outputs up to 40
    request = FitRequest(model=LLAMA, space=SearchSpace(gpus=("l4-24gb",)), workload=workload)
    lengths, need = length_candidates(request, seed=11)
    assert need <= 64 + 120 + 40 and lengths == (None, 256)
    given = replace(request, space=SearchSpace(gpus=("l4-24gb",)).with_values(max_model_len=(128, 4096, 1024)))
    assert length_candidates(given, seed=11)[0] == (4096, 1024)
    with pytest.raises(KvplanError, match="shorter than"):
        too_short = SearchSpace(gpus=("l4-24gb",)).with_values(max_model_len=(64,))
        length_candidates(replace(request, space=too_short), seed=11)


def _configuration(gpus: int, rate: float) -> FitConfiguration:
    point = PlannedPoint(Configuration(model=LLAMA, args=EngineArgs(tensor_parallel_size=gpus)), "fits")
    check = RateCheck(rate=1, meets=True, figures=(), missed=(), ttft_p95_s=0.1, tpot_p95_s=0.01, preemptions=0,
                      sustained=True, stalled=False, num_requests=10, num_finished=10, max_sustained_rate=rate,
                      max_rate_bounded=True, lowest_rate_tried=1, runs=3)
    return FitConfiguration(point, check, None, None, None, pareto=False)


def test_the_pareto_front():
    configurations = [_configuration(1, 5.0), _configuration(1, 4.0), _configuration(2, 12.0),
                      _configuration(2, 4.0), _configuration(4, 11.0)]
    assert _pareto(configurations, prices=False) == {0, 2}


def test_fit_needs_traffic_and_prices_for_every_gpu():
    space = SearchSpace(gpus=("l4-24gb", "h100-sxm-80gb")).with_values(kv_cache_memory_bytes=(20 * GIB,))
    with InProcessExecutor() as executor:
        with pytest.raises(KvplanError, match="give the traffic"):
            fit(FitRequest(model=LLAMA, space=space), executor)
        with pytest.raises(KvplanError, match="no price for h100-sxm-80gb"):
            fit(FitRequest(model=LLAMA, space=space, concurrency=None, prices=(("l4-24gb", 1.0),),
                           workload=parse_workload(mix(), None, "w.json")), executor)


def test_a_crash_inside_kvplan_is_a_failure_of_kvplan_not_a_refusal(monkeypatch):
    """A configuration kvplan crashed on (the fake build of DeepSeek-V3's TP 8 shard did) is not
    ruled out: its family says kvplan failed, and the conclusion does not claim it cannot serve."""
    import io

    from rich.console import Console

    from kvplan.report.fit_console import render_fit
    from kvplan.usecases.planner import Planner

    real = Planner.plan

    def crashing(self, request):
        if request.gpu == "h100-sxm-80gb":
            raise RuntimeError("Attempting to broadcast a dimension of length 28")
        return real(self, request)

    monkeypatch.setattr(Planner, "plan", crashing)
    space = SearchSpace(gpus=("l4-24gb", "h100-sxm-80gb")).with_values(kv_cache_memory_bytes=(GIB,))
    with InProcessExecutor() as executor:
        result = fit(FitRequest(model=LLAMA, space=space, concurrency=ConcurrencyTarget(64, 131072)), executor)
    reasons = {family.gpu: family.reason for family in result.rejected}
    assert reasons == {"l4-24gb": "does_not_fit", "h100-sxm-80gb": "failed"}
    assert "RuntimeError: Attempting to broadcast" in next(f.detail for f in result.rejected if f.reason == "failed")
    out = io.StringIO()
    render_fit(result, Console(file=out, width=200))
    text = out.getvalue()
    assert "No configuration meets the target." not in text
    assert "kvplan failed on 1 family" in text and "a bug in kvplan" in text


def test_the_workloads_engine_settings_stand_in_for_what_the_command_line_leaves_out(tmp_path):
    # mix()'s engine: max_num_seqs 8, max_num_batched_tokens 256, max_model_len 1024
    workload = parse_workload(mix(), None, "w.json")
    request = FitRequest(model=LLAMA, space=SearchSpace(gpus=("l4-24gb",)).with_values(max_num_seqs=(4, 16)),
                         workload=workload)
    space = _with_workload_defaults(request).space
    assert space.values("max_num_seqs") == (4, 16)              # given: the command line's
    assert space.values("max_num_batched_tokens") == (256,) and space.values("max_model_len") == (1024,)
    alone = replace(request, workload=None)
    assert _with_workload_defaults(alone) == alone
    def planned(**engine):
        document = mix(engine={"model": LLAMA, **engine})
        return _with_workload_defaults(replace(request, workload=parse_workload(document, tmp_path, "w.json")))

    chosen = planned(gpu_memory_utilization=0.8, mamba_ssm_cache_dtype="float32")
    assert chosen.space.values("gpu_memory_utilization") == (0.8,)
    assert chosen.fixed.mamba_ssm_cache_dtype == "float32"
    assert _memory_note(chosen) is None
    # the KV memory is one GPU's: each GPU fit tries is sized itself, and a note says so
    sized = planned(kv_cache_memory="3.5GiB")
    assert sized.space.values("kv_cache_memory_bytes") == () and sized.space.values("gpu_memory_utilization") == (None,)
    assert _memory_note(sized) == ("the workload's engine.kv_cache_memory (3.5 GiB) is one GPU's KV memory: fit "
                                   "sizes each GPU's own; give --kv-cache-memory to try it")
    utilizations = replace(sized, space=sized.space.with_values(gpu_memory_utilization=(0.9,)))
    assert _memory_note(utilizations) is None
