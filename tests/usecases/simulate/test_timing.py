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
