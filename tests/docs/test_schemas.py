"""Every command's JSON output validates against its schema in docs/schemas/, on real output."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import jsonschema
import pytest

from kvplan.report.plan_json import plan_record
from kvplan.usecases.plan import PlanRequest, plan

REPO = Path(__file__).resolve().parents[2]
SCHEMAS = REPO / "docs" / "schemas"
EXAMPLE_TRACE = REPO / "tests" / "data" / "traces" / "example.json"
QWEN = "Qwen/Qwen2-0.5B-Instruct"


def validator(name: str) -> jsonschema.Draft202012Validator:
    schema = json.loads((SCHEMAS / f"{name}.json").read_text())
    jsonschema.Draft202012Validator.check_schema(schema)
    return jsonschema.Draft202012Validator(schema)


def kvplan_json(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "kvplan", *args], capture_output=True, text=True, cwd=REPO,
                         env={"HF_HUB_OFFLINE": "1", "PATH": ""})
    assert out.returncode in (0, 1), out.stderr
    return out.stdout


def test_every_schema_is_a_valid_schema_with_a_versioned_document():
    names = sorted(path.stem for path in SCHEMAS.glob("*.json"))
    assert names == ["check", "explain", "fit", "gpus", "models", "plan", "profile", "replay", "simulate",
                     "sweep", "version"]
    for name in names:
        validator(name)


@pytest.mark.parametrize("command", ["version", "gpus", "models"])
def test_listing_commands(command):
    validator(command).validate(json.loads(kvplan_json(command, "--json")))


def test_plan_cli_output_fitting_and_not():
    schema = validator("plan")
    schema.validate(json.loads(kvplan_json("plan", QWEN, "--kv-cache-memory", "24GiB", "--json")))
    refused = json.loads(kvplan_json("plan", QWEN, "--kv-cache-memory", "300MiB", "--json"))
    assert refused["fits"] is False
    schema.validate(refused)


@pytest.mark.parametrize(("model", "knobs"), [
    ("google/gemma-3-4b-it", {}),                                   # interleaved sliding window
    ("nvidia/Nemotron-H-56B-Base-8K", {}),                          # Mamba hybrid
    ("Qwen/Qwen3-Next-80B-A3B-Thinking", {"tensor_parallel_size": 4}),
    ("deepseek-ai/DeepSeek-V3", {"gpu": "h100-sxm-80gb"}),          # MLA, block size forced
    ("openai/gpt-oss-20b", {"kv_cache_dtype": "fp8"}),
    ("meta-llama/Llama-3.1-8B-Instruct", {"pipeline_parallel_size": 2}),
])
def test_plan_records_of_every_kind(model, knobs):
    record = plan_record(plan(PlanRequest.of(model=model, kv_cache_memory_bytes=40 * 2**30, with_weights=False,
                                             **knobs)))
    validator("plan").validate(record)


@pytest.mark.parametrize(("trace", "flags"), [
    (EXAMPLE_TRACE, ()),
    (EXAMPLE_TRACE, ("--vllm-version", "0.17.1", "--scheduling", "sync")),
    (EXAMPLE_TRACE.with_name("hybrid-606.json"), ("--vllm-version", "0.17.1", "--scheduling", "sync")),
])
def test_replay_json_lines(trace, flags):
    lines = [json.loads(line) for line in kvplan_json("replay", str(trace), "--json", *flags).splitlines()]
    schema = validator("replay")
    for line in lines:
        schema.validate(line)
    assert "summary" in lines[-1] and "step" in lines[0]
    assert ("block_tables_by_group" in lines[0]) == ("hybrid" in trace.name)


def test_simulate(tmp_path):
    document = json.loads(kvplan_json("simulate", "examples/checks/workloads/chat.json", "--json"))
    validator("simulate").validate(document)
    assert document["kv_usage"]["groups"] == []
    hybrid = {"schema_version": 1, "seed": 1, "timing": {"step_time_ms": 10},
              "engine": {"model": "nvidia/Nemotron-H-56B-Base-8K", "kv_cache_memory": "4GiB"},
              "classes": [{"name": "c", "prompt_tokens": {"dist": "constant", "value": 500},
                           "output_tokens": {"dist": "constant", "value": 20}}],
              "arrival": {"process": "all_at_once", "count": 8}}
    (tmp_path / "hybrid.json").write_text(json.dumps(hybrid))
    document = json.loads(kvplan_json("simulate", str(tmp_path / "hybrid.json"), "--json"))
    validator("simulate").validate(document)
    assert [group["type"] for group in document["kv_usage"]["groups"]] == ["mamba"] * 6 + ["full_attention"]


def test_profile_saved_and_fresh(tmp_path):
    saved = json.loads((REPO / "examples" / "checks" / "profiles" / "qwen2-0.5b-l4.json").read_text())
    fresh = json.loads(kvplan_json("profile", QWEN, "--backend", "fake", "--gpu", "l4-24gb", "--no-allocate", "--json"))
    for document in (saved, fresh):
        validator("profile").validate(document)
        validator("plan").validate(document["plan"])


@pytest.mark.parametrize("spec", ["l4-chat.toml", "fail-tight-kv-cache.toml"])
def test_check(spec):
    validator("check").validate(json.loads(kvplan_json("check", f"examples/checks/{spec}", "--json")))


LOGS = REPO / "tests" / "data" / "logs"


@pytest.mark.parametrize(("log", "flags"), [
    ("vllm-0.19.0-llama-3.1-8b-h100-tp1.log", ("--no-predict",)),
    ("vllm-0.19.0-gpt-oss-20b-h100-oom.log", ("--no-predict",)),
    ("vllm-0.31.0-llama-3.1-8b-a100-excerpt.log", ("--no-predict", "--model", "meta-llama/Llama-3.1-8B-Instruct")),
    ("vllm-0.19.0-codellama-34b-h100-tp2-refused.log", ("--no-predict", "--offline")),
])
def test_explain_output_and_the_profile_it_saves(log, flags, tmp_path):
    saved = tmp_path / "p.json"
    save = ("--save-profile", str(saved)) if "codellama" not in log else ()
    validator("explain").validate(json.loads(kvplan_json("explain", str(LOGS / log), "--json", *flags, *save)))
    if save:
        validator("profile").validate(json.loads(saved.read_text()))


def test_every_vllm_semantics_enum_lists_every_release():
    """A schema that enumerates `vllm_semantics` or `vllm_version` names every release of the table."""
    from kvplan.semantics.releases import RELEASES

    def enums(node):
        if isinstance(node, dict):
            for key, value in node.items():
                if key in ("vllm_semantics", "vllm_version") and isinstance(value, dict) and "enum" in value:
                    yield value["enum"]
                yield from enums(value)
        elif isinstance(node, list):
            for value in node:
                yield from enums(value)

    found = [(path.name, enum) for path in sorted(SCHEMAS.glob("*.json"))
             for enum in enums(json.loads(path.read_text()))]
    assert found
    for name, enum in found:
        assert enum == list(RELEASES), name
