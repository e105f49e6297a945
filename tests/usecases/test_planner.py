"""The planner gives exactly what `plan_for_device` gives, with one profile run per distinct non-KV
memory instead of one per configuration."""

from __future__ import annotations

import pytest

from kvplan.errors import KvplanError
from kvplan.semantics.releases import VLLM_0_33_0, VLLM_0_34_0
from kvplan.usecases.plan import PlanRequest
from kvplan.usecases.planner import Planner
from kvplan.usecases.profile import plan_for_device

MODEL = "Qwen/Qwen2-0.5B-Instruct"


@pytest.mark.slow
@pytest.mark.parametrize("release", [VLLM_0_33_0, VLLM_0_34_0], ids=lambda release: release.version)
def test_plans_equal_plan_for_device_with_one_profile_run_per_batch(release):
    # 0.33.0 sizes from the estimate; 0.34.0 on the measured path (docs/vllm/changes-0.34.md §1.4)
    base = PlanRequest.of(model=MODEL, gpu="l4-24gb", release=release)
    assert base.sizing_path.measured is (release is VLLM_0_34_0)
    requests = [
        base,
        base.with_args(gpu_memory_utilization=0.5, kv_cache_dtype="fp8"),
        base.with_args(gpu_memory_utilization=0.75, max_model_len=4096, block_size=32),
        base.with_args(gpu_memory_utilization=0.06),                        # too little: does not fit
        base.with_args(max_num_seqs=64),                                     # another profile batch
        base.with_args(max_num_seqs=64, gpu_memory_utilization=0.8, enable_prefix_caching=False),
        base.with_args(tensor_parallel_size=2),                              # a rank's shard
        base.with_args(tensor_parallel_size=2, gpu_memory_utilization=0.7, kv_cache_dtype="fp8"),
        base.with_args(pipeline_parallel_size=2, gpu_memory_utilization=0.8),   # two stages, two budgets
        base.with_args(pipeline_parallel_size=2, gpu_memory_utilization=0.6),
    ]
    planner = Planner()
    for request in requests:
        mine, theirs = planner.plan(request), plan_for_device(request)
        assert mine.summary == theirs.summary, request
        assert (mine.kv_cache_memory_bytes, mine.memory_source, mine.warnings) == \
            (theirs.kv_cache_memory_bytes, theirs.memory_source, theirs.warnings)
        assert mine.sizing == theirs.sizing
    assert not planner.plan(requests[3]).fits
    assert planner.profile_runs == 4


def test_a_given_kv_memory_needs_no_profile_run():
    planner = Planner()
    result = planner.plan(PlanRequest.of(model=MODEL, gpu="l4-24gb", kv_cache_memory_bytes=2 << 30))
    assert result.fits and result.kv_cache_memory_bytes == 2 << 30
    assert planner.profile_runs == 0


def test_a_refusal_is_kept_and_given_again(monkeypatch):
    import kvplan.usecases.profile as profile

    calls = []

    def refuse(options):
        calls.append(options)
        raise KvplanError("this GPU is refused")

    monkeypatch.setattr(profile, "run_profile", refuse)
    planner = Planner()
    for utilization in (0.5, 0.9):
        with pytest.raises(KvplanError, match="this GPU is refused"):
            planner.plan(PlanRequest.of(model=MODEL, gpu="l4-24gb", gpu_memory_utilization=utilization))
    assert len(calls) == 1 and planner.profile_runs == 0
