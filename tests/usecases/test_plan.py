"""`kvplan plan` end to end: catalog config -> reader -> specs -> sizing, against vLLM 0.17.1's own
numbers (the 40 cases in tests/data/sizing) and the golden vectors of the issue."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import replace
from functools import cache

import pytest

from kvplan.errors import ConfigRejected
from kvplan.report.plan_json import plan_record
from kvplan.semantics.releases import VLLM_0_17_1, VLLM_0_33_0, VLLM_0_34_0, Release
from kvplan.sources.installed import default_release
from kvplan.usecases.plan import PlanRequest, plan
from tests.conftest import DATA
from tests.uncountable import break_weight_count, model_dir

CASES_FILE = DATA / "sizing" / "vllm-0.17.1-cases.json"


@cache
def cases() -> list[dict]:
    return json.loads(CASES_FILE.read_text())["cases"]


def request_for(case: dict) -> PlanRequest:
    args = case["args"]
    return PlanRequest.of(
        model=case["model"], kv_cache_memory_bytes=args["kv_cache_memory_bytes"], block_size=args["block_size"],
        kv_cache_dtype=args["kv_cache_dtype"], tensor_parallel_size=args["tensor_parallel_size"],
        max_model_len=args["max_model_len"], max_num_batched_tokens=args["max_num_batched_tokens"],
        max_num_seqs=args["max_num_seqs"], with_weights=False, release=VLLM_0_17_1,
    )


@pytest.mark.parametrize("index", range(40))
def test_catalog_model_plans_like_vllm(index: int) -> None:
    case = cases()[index]
    expect = case["expect"]
    if not expect["ok"]:
        with pytest.raises(ConfigRejected) as rejected:
            plan(request_for(case))
        assert str(rejected.value) in expect["error"]
        return
    record = plan_record(plan(request_for(case)))
    assert record["fits"]
    assert record["num_blocks"] == expect["num_blocks"]
    assert [t["size"] for t in record["kv_cache_tensors"]] == expect["kv_cache_tensors"]
    assert [len(t["shared_by"]) for t in record["kv_cache_tensors"]] == expect["kv_cache_tensor_shared_by"]
    assert record["kv_cache_tensors_total_bytes"] == expect["kv_cache_tensors_total_bytes"]
    assert record["max_concurrency"] == pytest.approx(expect["max_concurrency"], rel=1e-12)
    assert record["gpu_kv_cache_tokens"] == expect["gpu_kv_cache_tokens"]
    assert record["vllm_log"][-len(expect["vllm_log"]):] == expect["vllm_log"]
    assert record["block_size"] == expect["effective_block_size"]
    assert record["kv_dtype"] == expect["kv_dtype"]
    assert record["dtype"] == expect["model_dtype"]
    assert record["needs_kv_cache_zeroing"] == expect["needs_kv_cache_zeroing"]
    assert record["bytes_needed_for_one_max_len_request"] == expect["bytes_needed_for_one_max_len_request"]
    assert [g["num_layers"] for g in record["kv_cache_groups"]] == [g["num_layers"] for g in expect["groups"]]
    assert [g["spec"]["type"] for g in record["kv_cache_groups"]] == [g["type"] for g in expect["groups"]]
    if "enable_prefix_caching" in expect:
        assert record["enable_prefix_caching"] == expect["enable_prefix_caching"]


@cache
def release_cases(version: str) -> list[dict]:
    return json.loads((DATA / "sizing" / f"vllm-{version}-cases.json").read_text())["cases"]


@pytest.mark.parametrize("release", [VLLM_0_33_0, VLLM_0_34_0], ids=lambda release: release.version)
@pytest.mark.parametrize("index", range(38))
def test_catalog_model_plans_like_vllm_0_33_0_and_0_34_0(index: int, release: Release) -> None:
    """`kvplan plan` end to end (catalog config, reader, settings, specs, sizing) against each release's
    own planning: one backing allocation, the merged capacity line, the null block held back. The
    0.34.0 cases give the KV memory, which keeps its extensible KV cache off: 0.33.0's path decides."""
    case = release_cases(release.version)[index]
    expect = case["expect"]
    request = replace(request_for(case), release=release)
    if not expect["ok"]:
        with pytest.raises(ConfigRejected) as rejected:
            plan(request)
        assert str(rejected.value) in expect["error"]
        return
    record = plan_record(plan(request))
    assert record["fits"] and record["vllm_semantics"] == release.version
    if "resolved_gpu_memory_utilization" in expect:
        assert expect["enable_extensible_kv_cache"] is False and not request.sizing_path.measured
    assert record["num_blocks"] == expect["num_blocks"]
    assert [t["size"] for t in record["kv_cache_tensors"]] == expect["kv_cache_tensors"]
    assert [len(t["shared_by"]) for t in record["kv_cache_tensors"]] == expect["kv_cache_tensor_shared_by"]
    assert [{"layers": len(t["shared_by"]), "layer_stride": t["layer_stride"], "block_stride": t["block_stride"],
             "offset": t["offset"]} for t in record["kv_cache_tensors"]] == expect["kv_cache_tensor_layout"]
    assert record["kv_cache_tensors_total_bytes"] == expect["kv_cache_tensors_total_bytes"]
    assert record["kv_cache_tensor_layout"] == "shared_backing"
    assert record["max_concurrency"] == pytest.approx(expect["max_concurrency"], rel=1e-12)
    assert record["gpu_kv_cache_tokens"] == expect["gpu_kv_cache_tokens"]
    assert record["vllm_log"][-1] == expect["vllm_log"][-1]
    assert record["block_size"] == expect["effective_block_size"]
    assert record["bytes_needed_for_one_max_len_request"] == expect["bytes_needed_for_one_max_len_request"]
    assert [g["num_layers"] for g in record["kv_cache_groups"]] == [g["num_layers"] for g in expect["groups"]]
    if "enable_prefix_caching" in expect and expect["enable_prefix_caching"] is not None:
        assert record["enable_prefix_caching"] == expect["enable_prefix_caching"]


def test_the_0_33_0_refusals_hold_back_one_block_and_read_as_0_33_0() -> None:
    done = run_cli(QWEN, "--kv-cache-memory", "300MiB", "--json", "--vllm-version", "0.33.0")
    assert done.returncode == 1
    record = json.loads(done.stdout)
    # 1,600 blocks of 196,608 B, one held back: 1,599 x 16 tokens
    assert record["estimated_max_model_len"] == 25584
    assert record["error"].startswith("To serve at least one request with the model's max seq len (32768)")
    assert "(which also controls CPU memory on the CPU backend)" in record["error"]
    fitted = plan(PlanRequest.of(model="Qwen/Qwen2-0.5B-Instruct", kv_cache_memory_bytes=300 * 2**20,
                              max_model_len=-1, with_weights=False, release=VLLM_0_33_0))
    assert fitted.max_model_len == 25584
    assert "Auto-fit max_model_len: reduced from 32768 to 25584 to fit in available KV cache memory (0.29 GiB GPU)" \
        in plan_record(fitted)["vllm_log"]


def test_excluded_tensor_parallel_sizes_are_refused_like_vllm() -> None:
    models = json.loads(CASES_FILE.read_text())["models"]
    refused = 0
    for model_id, model in models.items():
        for excluded in model.get("excluded", []):
            request = PlanRequest.of(
                model=model_id, kv_cache_memory_bytes=1 << 34, tensor_parallel_size=excluded["tensor_parallel_size"],
                kv_cache_dtype=excluded["kv_cache_dtype"], max_model_len=excluded["max_model_len"], with_weights=False,
            )
            with pytest.raises(ConfigRejected) as rejected:
                plan(request)
            assert str(rejected.value) in excluded["why"]
            refused += 1
    assert refused >= 8


QWEN = "Qwen/Qwen2-0.5B-Instruct"


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "kvplan", "plan", *args], capture_output=True, text=True)


def test_golden_qwen2_record_and_one_byte_less() -> None:
    done = run_cli("--model", "Qwen/Qwen2-0.5B-Instruct", "--kv-cache-memory", "25938100224", "--json",
                   "--vllm-version", "0.17.1")
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout)
    assert record["schema_version"] == 1
    assert record["page_size_bytes"] == 8192
    assert record["num_blocks"] == 131928
    assert [t["size"] for t in record["kv_cache_tensors"]] == [1_080_754_176] * 24
    assert record["kv_cache_groups"][0]["tensor_shape"] == [2, 131928, 16, 2, 64]
    assert record["gpu_kv_cache_tokens"] == 2_110_848
    assert "Maximum concurrency for 32,768 tokens per request: 64.42x" in record["vllm_log"]
    assert record["kv_bytes_per_token"] == 12288
    assert record["weights_bytes"] == 988_065_536
    less = plan(PlanRequest.of(model="Qwen/Qwen2-0.5B-Instruct", kv_cache_memory_bytes=25938100223, with_weights=False,
                            release=VLLM_0_17_1))
    assert less.num_blocks == 131927


def test_fp8_kv_cache_halves_the_page() -> None:
    result = plan(PlanRequest.of(model="Qwen/Qwen2-0.5B-Instruct", kv_cache_memory_bytes=25938100224,
                              kv_cache_dtype="fp8", with_weights=False, release=VLLM_0_17_1))
    record = plan_record(result)
    assert (record["page_size_bytes"], record["num_blocks"]) == (4096, 263_856)
    assert "Maximum concurrency for 32,768 tokens per request: 128.84x" in record["vllm_log"]


def test_not_fitting_is_a_finding_with_vllms_text_and_a_fix() -> None:
    done = run_cli(QWEN, "--kv-cache-memory", "300MiB", "--json", "--vllm-version", "0.17.1")
    assert done.returncode == 1
    record = json.loads(done.stdout)
    assert record["fits"] is False
    assert record["estimated_max_model_len"] == 25600
    assert record["error"].startswith("To serve at least one request with the models's max seq len (32768), (0.38 GiB")
    assert "lower --max-model-len to 25600" in record["suggested_fix"]


def test_auto_fit_max_model_len() -> None:
    result = plan(PlanRequest.of(model="Qwen/Qwen2-0.5B-Instruct", kv_cache_memory_bytes=300 * 2**20,
                              max_model_len=-1, with_weights=False, release=VLLM_0_17_1))
    assert result.fits
    assert result.max_model_len == 25600
    assert any(line.startswith("Auto-fit max_model_len: reduced from 32768 to 25600") for line in
               plan_record(result)["vllm_log"])


@pytest.mark.parametrize(
    ("args", "says"),
    [
        ((), "no model given; usage: kvplan plan MODEL [OPTIONS]"),
        ((QWEN,), "--kv-cache-memory"),
        (("--kv-cache-memory", "lots"), "cannot read 'lots' as a byte count"),
        (("--kv-cache-memory", "1GiB", "--block-size", "7"), "--block-size: 7 is not a block size vLLM accepts"),
        ((QWEN, "--kv-cache-memory", "1GiB", "--max-model-len", "99999999"), "greater than the derived max_model_len"),
        (("--kv-cache-memory", "1GiB", "--model", "/nonexistent/config.json"), "not a Hugging Face hub id"),
        (("--kv-cache-memory", "1GiB", "--gpu", "nosuchgpu"), "kvplan gpus"),
        ((QWEN, "--kv-cache-memory", "1GiB", "-tp", "4"), "divisible by tensor parallel size"),
        (("--kv-cache-memory", "1GiB", "--gpu-memory-utilization", "1.5"), "expected a number above 0 and at most 1"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(args: tuple[str, ...], says: str) -> None:
    done = run_cli(*args)
    assert done.returncode == 2
    assert done.stdout == ""
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and says in lines[0], done.stderr


def test_plan_imports_neither_torch_nor_transformers() -> None:
    code = (
        "import sys; from kvplan.cli import app; from kvplan.usecases.plan import PlanRequest, plan; "
        "plan(PlanRequest.of(model='Qwen/Qwen2-0.5B-Instruct', kv_cache_memory_bytes=1 << 33)); "
        "print(sorted(m for m in ('torch', 'transformers') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"


def test_models_lists_every_bundled_config_offline_with_its_kv_bytes_per_token() -> None:
    done = subprocess.run([sys.executable, "-m", "kvplan", "models", "--json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    entries = {entry["model_id"]: entry for entry in json.loads(done.stdout)["models"]}
    assert len(entries) == 21
    qwen = entries["Qwen/Qwen2-0.5B-Instruct"]
    assert (qwen["kv_bytes_per_token"], qwen["num_hidden_layers"], qwen["layer_kinds"]) == (12288, 24, {"full": 24})
    assert entries["nvidia/Nemotron-H-56B-Base-8K"]["layer_kinds"] == {"mamba": 54, "full": 10, "none": 54}
    assert entries["openai/gpt-oss-20b"]["layer_kinds"] == {"sliding_window": 12, "full": 12}


def test_vllm_allow_long_max_model_len_lifts_the_limit(monkeypatch) -> None:
    request = PlanRequest.of(model="Qwen/Qwen2-0.5B-Instruct", kv_cache_memory_bytes=1 << 33, max_model_len=65536,
                          with_weights=False)
    with pytest.raises(ConfigRejected, match=r"max_position_embeddings=32768\.0"):
        plan(request)
    monkeypatch.setenv("VLLM_ALLOW_LONG_MAX_MODEL_LEN", "1")
    result = plan(request)
    assert result.max_model_len == 65536
    # 24 layers x 512 B per token x the default release's block size (64 in 0.34.0) per block
    assert result.num_blocks == (1 << 33) // (512 * default_release().default_block_size) // 24
    assert plan_record(result)["vllm_log"][0].startswith(
        "User-specified max_model_len (65536) is greater than the derived max_model_len "
        "(max_position_embeddings=32768.0 or model_max_length=None in model's config.json). "
        "VLLM_ALLOW_LONG_MAX_MODEL_LEN must be used with extreme caution."
    )


def test_weights_that_cannot_be_counted_leave_the_kv_plan_whole(tmp_path, monkeypatch) -> None:
    model_dir(tmp_path)
    why = break_weight_count(monkeypatch)
    request = PlanRequest.of(model=str(tmp_path), kv_cache_memory_bytes=1 << 30)
    result = plan(request)
    without = plan(PlanRequest.of(model=str(tmp_path), kv_cache_memory_bytes=1 << 30, with_weights=False))
    assert result.fits and result.weights is None and result.weights_unknown == why
    assert (result.num_blocks, result.kv_config) == (without.num_blocks, without.kv_config)
    record = plan_record(result)
    assert (record["weights_bytes"], record["weights_method"]) == (None, None)
    assert record["warnings"] == [result.weights_warning] and why in record["warnings"][0]
    assert result.weights_warning.startswith(f"weights unknown for {tmp_path} ")
    assert without.weights_unknown is None and plan_record(without)["warnings"] == []
