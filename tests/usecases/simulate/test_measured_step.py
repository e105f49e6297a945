"""The step priced from measured kernels (`--step-time kernels`): what it asks the kernel tables
for each kind of step, what it caches, how the engine core's CPU work is added, and the fall back
to the roofline where the tables cannot price the setup."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.measure.kernel_tables import SYSTEMS, KernelQuery, KernelsUnavailable, open_tables
from kvplan.usecases.simulate.engine_source import ModelFacts
from kvplan.usecases.simulate.measured_step import KernelStepTime, grid_step, on_grid
from kvplan.usecases.simulate.timing import (
    AUTO_KERNEL_GPUS,
    DEFAULT_FACTORS,
    ComputeShape,
    KernelFacts,
    RooflineStepTime,
    StepLoad,
    choose_step_time,
)
from kvplan.usecases.simulate.workload import TimingSpec

REPO = Path(__file__).resolve().parents[3]
QWEN3_06B = REPO / "tests" / "data" / "bench" / "models" / "Qwen--Qwen3-0.6B" / "config.json"


class Tables:
    """Kernel tables with linear prices, counting every question."""

    source = "test tables"

    def __init__(self) -> None:
        self.asked: list[tuple] = []

    def token_ops_ms(self, tokens: int) -> float:
        self.asked.append(("tokens", tokens))
        return 1.0 + tokens / 1000

    def logits_ms(self, requests: int) -> float:
        self.asked.append(("logits", requests))
        return 0.1

    def decode_attention_ms(self, batch: int, context: int) -> float:
        self.asked.append(("decode", batch, context))
        return batch * context / 100_000

    def prefill_attention_ms(self, batch: int, tokens: int, prefix: int) -> float:
        self.asked.append(("prefill", batch, tokens, prefix))
        return 0.5 * batch


def test_a_decode_step_prices_its_tokens_rows_and_decode_attention():
    tables = Tables()
    model = KernelStepTime(tables, weight_format="bf16", overlapped=False)   # type: ignore[arg-type]
    # 8 decodes with 1,024 tokens of context each (a grid point: no interpolation)
    seconds = model.seconds(StepLoad(8, 8 * 1024, 8, 8 * 1024, 8, 8 * 1024))
    gpu_ms = (1.0 + 8 / 1000) + 0.1 + 8 * 1024 / 100_000
    cpu_ms = DEFAULT_FACTORS.step_ms + 8 * DEFAULT_FACTORS.request_ms
    assert seconds == pytest.approx((gpu_ms + cpu_ms) / 1e3)
    assert not [q for q in tables.asked if q[0] == "prefill"]


def test_a_prefill_chunk_is_priced_by_its_tokens_and_prefix():
    tables = Tables()
    model = KernelStepTime(tables, weight_format="bf16")   # type: ignore[arg-type]
    # one chunk of 512 tokens after 1,024 computed ones, next to 4 decodes of 256 tokens of context
    context = 1024 + 512 + 4 * 256
    model.seconds(StepLoad(516, context, 5, None, 4, 4 * 256))
    assert ("prefill", 1, 512, 1024) in tables.asked
    # 516 tokens: between the grid points 512 and 544
    assert ("tokens", 512) in tables.asked and ("tokens", 544) in tables.asked and ("logits", 5) in tables.asked


def test_token_prices_are_exact_for_decode_batches_and_interpolated_above():
    tables = Tables()
    model = KernelStepTime(tables, weight_format="bf16")   # type: ignore[arg-type]
    assert model._token_ms(37) == pytest.approx(1.037) and ("tokens", 37) in tables.asked
    # linear prices: the interpolation between grid points is exact
    assert model._token_ms(1000) == pytest.approx(2.0) and ("tokens", 1000) not in tables.asked


def test_the_mean_context_is_interpolated_between_grid_points():
    tables = Tables()
    model = KernelStepTime(tables, weight_format="bf16", overlapped=False)   # type: ignore[arg-type]
    low, high = model.seconds(StepLoad(1, 1024, 1, None, 1, 1024)), model.seconds(StepLoad(1, 1088, 1, None, 1, 1088))
    middle = model.seconds(StepLoad(1, 1056, 1, None, 1, 1056))
    assert grid_step(1056) == 64 and on_grid(1050) == 1024
    assert middle == pytest.approx((low + high) / 2)


def test_prices_are_cached_by_the_numbers_they_depend_on():
    tables = Tables()
    model = KernelStepTime(tables, weight_format="bf16")   # type: ignore[arg-type]
    for _ in range(100):
        model.seconds(StepLoad(32, 32 * 700, 32, None, 32, 32 * 700))
    assert len(tables.asked) == len(set(tables.asked)) <= 4


def test_async_scheduling_hides_the_per_request_cpu_work_under_the_kernels():
    # the kernels (3.8 ms) outlast the CPU work of 64 requests (1.9 ms)
    load = StepLoad(64, 64 * 4096, 64, None, 64, 64 * 4096)
    overlapped = KernelStepTime(Tables(), weight_format="bf16")   # type: ignore[arg-type]
    serial = KernelStepTime(Tables(), weight_format="bf16", overlapped=False)   # type: ignore[arg-type]
    assert serial.seconds(load) - overlapped.seconds(load) == pytest.approx(64 * DEFAULT_FACTORS.request_ms / 1e3)
    eager = KernelStepTime(Tables(), weight_format="bf16", cuda_graphs=False, num_layers=28)   # type: ignore[arg-type]
    assert eager.seconds(load) - overlapped.seconds(load) == pytest.approx(28 * DEFAULT_FACTORS.eager_layer_ms / 1e3)
    assert "CUDA graphs off" in eager.method and "test tables" in eager.method


SHAPE = ComputeShape(matmul_params=600_000_000, streamed_bytes=1_200_000_000, num_layers=28, attention_layers=28,
                     attention_heads=16, head_size=128, weight_format="bf16")


def _facts(gpu: str, weight_format: str = "bf16") -> ModelFacts:
    config = json.dumps(json.loads(QWEN3_06B.read_text()), sort_keys=True)
    return ModelFacts(model="Qwen/Qwen3-0.6B", gpu=gpu, weights_bytes=1_200_000_000, kv_bytes_per_token=114_688,
                      compute=ComputeShape(**{**SHAPE.__dict__, "weight_format": weight_format}),
                      kernels=KernelFacts(model_config=config))


def test_an_uncovered_gpu_keeps_the_roofline_and_says_why_when_kernels_were_asked_for():
    model, notes = choose_step_time(TimingSpec(), _facts("l4-24gb"), step_time_ms=None, gpu=None, method="kernels")
    assert isinstance(model, RooflineStepTime)
    assert any("l4-24gb" in note and "roofline" in note for note in notes)
    # auto says nothing: the roofline is its choice there, and the method label says which
    model, notes = choose_step_time(TimingSpec(), _facts("l4-24gb"), step_time_ms=None, gpu=None, method="auto")
    assert isinstance(model, RooflineStepTime) and not notes


def test_an_unknown_method_is_refused():
    from kvplan.errors import KvplanError

    with pytest.raises(KvplanError, match="--step-time"):
        choose_step_time(TimingSpec(), _facts("l4-24gb"), step_time_ms=None, gpu=None, method="fast")


def test_auto_names_only_covered_gpus():
    assert set(AUTO_KERNEL_GPUS) <= set(SYSTEMS)


def test_a_format_the_tables_cannot_price_is_refused_with_one_line():
    query = KernelQuery(model_config="{}", gpu="h100-sxm-80gb", weight_format="int2")
    with pytest.raises(KernelsUnavailable, match="int2"):
        open_tables.__wrapped__(query)
    with pytest.raises(KernelsUnavailable, match="l4-24gb"):
        open_tables.__wrapped__(KernelQuery(model_config="{}", gpu="l4-24gb"))


# the real database (the `perf` extra)


def test_the_database_prices_qwen3_on_an_h100():
    pytest.importorskip("aiconfigurator_core")
    model, notes = choose_step_time(TimingSpec(), _facts("h100-sxm-80gb"), step_time_ms=None, gpu=None,
                                    method="kernels")
    assert isinstance(model, KernelStepTime), notes
    assert "h100_sxm" in model.method and "vllm" in model.method and "aiconfigurator-core" in model.method
    decode = [model.seconds(StepLoad(b, b * 600, b, None, b, b * 600)) for b in (1, 16, 64)]
    assert decode == sorted(decode) and 1e-3 < decode[0] < decode[-1] < 20e-3
    prefill = model.seconds(StepLoad(2048, 2048, 1, 2048 * 2049 // 2, 0, 0))
    assert prefill > model.seconds(StepLoad(512, 512, 1, 512 * 513 // 2, 0, 0))


def test_simulate_with_measured_kernels_says_so_and_imports_no_torch(tmp_path):
    pytest.importorskip("aiconfigurator_core")
    from tests.no_torch import kvplan_process

    workload = {
        "schema_version": 1, "seed": 3,
        "engine": {"model": str(QWEN3_06B.parent), "gpu": "h100-sxm-80gb", "kv_cache_memory": "8GiB",
                   "max_model_len": 4096},
        "classes": [{"name": "chat", "prompt_tokens": {"dist": "uniform", "min": 100, "max": 2000},
                     "output_tokens": {"dist": "uniform", "min": 10, "max": 200}}],
        "arrival": {"process": "poisson", "rate": 20, "count": 200},
    }
    path = tmp_path / "w.json"
    path.write_text(json.dumps(workload))
    done = kvplan_process("simulate", str(path), "--step-time", "kernels", "--json", cwd=REPO, timeout=600)
    assert done.returncode == 0, done.stderr
    assert done.stderr.strip().splitlines()[-1] == "HEAVY="
    timing = json.loads(done.stdout)["timing"]
    assert timing["model"] == "measured_kernels" and timing["estimate"] is True
    assert "h100_sxm" in timing["database"] and "measured kernels" in timing["method"]


def test_fit_says_its_answers_were_priced_by_measured_kernels(tmp_path):
    pytest.importorskip("aiconfigurator_core")
    from tests.no_torch import kvplan_process

    workload = {
        "schema_version": 1, "seed": 3, "engine": {"model": str(QWEN3_06B.parent), "max_model_len": 4096},
        "classes": [{"name": "chat", "prompt_tokens": {"dist": "uniform", "min": 100, "max": 2000},
                     "output_tokens": {"dist": "uniform", "min": 10, "max": 200}}],
        "arrival": {"process": "poisson", "rate": 20, "count": 200},
    }
    path = tmp_path / "w.json"
    path.write_text(json.dumps(workload))
    done = kvplan_process("fit", "--workload", str(path), "--gpus", "h100-sxm-80gb,l4-24gb", "--kv-cache-memory",
                          "8GiB", "--slo", "tpot_p95=60ms", "--step-time", "kernels", "--workers", "1", "--json",
                          cwd=REPO, timeout=600)
    assert done.returncode in (0, 1), done.stderr
    methods = json.loads(done.stdout)["estimate_methods"]
    # the H100 from measured kernels; the L4, which the database does not cover, from the roofline
    assert any("measured kernels" in m and "h100_sxm" in m for m in methods)
    assert any(m.startswith("roofline with efficiency factors on l4-24gb") for m in methods)
