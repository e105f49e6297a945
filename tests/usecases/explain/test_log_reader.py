"""The start-up log reader on the real logs of tests/data/logs (SOURCES.md), and on edge cases made
from them: colours, timestamps, CRLF, truncated lines, interleaved workers. What each log states is
read off the log by hand (the line numbers are the files')."""

from __future__ import annotations

import re

import pytest

from kvplan.errors import KvplanError
from kvplan.semantics.memory.startup_log import GIB
from kvplan.usecases.explain.log_reader import decode_log, read_startup_log

GB = GIB


def read(data_dir, name):
    return read_startup_log(decode_log((data_dir / "logs" / name).read_bytes()), name)


def gib(text: str) -> int:
    return round(float(text) * GIB)


# log -> (vLLM version, wording, the settings it states, the figures it states)
EXPECTED = {
    "vllm-0.19.0-llama-3.1-8b-h100-tp1.log": ("0.19.0", "separate_capacity_lines", {
        "model": "meta-llama/Llama-3.1-8B-Instruct", "dtype": "bfloat16", "max_model_len": 8192,
        "tensor_parallel_size": 1, "pipeline_parallel_size": 1, "gpu_memory_utilization": 0.95,
        "kv_cache_dtype": "auto", "enable_prefix_caching": False, "async_scheduling": True,
        "max_num_batched_tokens": 8192, "max_num_seqs": 1024, "quantization": None,
    }, {
        "total": gib("79.19"), "free_at_start": gib("78.68"), "requested": gib("75.23"), "weights": gib("14.99"),
        "peak_activation": gib("1.89"), "non_torch": gib("0.25"), "non_kv": gib("17.12"),
        "graph_estimate": gib("0.84"), "graph_pool": gib("0.91"), "available_kv": gib("58.11"),
        "kv_cache_tokens": 476_016, "max_concurrency": 58.11, "concurrency_length": 8192,
    }),
    "vllm-0.19.0-llama-3.1-8b-h100-tp2.log": ("0.19.0", "separate_capacity_lines", {
        "tensor_parallel_size": 2, "max_model_len": 8192, "gpu_memory_utilization": 0.95,
    }, {
        "weights": gib("7.51"), "non_torch": gib("2.07"), "available_kv": gib("63.76"), "kv_cache_tokens": 1_044_688,
        "max_concurrency": 127.53, "graph_pool": gib("0.76"),
    }),
    "vllm-0.19.0-llama-3.1-8b-h100-kvfp8.log": ("0.19.0", "separate_capacity_lines", {
        "kv_cache_dtype": "fp8", "dtype": "bfloat16",
    }, {}),
    "vllm-0.19.0-qwen2.5-7b-h100-tp1.log": ("0.19.0", "separate_capacity_lines", {
        "model": "Qwen/Qwen2.5-7B-Instruct", "max_model_len": 8192,
    }, {}),
    "vllm-0.19.0-gpt-oss-20b-h100-oom.log": ("0.19.0", "separate_capacity_lines", {
        "model": "openai/gpt-oss-20b", "quantization": "mxfp4",
    }, {"weights": gib("13.64"), "available_kv": gib("58.47"), "kv_cache_tokens": 1_277_184}),
    "vllm-0.19.0-codellama-34b-h100-tp2-refused.log": ("0.19.0", None, {
        "model": "codellama/CodeLlama-34b-hf", "tensor_parallel_size": 2,
    }, {}),
    "vllm-0.19.0-phi-2-h100-max-model-len.log": ("0.19.0", None, {"model": "microsoft/phi-2"}, {}),
    "vllm-0.31.0-llama-3.1-8b-a100-excerpt.log": (None, "merged_capacity_line", {
        "gpu_memory_utilization": 0.92, "max_model_len": 131_072,
    }, {
        "total": gib("79.25"), "free_at_start": gib("78.84"), "requested": gib("72.91"), "weights": gib("15.0"),
        "consumed": gib("15.26"), "peak_activation": gib("1.44"), "graph_pool": gib("0.23"),
        "available_kv": gib("56.21"), "kv_cache_tokens": 460_496, "max_concurrency": 3.51,
    }),
    "synthetic-0.34.0-extensible-kv-cache.log": ("0.34.0", "merged_capacity_line_after_warmup", {
        "model": "meta-llama/Llama-3.1-8B-Instruct", "max_model_len": 8192,
    }, {"available_kv": gib("62.1"), "measured_kv": gib("58.01"), "extended_kv": gib("58.01"),
        "extended_blocks": 7425, "measured_blocks": 7425, "kv_cache_tokens": 475_200}),
}


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_each_log_gives_its_release_wording_settings_and_figures(data_dir, name):
    version, wording, settings, figures = EXPECTED[name]
    log = read(data_dir, name)
    assert (None if log.vllm_version is None else log.vllm_version.value) == version
    assert log.wording == wording
    for key, value in settings.items():
        assert log.setting(key) == value, key
    for key, value in figures.items():
        assert log.figure(key) == value, key


def test_every_figure_names_the_line_that_states_it(data_dir):
    name = "vllm-0.19.0-llama-3.1-8b-h100-tp1.log"
    lines = (data_dir / "logs" / name).read_text().splitlines()
    log = read(data_dir, name)
    assert "Available KV cache memory: 58.11 GiB" in lines[log.figures["available_kv"].line - 1]
    assert "GPU KV cache size: 476,016 tokens" in lines[log.figures["kv_cache_tokens"].line - 1]
    assert "non-default args" in lines[log.settings["gpu_memory_utilization"].line - 1]


def test_the_errors_at_the_end(data_dir):
    oom = read(data_dir, "vllm-0.19.0-gpt-oss-20b-h100-oom.log").error
    assert oom is not None and oom.kind == "out_of_memory"
    assert oom.figures["tried_bytes"] == 786 << 20 and oom.figures["free_bytes"] == round(552.5 * (1 << 20))
    assert oom.figures["phase"] == "warming up sampler with 1024 dummy requests"
    refused = read(data_dir, "vllm-0.19.0-codellama-34b-h100-tp2-refused.log").error
    assert refused is not None and refused.kind == "startup_refusal"
    assert refused.figures == {"device": "cuda:1", "free_bytes": gib("60.87"), "total_bytes": gib("79.19"),
                               "utilization": 0.95, "requested_bytes": gib("75.23")}
    long = read(data_dir, "vllm-0.19.0-phi-2-h100-max-model-len.log").error
    assert long is not None and long.kind == "max_model_len_over_derived"
    assert long.figures["derived_max_model_len"] == 2048
    assert read(data_dir, "vllm-0.19.0-llama-3.1-8b-h100-tp1.log").error is None


def test_interleaved_workers_under_tp(data_dir):
    log = read(data_dir, "vllm-0.19.0-llama-3.1-8b-h100-tp2.log")
    assert {"Worker_TP0", "Worker_TP1"} <= set(log.workers)
    assert {found.process for found in log.per_worker["weights"]} >= {"Worker_TP0", "Worker_TP1"}


def _variant(data_dir, name, transform):
    text = (data_dir / "logs" / name).read_text()
    return read_startup_log("\n".join(transform(line) for line in text.split("\n")), name)


@pytest.mark.parametrize("transform", [
    pytest.param(lambda line: f"\x1b[32m{line}\x1b[0m" if "INFO" in line else line, id="ansi-colours"),
    pytest.param(lambda line: f"2026-04-22T00:04:20.123456789Z {line}", id="docker-timestamps"),
    pytest.param(lambda line: line + "\r", id="crlf"),
    pytest.param(lambda line: re.sub(r"^\(\w+ pid=\d+\) ", "", line), id="no-process-prefixes"),
])
def test_the_same_log_as_people_paste_it(data_dir, transform):
    name = "vllm-0.19.0-llama-3.1-8b-h100-tp1.log"
    plain, varied = read(data_dir, name), _variant(data_dir, name, transform)
    assert {key: found.value for key, found in varied.figures.items()} == \
        {key: found.value for key, found in plain.figures.items()}
    assert varied.setting("model") == plain.setting("model") and varied.wording == plain.wording


def test_a_truncated_line_is_not_read_as_a_smaller_figure(data_dir):
    name = "vllm-0.19.0-llama-3.1-8b-h100-tp1.log"
    cut = _variant(data_dir, name, lambda line: line.replace("Available KV cache memory: 58.11 GiB",
                                                             "Available KV cache memory: 58."))
    assert cut.figure("available_kv") is None
    assert cut.figure("kv_cache_tokens") == 476_016


def test_records_glued_to_a_progress_bar_are_read(data_dir):
    log = read(data_dir, "vllm-0.19.0-llama-3.1-8b-h100-tp1.log")
    # "Capturing CUDA graphs ...| 51/51 [...](EngineCore pid=242) DEBUG ..." lines precede this one
    assert log.figure("graph_pool") == gib("0.91")


@pytest.mark.parametrize(("text", "message"), [
    ("hello\nworld\n", "not a vLLM log"),
    ("{\"kind\": \"kvplan.profile\"}", "not a vLLM log"),
    ("(APIServer pid=1) INFO 04-22 01:36:34 [entrypoints/launcher.py:46] Route: /health, Methods: GET\n",
     "without a start-up"),
])
def test_input_that_is_no_start_up_log_is_refused_in_one_line(text, message):
    with pytest.raises(KvplanError, match=message) as refused:
        read_startup_log(text, "x.log")
    assert "\n" not in str(refused.value)


def test_binary_input_is_refused():
    with pytest.raises(KvplanError, match="NUL bytes"):
        decode_log(b"\x7fELF\x00\x00\x01")


def test_every_release_wording_is_one_the_reader_knows():
    from typing import get_args

    from kvplan.semantics.memory.startup_log import WORDINGS
    from kvplan.semantics.releases import LogFormat, NonKvMemory
    from kvplan.usecases.explain.logged_budget import LOGGED_TERMS
    from kvplan.usecases.explain.settings import wording_words

    assert set(get_args(LogFormat)) <= set(WORDINGS)
    assert all(wording_words(wording) for wording in WORDINGS)
    assert set(LOGGED_TERMS) == set(get_args(NonKvMemory))
