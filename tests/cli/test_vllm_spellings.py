"""vLLM's own spellings work where kvplan has the concept (issue 24, item 5): `-tp`,
`--tensor-parallel-size` (and kvplan's `--tp`) on every command that takes a tensor-parallel size,
`--kv-cache-memory-bytes`, `--quantization`, `--enforce-eager`, the model as the first word (`vllm
serve MODEL`), no model chosen for the user, one spelling of an objective in `fit` and a check
spec, and GPU names as nvidia-smi prints them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.main import get_command

from kvplan.cli import app
from kvplan.errors import KvplanError
from kvplan.gpus.catalog import get_gpu
from kvplan.usecases.check.spec import parse_spec
from kvplan.usecases.fit.request import SloBound, parse_slo

QWEN = "Qwen/Qwen2-0.5B-Instruct"
LLAMA = "meta-llama/Llama-3.1-8B-Instruct"


def _flags(*path: str) -> dict[str, tuple[str, ...]]:
    command = get_command(app)
    for name in path:
        command = command.commands[name]  # type: ignore[attr-defined]
    return {param.name: tuple(param.opts) + tuple(param.secondary_opts) for param in command.params}


@pytest.mark.parametrize("path", [("plan",), ("profile",), ("simulate",), ("explain",), ("fit",), ("bench", "serve")])
def test_every_command_that_takes_a_tensor_parallel_size_takes_all_its_spellings(path):
    spellings = {flag for flags in _flags(*path).values() for flag in flags}
    assert {"--tensor-parallel-size", "-tp", "--tp", "--pipeline-parallel-size", "-pp", "--pp"} <= spellings


@pytest.mark.parametrize("path", [("plan",), ("profile",), ("simulate",), ("fit",), ("bench", "serve")])
def test_kv_cache_memory_takes_vllms_name(path):
    spellings = {flag for flags in _flags(*path).values() for flag in flags}
    assert {"--kv-cache-memory", "--kv-cache-memory-bytes"} <= spellings


def _plan(kvplan, *args: str) -> dict:
    code, out, err = kvplan("plan", *args, "--json")
    assert code == 0, err
    return json.loads(out)


def test_the_spellings_plan_the_same(kvplan):
    reference = _plan(kvplan, "--model", LLAMA, "--kv-cache-memory", "20GiB", "--tensor-parallel-size", "2")
    for args in (
        (LLAMA, "--kv-cache-memory-bytes", "20GiB", "-tp", "2"),           # as `vllm serve` is given them
        ("--kv-cache-memory-bytes=20GiB", "--tp", "2", LLAMA),
        ("-m", LLAMA, "--kv-cache-memory", "20GiB", "--tp=2", "--assert-fits=true"),   # with an assertion
        ("--assert-min-kv-tokens", "10", LLAMA, "--kv-cache-memory", "20GiB", "-tp", "2"),
    ):
        assert _plan(kvplan, *args) == reference, args
    assert reference["tensor_parallel_size"] == 2


@pytest.mark.parametrize("command", ["plan", "profile"])
def test_no_model_is_bad_input_with_the_usage(kvplan, command):
    code, out, err = kvplan(command, "--kv-cache-memory", "20GiB")
    assert code == 2 and out == ""
    assert err.count("\n") == 1 and f"usage: kvplan {command} MODEL [OPTIONS]" in err and "Traceback" not in err


def test_bench_serve_without_a_model_is_bad_input(kvplan):
    code, _, err = kvplan("bench", "serve", "--kv-cache-memory", "20GiB", "--num-prompts", "2")
    assert code == 2 and "usage: kvplan bench serve --model MODEL" in err


def test_a_model_given_twice_is_refused(kvplan):
    code, _, err = kvplan("plan", QWEN, "--model", LLAMA, "--kv-cache-memory", "20GiB")
    assert code == 2 and "the model is given twice" in err
    code, _, err = kvplan("plan", QWEN, LLAMA, "--kv-cache-memory", "20GiB")
    assert code == 2 and "unexpected argument" in err


def test_quantization_fp8_on_an_unquantized_checkpoint_makes_fp8_weights(kvplan):
    plain = _plan(kvplan, LLAMA, "--kv-cache-memory", "20GiB")
    online = _plan(kvplan, LLAMA, "--kv-cache-memory", "20GiB", "--quantization", "fp8")
    assert plain["quantization"] is None and online["quantization"] == "fp8"
    # every linear weight in one byte instead of two; embeddings and lm_head stay bfloat16
    embeddings = 2 * 128256 * 4096 * 2
    assert online["weights_bytes"] < plain["weights_bytes"] * 0.6
    assert online["weights_bytes"] > (plain["weights_bytes"] - embeddings) / 2 + embeddings - 1
    assert online["num_blocks"] == plain["num_blocks"]       # the KV memory is given: the same pool


def test_quantization_vllm_cannot_apply_is_refused(kvplan):
    code, _, err = kvplan("plan", LLAMA, "--kv-cache-memory", "20GiB", "-q", "awq")
    assert code == 2 and "the checkpoint is not quantized" in err
    code, _, err = kvplan("plan", "deepseek-ai/DeepSeek-V3", "--kv-cache-memory", "20GiB", "--quantization", "awq")
    assert code == 2 and "model config (fp8) does not match" in err
    assert _plan(kvplan, "deepseek-ai/DeepSeek-V3", "--kv-cache-memory", "20GiB", "-q", "fp8")["quantization"] == "fp8"


def test_enforce_eager_takes_no_cuda_graph_pool_from_the_kv_memory(kvplan):
    pytest.importorskip("torch")
    records = []
    for extra in ((), ("--enforce-eager",)):
        code, out, err = kvplan("profile", QWEN, "--backend", "fake", "--gpu", "l4-24gb", "--no-allocate",
                                "--vllm-version", "0.33.0", "--json", *extra)
        assert code == 0, err
        records.append(json.loads(out))
    graphs, eager = records
    assert graphs["cuda_graph_estimate_bytes"] > 0 and eager["cuda_graph_estimate_bytes"] == 0
    assert eager["available_kv_bytes"] == graphs["available_kv_bytes"] + graphs["cuda_graph_estimate_bytes"]


@pytest.mark.parametrize(("typed", "key"), [
    ("L4", "l4-24gb"), ("NVIDIA L4", "l4-24gb"), ("nvidia l4", "l4-24gb"),
    ("NVIDIA H100 80GB HBM3", "h100-sxm-80gb"), ("H100 SXM", "h100-sxm-80gb"), ("H100 PCIe", "h100-pcie-80gb"),
    ("NVIDIA A100-SXM4-80GB", "a100-sxm-80gb"), ("NVIDIA A100 80GB PCIe", "a100-pcie-80gb"),
    ("A100 40GB PCIe", "a100-pcie-40gb"), ("Tesla T4", "t4-16gb"), ("H200", "h200-141gb"),
    ("NVIDIA GeForce RTX 4090", "rtx4090-24gb"), ("l40s", "l40s-48gb"), ("h100-sxm-80gb", "h100-sxm-80gb"),
])
def test_gpu_names_as_users_type_them(typed, key):
    assert get_gpu(typed).key == key


@pytest.mark.parametrize(("typed", "listed"), [
    ("A100", ("a100-pcie-40gb", "a100-sxm-40gb", "a100-pcie-80gb", "a100-sxm-80gb")),
    ("H100", ("h100-pcie-80gb", "h100-sxm-80gb", "h100-nvl-94gb")),
    ("A100 80GB", ("a100-pcie-80gb", "a100-sxm-80gb")),
])
def test_a_name_of_several_gpus_lists_the_variants(typed, listed):
    with pytest.raises(KvplanError) as error:
        get_gpu(typed)
    message = str(error.value)
    assert f"names {len(listed)} GPUs" in message and all(key in message for key in listed)


def test_a_misspelled_gpu_gets_a_did_you_mean(kvplan):
    code, _, err = kvplan("plan", QWEN, "--kv-cache-memory", "20GiB", "--gpu", "h100-sxn-80gb")
    assert code == 2 and "did you mean h100-sxm-80gb" in err


def test_plan_takes_the_gpu_as_nvidia_smi_prints_it(kvplan):
    assert _plan(kvplan, QWEN, "--gpu", "NVIDIA L4", "--kv-cache-memory", "20GiB") == \
        _plan(kvplan, QWEN, "--gpu", "l4-24gb", "--kv-cache-memory", "20GiB")


def test_fit_takes_a_check_specs_objective_names():
    expected = (SloBound("ttft_p95", 0.5), SloBound("preemptions", 0.0))
    assert parse_slo("ttft_p95=500ms,preemptions=0") == expected
    assert parse_slo("max_p95_ttft_s=0.5,max_preemptions=0") == expected
    assert parse_slo("max_p95_ttft_s=500ms") == (SloBound("ttft_p95", 0.5),)


def _spec(block: dict) -> dict:
    return {"target": {"model": QWEN, "kv_cache_memory": "20GiB"},
            "assert": [{"workload": "w.json", **block}]}


def test_a_check_spec_takes_fits_objective_names_and_durations():
    def required(block: dict) -> dict[str, float]:
        spec = parse_spec(_spec(block), Path("spec.toml"))
        return {a.kind.key: a.required for a in spec.blocks[0].assertions}

    assert required({"max_p95_ttft_s": 0.5}) == required({"max_p95_ttft_s": "500ms"}) == \
        required({"ttft_p95": "500ms"}) == {"max_p95_ttft_s": 0.5}
    assert required({"preemptions": 0}) == {"max_preemptions": 0}
    with pytest.raises(KvplanError, match="ttft_p95 and max_p95_ttft_s are the same objective"):
        required({"ttft_p95": "1s", "max_p95_ttft_s": 1})
    with pytest.raises(KvplanError, match="is not a duration"):
        required({"ttft_p95": "soon"})
