"""`run_profile` end to end on the tiny model: vLLM's order and arithmetic, every backend's
record, the refusals that are findings (exit 1), and vLLM's own sizing numbers."""

from __future__ import annotations

import io
import math
from dataclasses import replace
from types import SimpleNamespace

import pytest
from rich.console import Console

import kvplan.measure.cuda as cuda_module
import kvplan.measure.fake as fake_module
import kvplan.measure.nvml as nvml_module
from kvplan.errors import KvplanError
from kvplan.measure.backend import SlotCheck
from kvplan.measure.nvml import NvmlReport
from kvplan.report.profile_console import render_profile
from kvplan.report.profile_json import profile_record
from kvplan.semantics.releases import VLLM_0_17_1
from kvplan.units import cdiv
from kvplan.usecases.plan import PlanRequest
from kvplan.usecases.profile import ProfileRequest, choose_backend, run_profile
from tests.references import sampler_peak_bytes

MIB = 1 << 20


def options(model, **knobs) -> ProfileRequest:
    profile_knobs = {k: knobs.pop(k) for k in list(knobs) if k in ProfileRequest.__dataclass_fields__}
    request = PlanRequest.of(model=str(model), **{"release": VLLM_0_17_1, **knobs})
    return ProfileRequest(plan=request, **profile_knobs)


def test_auto_picks_cuda_only_when_usable():
    assert choose_backend("auto", lambda: False) == "fake"
    assert choose_backend("auto", lambda: True) == "cuda"
    assert choose_backend("cpu", lambda: True) == "cpu"
    with pytest.raises(KvplanError, match="--backend 'gpu'"):
        choose_backend("gpu", lambda: False)


def test_fake_profile_follows_vllms_arithmetic(tiny_config_only_dir):
    result = run_profile(options(tiny_config_only_dir, backend="fake", gpu_memory_bytes=64 * MIB))
    record = profile_record(result)
    assert result.fits and record["predicted"] and record["backend"] == "fake"
    assert record["requested_bytes"] == math.ceil(64 * MIB * 0.9)
    assert record["non_kv_bytes"] == record["weights_bytes"] + record["activation_peak_bytes"]
    assert record["available_kv_bytes"] == record["requested_bytes"] - record["non_kv_bytes"]
    # page 16 tokens x 2 heads x (16 + 16) x 2 bytes, two layers in one group
    assert record["page_size_bytes"] == 2048
    assert record["num_blocks"] == record["available_kv_bytes"] // 2048 // 2
    assert record["kv_cache_bytes"] == 2 * 2048 * record["num_blocks"]
    # a GPU under 70 GiB: vllm serve's 2048 batched tokens over 256 requests
    assert record["profile_run"]["num_tokens"] == 2048 and record["profile_run"]["num_reqs"] == 256
    sampler = sampler_peak_bytes(2048, 256, 64, 2, result.activations.sampler)
    assert record["activation_peak_bytes"] >= sampler
    assert record["plan"]["num_blocks"] == record["num_blocks"]
    tokens = record["num_blocks"] * 16
    concurrency = record["num_blocks"] / cdiv(4096, 16)
    assert record["vllm_log"][-2:] == [
        f"GPU KV cache size: {tokens:,} tokens",
        f"Maximum concurrency for 4,096 tokens per request: {concurrency:.2f}x",
    ]
    assert any(line.startswith("Available KV cache memory: ") for line in record["vllm_log"])
    allocation = record["allocation"]
    assert allocation["device"] == "meta" and not allocation["real"]
    assert allocation["slot_mapping_check"]["passed"]
    assert allocation["layers"][0]["shapes"] == [[2, record["num_blocks"], 16, 2, 16]]
    assert any("non-torch memory" in warning for warning in record["warnings"])


def test_cpu_profile_loads_safetensors_and_really_allocates(tiny_model_dir):
    fake = run_profile(options(tiny_model_dir, backend="fake", gpu_memory_bytes=64 * MIB))
    cpu = run_profile(options(tiny_model_dir, backend="cpu", gpu_memory_bytes=64 * MIB, load_format="auto"))
    assert cpu.fits and not cpu.predicted
    assert cpu.weights.weights_bytes == fake.weights.weights_bytes
    assert abs(cpu.activations.activation_peak_bytes - fake.activations.activation_peak_bytes) <= (
        0.01 * fake.activations.activation_peak_bytes
    )
    allocation = cpu.allocation
    assert allocation.real and allocation.device == "cpu"
    assert allocation.pool_bytes == sum(t.size for t in cpu.plan.kv_config.kv_cache_tensors)
    assert allocation.check.passed and allocation.check_pool_blocks == cpu.plan.num_blocks


def test_kv_cache_memory_reproduces_vllms_worked_example():
    # docs/vllm/kv-semantics.md §2.6: Qwen2-0.5B, 25,938,100,224 bytes -> 131,928 blocks
    result = run_profile(options(
        "Qwen/Qwen2-0.5B-Instruct", backend="fake", gpu="h100-sxm-80gb", kv_cache_memory_bytes=25_938_100_224,
        allocate=False,
    ))
    record = profile_record(result)
    assert record["available_kv_bytes"] == 25_938_100_224 and record["kv_cache_memory_given"]
    assert record["num_blocks"] == 131_928 and record["allocation"] is None
    assert "GPU KV cache size: 2,110,848 tokens" in record["vllm_log"]
    assert "Maximum concurrency for 32,768 tokens per request: 64.42x" in record["vllm_log"]
    assert any("as specified by kv_cache_memory_bytes config" in line for line in record["vllm_log"])
    assert record["target"]["kv_cache_memory_bytes"] == 402_653_184
    # vLLM suggests a --kv-cache-memory only after profiling memory, never when it was given
    assert record["target"]["vllm_suggestion"] is None


def test_weights_above_the_budget_is_vllms_no_memory_finding(tiny_config_only_dir):
    result = run_profile(options(tiny_config_only_dir, backend="fake", gpu_memory_bytes=2 * MIB))
    assert not result.fits and result.allocation is None
    assert result.finding.startswith("No available memory for the cache blocks.")
    assert profile_record(result)["largest_max_model_len"] == 0
    # vLLM raised before `compile_or_warm_up_model`, which logs the suggestion
    assert result.target.suggestion is None and result.target.kv_cache_memory_bytes > 0


def test_too_long_max_model_len_is_a_finding_with_the_fitting_length(tiny_config_only_dir):
    # one 4096-token request needs 256 blocks x 2 layers x 2048 bytes = 1 MiB
    result = run_profile(options(tiny_config_only_dir, backend="fake", gpu_memory_bytes=64 * MIB,
                                 kv_cache_memory_bytes=MIB // 2))
    assert not result.fits
    assert "To serve at least one request with the models's max seq len (4096)" in result.finding
    assert "the estimated maximum model length is 2048" in result.finding
    assert result.target.largest_max_model_len == 2048


class RefusingCuda:
    """A GPU with 10 GiB of 80 GiB free: vLLM refuses to start at utilisation 0.9."""

    def is_available(self):
        return True

    def device_count(self):
        return 1

    def set_device(self, device):
        pass

    def get_device_properties(self, device):
        return SimpleNamespace(name="NVIDIA H100 80GB HBM3", multi_processor_count=132)

    def mem_get_info(self, device):
        return 10 << 30, 85_045_477_376

    def memory_reserved(self, device):
        return 0

    def empty_cache(self):
        pass


def test_too_little_free_memory_at_start_is_vllms_refusal(monkeypatch, tiny_config_only_dir):
    fake = RefusingCuda()
    monkeypatch.setattr(cuda_module, "cuda_usable", lambda cuda=None: True)
    real_backend = cuda_module.CudaBackend
    monkeypatch.setattr(cuda_module, "CudaBackend", lambda index: real_backend(index, cuda=fake, tensor_device="cpu"))
    monkeypatch.setattr(nvml_module, "query_nvml", lambda index: NvmlReport(None, "no NVML in tests"))
    result = run_profile(options(tiny_config_only_dir))
    assert result.backend == "cuda" and not result.fits
    assert result.finding.startswith("Free memory on device cuda:0 (10.0/79.2 GiB) on startup is less than desired")
    assert result.weights is None and result.plan is None
    record = profile_record(result)
    assert record["plan"] is None and record["error"] == result.finding
    assert record["nvml"] == {"available": False, "reason": "no NVML in tests"}
    screen = Console(file=io.StringIO(), width=200)
    render_profile(result, console=screen)
    assert "Finding: Free memory on device cuda:0" in screen.file.getvalue()
    # the catalog entry was found by the device's name: H100 batch defaults
    assert record["profile_run"]["num_tokens"] == 8192


@pytest.mark.parametrize(
    ("knobs", "words"),
    [
        ({"gpu_memory_utilization": 1.5}, r"\(0, 1\]"),
        ({"load_format": "pt"}, "--load-format 'pt'"),
        ({"non_torch_bytes": -1}, "--non-torch-bytes must be"),
        ({"gpu": "h900"}, "unknown GPU"),
    ],
)
def test_bad_input_is_one_clear_error(tiny_config_only_dir, knobs, words):
    with pytest.raises(KvplanError, match=words):
        run_profile(options(tiny_config_only_dir, backend="fake", **knobs))


@pytest.mark.parametrize("parallel", [{"tensor_parallel_size": 2}, {"pipeline_parallel_size": 2}])
def test_the_cpu_backend_measures_one_device_and_refuses_a_sharded_model(tiny_config_only_dir, parallel):
    with pytest.raises(KvplanError, match=r"the cpu backend measures one device .* use --backend fake"):
        run_profile(options(tiny_config_only_dir, backend="cpu", **parallel))


def test_given_cuda_graph_bytes_are_checked_against_the_headroom(tiny_config_only_dir):
    base = options(tiny_config_only_dir, backend="fake", gpu_memory_bytes=64 * MIB, allocate=False)
    roomy = run_profile(replace(base, cuda_graph_bytes=MIB, cuda_context_bytes=MIB))
    assert roomy.outside.fits is True
    tight = run_profile(replace(base, cuda_graph_bytes=8 * MIB))
    assert tight.outside.fits is False
    assert any("do not fit" in warning for warning in tight.warnings)
    assert tight.target.suggestion.to_requested_limit == (
        tight.budget.requested_bytes - tight.budget.non_kv_bytes - 8 * MIB - 150 * MIB
    )


def test_a_failed_round_trip_is_a_finding(monkeypatch, tiny_config_only_dir):
    failed = SlotCheck(False, 2, 40, (1, 2, 3), (16,), True, False, True, True)
    monkeypatch.setattr(fake_module, "slot_mapping_check", lambda allocation: failed)
    result = run_profile(options(tiny_config_only_dir, backend="fake", gpu_memory_bytes=64 * MIB))
    assert not result.fits and result.plan.fits
    assert result.finding.startswith("the KV tensors failed the slot-mapping round trip")


def test_a_catalog_non_torch_figure_is_used_when_the_gpu_has_one(monkeypatch, tiny_config_only_dir):
    import kvplan.usecases.plan as plan_module
    from kvplan.gpus.catalog import get_gpu

    l4 = replace(get_gpu("l4-24gb"), non_torch_bytes=3 * MIB)
    monkeypatch.setattr(plan_module, "get_gpu", lambda key: l4)
    result = run_profile(options(tiny_config_only_dir, backend="fake", gpu="l4-24gb"))
    record = profile_record(result)
    assert record["non_torch_bytes"] == 3 * MIB
    assert record["non_kv_bytes"] == record["weights_bytes"] + record["activation_peak_bytes"] + 3 * MIB
    assert not any("taken as 0" in warning for warning in record["warnings"])
