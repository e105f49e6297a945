import dataclasses

import pytest

from kvplan.errors import KvplanError
from kvplan.gpus.catalog import get_gpu
from kvplan.usecases.simulate.engine_source import ModelFacts
from kvplan.usecases.simulate.timing import (
    DEFAULT_OVERHEAD_MS,
    CalibratedStepTime,
    ConstantStepTime,
    RooflineStepTime,
    StepLoad,
    calibrated,
    choose_step_time,
    roofline,
)
from kvplan.usecases.simulate.workload import TimingSpec

QWEN2_05B_WEIGHTS = 988_065_536  # bf16 parameters of Qwen2-0.5B-Instruct (494,032,768 x 2)
QWEN2_05B_KV_PER_TOKEN = 12_288  # 24 layers x 2 KV heads x 64 x 2 (K and V) x 2 bytes


def test_roofline_decode_is_bandwidth_bound():
    model = roofline(weights_bytes=QWEN2_05B_WEIGHTS, kv_bytes_per_token=QWEN2_05B_KV_PER_TOKEN,
                     bandwidth_gbps=3350, bf16_tflops=989, overhead_ms=2.0, gpu="h100-sxm-80gb")
    # 32 decoding requests with 1,000 tokens of context each
    load = StepLoad(num_tokens=32, context_tokens=32_000, num_requests=32)
    moved = QWEN2_05B_WEIGHTS + QWEN2_05B_KV_PER_TOKEN * (32_000 + 32)
    assert model.seconds(load) == pytest.approx(0.002 + moved / 3350e9)


def test_roofline_long_prefill_is_compute_bound():
    model = roofline(weights_bytes=QWEN2_05B_WEIGHTS, kv_bytes_per_token=QWEN2_05B_KV_PER_TOKEN,
                     bandwidth_gbps=3350, bf16_tflops=989, overhead_ms=0.0, gpu="h100-sxm-80gb")
    load = StepLoad(num_tokens=8192, context_tokens=8192, num_requests=1)
    flops = 2 * (QWEN2_05B_WEIGHTS / 2) * 8192
    assert model.seconds(load) == pytest.approx(flops / 989e12)
    assert model.seconds(StepLoad(0, 0, 0)) == 0.0


def test_calibration_interpolates_and_extrapolates():
    model = calibrated([(256, 12.0), (1, 6.0), (2048, 40.0)], "test")
    assert [t for t, _ in model.points] == [1, 256, 2048]
    assert model.seconds(StepLoad(1, 0, 1)) == pytest.approx(0.006)
    assert model.seconds(StepLoad(0, 0, 0)) == pytest.approx(0.006)
    assert model.seconds(StepLoad(1152, 0, 4)) == pytest.approx(0.026)
    assert model.seconds(StepLoad(4096, 0, 4)) == pytest.approx(0.040 + (0.028 / 1792) * 2048)


def test_precedence_command_line_then_file_then_profile_then_roofline():
    facts = ModelFacts(weights_bytes=QWEN2_05B_WEIGHTS, kv_bytes_per_token=QWEN2_05B_KV_PER_TOKEN,
                       gpu="a100-sxm-80gb", calibration=((1, 5.0), (512, 9.0)))
    cli, _ = choose_step_time(TimingSpec(step_time_ms=30), facts, step_time_ms=12.5, gpu=None)
    assert cli == ConstantStepTime(0.0125, "--step-time-ms")
    file, _ = choose_step_time(TimingSpec(step_time_ms=30), facts, step_time_ms=None, gpu=None)
    assert file == ConstantStepTime(0.03, "timing.step_time_ms")
    profile, _ = choose_step_time(TimingSpec(), facts, step_time_ms=None, gpu=None)
    assert profile == CalibratedStepTime(((1, 0.005), (512, 0.009)), "profile calibration")
    plain = ModelFacts(weights_bytes=QWEN2_05B_WEIGHTS, kv_bytes_per_token=QWEN2_05B_KV_PER_TOKEN, gpu="a100-sxm-80gb")
    model, notes = choose_step_time(TimingSpec(), plain, step_time_ms=None, gpu=None)
    a100 = get_gpu("a100-sxm-80gb")
    assert isinstance(model, RooflineStepTime) and model.gpu == "a100-sxm-80gb" and not notes
    assert model.bandwidth_bytes_per_s == a100.bandwidth_gbps * 1e9
    assert model.overhead_s == DEFAULT_OVERHEAD_MS / 1e3
    model, _ = choose_step_time(TimingSpec(), plain, step_time_ms=None, gpu="l4-24gb")
    assert model.gpu == "l4-24gb"


def test_roofline_defaults_to_the_default_gpu_with_a_note():
    facts = ModelFacts(weights_bytes=1, kv_bytes_per_token=1)
    model, notes = choose_step_time(TimingSpec(), facts, step_time_ms=None, gpu=None)
    assert model.gpu == "h100-sxm-80gb"
    assert "assuming h100-sxm-80gb" in notes[0]


def test_no_model_facts_means_no_time_model():
    assert choose_step_time(TimingSpec(), ModelFacts(), step_time_ms=None, gpu="l4-24gb") == (None, ())


def test_gpu_without_bandwidth_cannot_make_a_roofline():
    facts = ModelFacts(weights_bytes=1, kv_bytes_per_token=1)
    with pytest.raises(KvplanError, match="step-time-ms"):
        choose_step_time(TimingSpec(), facts, step_time_ms=None, gpu="h100-nvl-94gb")


def _shape(weight_format="bf16", streamed=QWEN2_05B_WEIGHTS):
    from kvplan.usecases.simulate.timing import ComputeShape

    return ComputeShape(matmul_params=QWEN2_05B_WEIGHTS // 2, streamed_bytes=streamed, num_layers=24,
                        attention_layers=24, attention_heads=14, head_size=64, weight_format=weight_format)


def test_factored_roofline_counts_fixed_costs_attention_and_running_requests():
    from kvplan.usecases.simulate.timing import DEFAULT_FACTORS as F
    from kvplan.usecases.simulate.timing import factored_roofline

    model = factored_roofline(shape=_shape(), kv_bytes_per_token=QWEN2_05B_KV_PER_TOKEN, bandwidth_gbps=300,
                              tflops=121, gpu="l4-24gb")
    one = StepLoad(num_tokens=1, context_tokens=300, num_requests=1)
    moved = QWEN2_05B_WEIGHTS + QWEN2_05B_KV_PER_TOKEN * 301
    fixed = (F.step_ms + 24 * F.layer_ms + F.request_ms) / 1e3
    assert model.seconds(one) == pytest.approx(fixed + moved / (300e9 * F.bandwidth_efficiency))
    # 31 more running requests cost their per-request share and their KV reads
    many = StepLoad(num_tokens=32, context_tokens=32 * 300, num_requests=32)
    assert model.seconds(many) > model.seconds(one) + 31 * F.request_ms / 1e3
    # a long prefill is compute-bound, and its attention pairs make it slower than its GEMMs alone
    prefill = StepLoad(num_tokens=16384, context_tokens=16384, num_requests=1, attention_pairs=16384 * 16385 // 2)
    gemm = 2 * (QWEN2_05B_WEIGHTS // 2) * 16384 / (121e12 * F.flops_efficiency)
    assert model.seconds(prefill) > fixed + gemm * 1.5
    assert "roofline with efficiency factors on l4-24gb" in model.method


def test_enforce_eager_costs_more_per_step_than_cuda_graphs():
    from kvplan.usecases.simulate.timing import factored_roofline

    kwargs = dict(shape=_shape(), kv_bytes_per_token=QWEN2_05B_KV_PER_TOKEN, bandwidth_gbps=300, tflops=121,
                  gpu="l4-24gb")
    graphs, eager = factored_roofline(**kwargs), factored_roofline(**kwargs, cuda_graphs=False)
    load = StepLoad(num_tokens=1, context_tokens=300, num_requests=1)
    assert eager.seconds(load) > graphs.seconds(load)
    assert "CUDA graphs off" in eager.method


def test_fp8_weights_run_at_the_fp8_peak_where_the_gpu_has_one():
    facts = ModelFacts(weights_bytes=QWEN2_05B_WEIGHTS // 2, kv_bytes_per_token=QWEN2_05B_KV_PER_TOKEN,
                       compute=_shape("fp8", QWEN2_05B_WEIGHTS // 2))
    h100, notes = choose_step_time(TimingSpec(), facts, step_time_ms=None, gpu="h100-sxm-80gb")
    assert h100.flops_per_s == pytest.approx(get_gpu("h100-sxm-80gb").fp8_tflops * 1e12 * 0.6) and not notes
    a100, notes = choose_step_time(TimingSpec(), facts, step_time_ms=None, gpu="a100-sxm-80gb")
    assert a100.flops_per_s == pytest.approx(312e12 * 0.6) and "no fp8 tensor-core peak" in notes[0]


def test_int4_checkpoints_stream_a_quarter_of_their_bf16_weights():
    from kvplan.usecases.plan import PlanRequest, plan
    from kvplan.usecases.simulate.compute_shape import compute_shape

    result = plan(PlanRequest.of(model="Qwen/Qwen2.5-7B-Instruct", kv_cache_memory_bytes=8 << 30))
    bf16, notes = compute_shape(result)
    assert bf16 is not None and bf16.weight_format == "bf16" and not notes
    setup = dataclasses.replace(result.setup, quantization="awq_marlin")
    awq, notes = compute_shape(dataclasses.replace(result, setup=setup))
    assert awq.weight_format == "int4" and not notes
    # the embeddings stay 16-bit; every linear weight is 4-bit plus its scales
    assert 0.25 < awq.streamed_bytes / bf16.streamed_bytes < 0.45
    odd, notes = compute_shape(dataclasses.replace(result, setup=dataclasses.replace(result.setup,
                                                                                     quantization="bitsandbytes")))
    assert odd.streamed_bytes == bf16.streamed_bytes and "cannot price 'bitsandbytes'" in notes[0]
