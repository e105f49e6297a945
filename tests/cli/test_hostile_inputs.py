"""The edge contract, as a property: whatever a hostile or careless user gives (workloads, traces,
check specs and command-line arguments with huge, negative, non-finite, mistyped, deeply nested or
non-Unicode values, unknown keys, outputs aimed at inputs), kvplan exits 0, 1, 2 or 3, prints no
traceback, leaves stdout empty or one JSON document with --json, and changes no input file.

The CLI runs in-process, so that each example costs milliseconds; the number of examples is
bounded for `make test`."""

from __future__ import annotations

import copy
import json
import os
import tempfile
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from tests.edge import offline_home, run_cli, snapshot

EXAMPLES = settings(max_examples=int(os.environ.get("HOSTILE_EXAMPLES", "40")), deadline=None,
                    derandomize=not os.environ.get("HOSTILE_EXAMPLES"),
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large])

# values no input should survive into arithmetic, and a few that are fine
HOSTILE_NUMBERS = st.sampled_from([
    0, -1, -(2**63), 2**63, 2**70, 10**12, 10**9 + 1, 10**8 + 1, 2**64 + 0.5, float("nan"), float("inf"),
    float("-inf"), 1e-320, 1e308, -0.0, 0.5, 2.5, True, False, None, "12", "1e400", "1,5GiB", "24 GiB", "NaN",
    "", [], [1, 2], {}, {"dist": "constant", "value": 2**70},
])
HOSTILE_TEXTS = st.sampled_from([
    "[/] x", "[bold red]x", "\ud800", "a\x00b", "a\x07b\x1b[31m", "<x>&\"'", "../../etc/passwd", "/dev/zero",
    "", " ", "x" * 5000, "名前", "\u202e", "}{", "'\"",
])
# about half the values are plausible, so that runs go past the validation as often as they stop there
PLAUSIBLE = st.one_of(st.integers(1, 64), st.floats(0.5, 64), st.sampled_from([True, "chat", "x", "24GiB"]))
HOSTILE = st.one_of(PLAUSIBLE, HOSTILE_NUMBERS, HOSTILE_TEXTS)
DEEP = "[" * 5000 + "]" * 5000


def assert_contract(argv: list[str], directory: Path, ignore: tuple[str, ...] = ()) -> None:
    """`ignore`: files the command writes by design (an output it resumes, its journal)."""
    before = {path: data for path, data in snapshot(directory).items() if path not in ignore}
    code, out, err = run_cli(argv)
    if os.environ.get("HOSTILE_LOG"):
        with open(os.environ["HOSTILE_LOG"], "a") as log:
            log.write(f"{argv[0]} {code} {err.strip()[:150]!r}\n")
    assert code in (0, 1, 2, 3), (argv, code, err)
    assert "Traceback" not in err, err
    if "--json" in argv and out.strip():
        # one JSON document, nothing else (replay: JSON Lines, one document per line)
        for document in out.splitlines() if argv[0] == "replay" else [out]:
            json.loads(document)
    if "--json" in argv and code == 2:
        assert out == "", out
    if code == 2:
        assert err.strip().count("\n") == 0 or "Usage:" in err, err
    after = snapshot(directory)
    assert {path: data for path, data in after.items() if path in before} == before, "an input changed"


def mutate(document: dict[str, Any], paths: list[tuple[str | int, ...]], value: Any) -> dict[str, Any]:
    """The document with `value` at each path that still leads somewhere (an earlier path may have
    replaced its container)."""
    changed = copy.deepcopy(document)
    for path in paths:
        node: Any = changed
        for key in path[:-1]:
            node = node[key] if isinstance(node, dict | list) and _has(node, key) else None
        if isinstance(node, dict) or (isinstance(node, list) and _has(node, path[-1])):
            node[path[-1]] = value
    return changed


def _has(node: dict[str, Any] | list[Any], key: str | int) -> bool:
    return key in node if isinstance(node, dict) else isinstance(key, int) and key < len(node)


def write(directory: Path, name: str, document: Any) -> Path:
    path = directory / name
    if isinstance(document, str):
        path.write_text(document, encoding="utf-8", errors="surrogatepass")
    else:
        # json.dumps escapes a lone surrogate as \ud800: the file is valid UTF-8, the value is not Unicode
        path.write_text(json.dumps(document))
    return path


# ---------------------------------------------------------------------------- workloads

WORKLOAD: dict[str, Any] = {
    "schema_version": 1, "seed": 3,
    "engine": {"num_gpu_blocks": 48, "max_num_seqs": 8, "max_num_batched_tokens": 256, "max_model_len": 512},
    "timing": {"step_time_ms": 5},
    "classes": [{"name": "chat", "weight": 1, "prompt_tokens": {"dist": "lognormal", "mean": 60, "std": 30},
                 "output_tokens": {"dist": "uniform", "min": 2, "max": 12},
                 "shared_prefix": {"name": "system", "tokens": 32},
                 "turns": {"count": 2, "user_tokens": 8, "think_time_s": 0.5}}],
    "arrival": {"process": "poisson", "rate": 50, "count": 12},
}
WORKLOAD_PATHS: list[tuple[str | int, ...]] = [
    ("seed",), ("schema_version",), ("engine", "num_gpu_blocks"), ("engine", "max_num_seqs"),
    ("engine", "max_num_batched_tokens"), ("engine", "max_model_len"), ("engine", "block_size"),
    ("engine", "hash_seed"), ("timing", "step_time_ms"), ("classes", 0, "name"), ("classes", 0, "weight"),
    ("classes", 0, "prompt_tokens"), ("classes", 0, "prompt_tokens", "std"), ("classes", 0, "prompt_tokens", "mean"),
    ("classes", 0, "output_tokens", "max"), ("classes", 0, "shared_prefix", "tokens"),
    ("classes", 0, "shared_prefix", "name"), ("classes", 0, "turns", "count"), ("classes", 0, "turns", "think_time_s"),
    ("arrival", "rate"), ("arrival", "count"), ("arrival", "process"), ("engine", "gpu"), ("engine", "kv_cache_memory"),
    ("engine", "model"), ("engine", "profile"), ("requests",), ("timing", "calibration"), ("description",),
]


@EXAMPLES
@given(paths=st.lists(st.sampled_from(WORKLOAD_PATHS), min_size=1, max_size=2), value=HOSTILE,
       flags=st.lists(st.sampled_from([["--json"], ["--seed", "5"], ["--step-time-ms", "2.5"], ["--gpu", "l4"],
                                       ["--seed", "-1"], ["--step-time-ms", "nan"], ["--gpu", ""],
                                       ["--num-gpu-blocks", "0"], ["--num-gpu-blocks", "99999999999999999999"],
                                       ["--block-size", "12"], ["--max-model-len", "1e9"], ["-o", "workload.json"],
                                       ["--timeline", "out.csv", "-o", "out.csv"], ["--kv-cache-memory", "1e400"],
                                       ["--vllm-version", "0.33.0"], ["--vllm-version", "0.2"],
                                       ["--scheduling", "sync"], ["--scheduling", ""]]),
                      max_size=2))
def test_hostile_workloads(paths: list[tuple[str | int, ...]], value: Any, flags: list[list[str]]) -> None:
    with offline_home(), tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        write(directory, "workload.json", mutate(WORKLOAD, paths, value))
        assert_contract(["simulate", str(directory / "workload.json"), "--json",
                         *[str(directory / a) if a.endswith((".json", ".csv")) else a for f in flags for a in f]],
                        directory)


@pytest.mark.parametrize("text", [DEEP, '{"schema_version": 1, "seed": ' + "9" * 5000 + "}", "\ufeff{}", "{",
                                  '{"schema_version": 1, "requests": "/dev/zero", "engine": {"num_gpu_blocks": 8}}',
                                  '{"schema_version": 1, "requests": "."}'])
def test_hostile_workload_files(text: str, tmp_path: Path) -> None:
    with offline_home():
        write(tmp_path, "workload.json", text)
        assert_contract(["simulate", str(tmp_path / "workload.json"), "--json"], tmp_path)


# ---------------------------------------------------------------------------- traces

TRACE: dict[str, Any] = {
    "config": {"num_gpu_blocks": 14, "block_size": 16, "max_num_batched_tokens": 64, "max_num_seqs": 4,
               "max_model_len": 512, "kv_cache_groups": [{"type": "full_attention"},
                                                         {"type": "sliding_window", "sliding_window": 32}]},
    "requests": [
        {"request_id": "r0", "arrival_step": 0, "prefix_id": 0, "prefix_len": 48, "unique_len": 8, "max_tokens": 12},
        {"request_id": "r1", "arrival_step": 1, "prefix_id": 0, "prefix_len": 48, "unique_len": 4, "max_tokens": 6},
        {"request_id": "r2", "arrival_step": 2, "prompt_token_ids": [11, 12, 13], "max_tokens": 30},
    ],
}
TRACE_PATHS: list[tuple[str | int, ...]] = [
    ("config", "num_gpu_blocks"), ("config", "block_size"), ("config", "max_num_batched_tokens"),
    ("config", "max_num_seqs"), ("config", "max_model_len"), ("config", "enable_prefix_caching"),
    ("config", "hash_algo"), ("requests", 0, "request_id"), ("requests", 0, "arrival_step"),
    ("requests", 1, "arrival_step"), ("requests", 0, "prefix_id"), ("requests", 0, "prefix_len"),
    ("requests", 1, "unique_len"), ("requests", 2, "max_tokens"), ("requests", 2, "prompt_token_ids"),
    ("requests", 2, "prompt_token_ids", 1), ("requests", 1, "output_token_ids"), ("config",), ("requests", 1),
    ("config", "vllm_version"), ("config", "scheduling"), ("config", "kv_cache_groups"),
    ("config", "kv_cache_groups", 1, "sliding_window"), ("config", "kv_cache_groups", 1, "block_size"),
]


@EXAMPLES
@given(paths=st.lists(st.sampled_from(TRACE_PATHS), min_size=1, max_size=2), value=HOSTILE,
       mode=st.sampled_from([["--summary-only"], ["--json"], ["--json", "-o", "x.jsonl"],
                             ["--json", "--max-num-seqs", "2"], ["--json", "-o", "trace.json"],
                             ["--json", "--num-gpu-blocks", "1"], ["--json", "--max-num-seqs", "2000000"],
                             ["--json", "--vllm-version", "0.33.0", "--scheduling", "sync"],
                             ["--summary-only", "--scheduling", "[/]"]]))
def test_hostile_traces(paths: list[tuple[str | int, ...]], value: Any, mode: list[str]) -> None:
    with offline_home(), tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        write(directory, "trace.json", mutate(TRACE, paths, value))
        args = [str(directory / a) if a.endswith((".json", ".jsonl")) else a for a in mode]
        assert_contract(["replay", str(directory / "trace.json"), *args], directory)


def test_far_apart_arrivals_are_skipped_not_iterated(tmp_path: Path) -> None:
    far = mutate(TRACE, [("requests", 2, "arrival_step")], 10**9)
    write(tmp_path, "trace.json", far)
    with offline_home():
        code, out, err = run_cli(["replay", str(tmp_path / "trace.json"), "--summary-only"])
        assert code == 0, err
        assert json.loads(out)["summary"]["num_steps"] > 10**9
        code, out, err = run_cli(["replay", str(tmp_path / "trace.json"), "--json"])
        assert code == 2 and out == "" and "use --summary-only" in err


# ---------------------------------------------------------------------------- check specs

SPEC: dict[str, Any] = {
    "name": "hostile",
    "target": {"model": "Qwen/Qwen2-0.5B-Instruct", "kv_cache_memory": "2GiB", "max_model_len": 4096},
    "assert": [{"fits": True, "min_kv_tokens": 1000, "min_concurrency": {"tokens_per_request": 1024, "at_least": 2}},
               {"workload": "workload.json", "max_preemptions": 0, "min_prefix_cache_hit_rate": 0.0}],
}
SPEC_PATHS: list[tuple[str | int, ...]] = [
    ("name",), ("target", "model"), ("target", "kv_cache_memory"), ("target", "max_model_len"),
    ("target", "gpu_memory_utilization"), ("target", "tensor_parallel_size"), ("target", "block_size"),
    ("target", "trust_remote_code"), ("target", "profile"), ("assert", 0, "fits"), ("assert", 0, "min_kv_tokens"),
    ("assert", 0, "min_concurrency"), ("assert", 0, "max_kv_bytes_per_token"), ("assert", 1, "workload"),
    ("assert", 1, "max_preemptions"), ("assert", 1, "seed"), ("assert", 1, "step_time_ms"), ("assert",),
    ("schema_version",),
]
SMALL_WORKLOAD = {**WORKLOAD, "engine": {"num_gpu_blocks": 48}, "arrival": {"process": "all_at_once", "count": 4}}


@EXAMPLES
@given(paths=st.lists(st.sampled_from(SPEC_PATHS), min_size=1, max_size=2), value=HOSTILE,
       junit=st.sampled_from([[], ["--junit", "out.xml"], ["--junit", "spec.json"], ["--junit", "workload.json"]]))
def test_hostile_specs(paths: list[tuple[str | int, ...]], value: Any, junit: list[str]) -> None:
    with offline_home(), tempfile.TemporaryDirectory() as tmp:
        directory = Path(tmp)
        write(directory, "workload.json", SMALL_WORKLOAD)
        write(directory, "spec.json", mutate(SPEC, paths, value))
        args = [str(directory / a) if a.endswith((".json", ".xml")) else a for a in junit]
        assert_contract(["check", str(directory / "spec.json"), "--json", *args], directory)


@pytest.mark.parametrize("text", ["a = " + "[" * 3000 + "]" * 3000, "[[assert]]\nfits = \"yes\"\n",
                                  "[[assert]]\nmin_kv_tokens = " + "9" * 5000, "x = \x00"])
def test_hostile_toml(text: str, tmp_path: Path) -> None:
    with offline_home():
        write(tmp_path, "spec.toml", text)
        assert_contract(["check", str(tmp_path / "spec.toml"), "--json"], tmp_path)


# ---------------------------------------------------------------------------- command-line arguments

PLAN_FLAGS = ["--kv-cache-memory", "--gpu-memory", "--max-model-len", "--max-num-batched-tokens", "--max-num-seqs",
              "--block-size", "-tp", "-pp", "--gpu", "--num-gpu-blocks-override", "--gpu-memory-utilization",
              "--dtype", "--kv-cache-dtype", "--model", "--revision"]
ARGUMENTS = st.sampled_from(["0", "-1", "1", "2", "7", "16", "1e400", "nan", "inf", "9" * 5000, "2" * 30, "24GiB",
                             "24G", "24.5G", "1,5GiB", "32k", "32K", "auto", "", "[/] x", "\ud800", "a\x00b", "bogus",
                             "h100", "l4-24gb", "bfloat16", "fp8", "0.5", "1.5", "Qwen/Qwen2-0.5B-Instruct",
                             "acme/not-here", "/dev/zero"])


@EXAMPLES
@given(options=st.lists(st.tuples(st.sampled_from(PLAN_FLAGS), ARGUMENTS), max_size=3),
       json_output=st.booleans())
def test_hostile_plan_arguments(options: list[tuple[str, str]], json_output: bool) -> None:
    argv = ["plan", "--kv-cache-memory", "2GiB"]
    for flag, value in options:
        argv += [flag, value]
    with offline_home() as home:
        assert_contract([*argv, *(["--json"] if json_output else [])], home)


@pytest.mark.parametrize("argv", [
    ["plan", "--json", "--bogus"], ["plan", "--json", "--kv-cache-memory"], ["check", "--json"],
    ["simulate", "--json"], ["replay", "--json", "--num-gpu-blocks", "x"], ["--json"],
])
def test_usage_errors_leave_stdout_empty(argv: list[str], tmp_path: Path) -> None:
    code, out, err = run_cli(argv)
    assert code == 2 and out == "" and err
