"""vLLM 0.34.0's measured sizing end to end on the fake backend: the path and why, every term of the
prediction as docs/vllm/changes-0.34.md section 1.4 adds them up, the block count, and the lines vLLM
logs in its order. Each test names its release."""

from __future__ import annotations

import json

import pytest

from kvplan.report.plan_json import plan_record
from kvplan.semantics.memory.measured import blocks_within, measured_kv_bytes
from kvplan.semantics.releases import VLLM_0_33_0, VLLM_0_34_0
from kvplan.usecases.plan import PlanRequest
from kvplan.usecases.profile import ProfileRequest, plan_for_device, run_profile

pytest.importorskip("torch")
QWEN = "Qwen/Qwen2-0.5B-Instruct"


@pytest.fixture(scope="module")
def measured():
    request = PlanRequest.of(model=QWEN, gpu="h100-sxm-80gb", max_model_len=8192, release=VLLM_0_34_0)
    return run_profile(ProfileRequest(plan=request, backend="fake", allocate=False))


def test_the_measured_path_applies_by_default_on_0_34_0_with_utilization_1(measured):
    plan = measured.plan
    assert plan is not None and plan.sizing_path.measured and measured.options.plan.utilization == 1.0
    assert "on by default on CUDA" in plan.sizing_path.reason
    # the budget is the capacity: no CUDA-graph estimate taken from it
    budget = measured.budget
    assert budget.cuda_graph_budget_bytes == 0 and budget.cuda_graph_bytes > 0
    assert budget.available_kv_bytes == budget.requested_bytes - budget.non_kv_bytes


def test_every_term_adds_up_as_the_changes_document_says(measured):
    sizing, budget = measured.plan.measured, measured.budget
    terms = sizing.terms
    assert terms.init_free_bytes == measured.snapshot.free_bytes
    assert terms.resident_bytes == budget.total_consumed_bytes + budget.cuda_graph_bytes
    assert terms.committed_bytes == sizing.segments.footprint(1) == 24 * (2 << 20)   # 24 layers, one granule each
    assert terms.requested_bytes == budget.total_bytes                                # utilization 1.0
    assert terms.transient_peak_bytes == budget.transient_peak_bytes
    margin = max(1 << 30, int(terms.transient_peak_bytes * 0.75))
    assert sizing.kv_bytes == measured_kv_bytes(terms, VLLM_0_34_0) == max(
        min(terms.requested_bytes - terms.resident_bytes, terms.free_bytes + terms.committed_bytes - margin)
        - max(terms.transient_peak_bytes, terms.torch_reserve_growth_bytes), 0)
    assert sizing.num_blocks == blocks_within(sizing.kv_bytes, sizing.segments) == measured.plan.num_blocks
    assert sizing.num_blocks <= sizing.segments.capacity_blocks
    assert measured.plan.setup.layout.block_size == 64


def test_the_lines_follow_0_34_0s_order(measured):
    log = list(measured.vllm_log)
    available = next(i for i, line in enumerate(log) if line.startswith("Available KV cache memory"))
    after = next(i for i, line in enumerate(log) if line.startswith("Memory after warmup: "))
    capacity = next(i for i, line in enumerate(log) if line.startswith("GPU KV cache size: "))
    extended = next(i for i, line in enumerate(log) if line.startswith("Extended KV cache to "))
    assert available < after < capacity < extended == len(log) - 1
    assert not any(line.startswith("CUDA graph memory profiling is enabled") for line in log)
    assert log[extended].startswith(f"Extended KV cache to {measured.plan.num_blocks} blocks (")


def test_the_json_documents_name_the_path_only_where_the_release_has_two(measured):
    record = plan_record(measured.plan)
    assert record["kv_sizing"]["path"] == "measured_after_capture"
    assert record["kv_sizing"]["measured"]["num_blocks"] == measured.plan.num_blocks
    old = plan_for_device(PlanRequest.of(model=QWEN, kv_cache_memory_bytes=1 << 30, release=VLLM_0_33_0))
    assert "kv_sizing" not in plan_record(old)
    json.dumps(record)


@pytest.mark.parametrize(("knobs", "flag"), [
    ({"kv_cache_memory_bytes": 4 << 30}, "--kv-cache-memory"),
    ({"num_gpu_blocks_override": 4000}, "--num-gpu-blocks-override"),
    ({"enable_extensible_kv_cache": False}, "--no-enable-extensible-kv-cache"),
])
def test_the_flags_that_hand_sizing_back_to_0_33_0s_path(knobs, flag):
    request = PlanRequest.of(model=QWEN, gpu="h100-sxm-80gb", max_model_len=8192, release=VLLM_0_34_0, **knobs)
    assert not request.sizing_path.measured and flag in request.sizing_path.reason
    assert request.utilization == 0.92


def test_an_explicit_utilization_caps_the_measured_size(measured):
    request = PlanRequest.of(model=QWEN, gpu="h100-sxm-80gb", max_model_len=8192, release=VLLM_0_34_0,
                          gpu_memory_utilization=0.9)
    capped = run_profile(ProfileRequest(plan=request, backend="fake", allocate=False))
    assert capped.plan.sizing_path.measured and capped.plan.num_blocks < measured.plan.num_blocks
    assert any(line.startswith("gpu_memory_utilization=0.9 caps this instance at") for line in capped.vllm_log)


def test_the_documents_validate_against_the_published_schemas(measured):
    import jsonschema

    from kvplan.report.profile_json import profile_record
    from tests.docs.test_schemas import validator

    validator("plan").validate(json.loads(json.dumps(plan_record(measured.plan))))
    jsonschema.validate(json.loads(json.dumps(profile_record(measured))), json.loads(
        (__import__("pathlib").Path(__file__).resolve().parents[2] / "docs/schemas/profile.json").read_text()))
