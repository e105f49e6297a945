"""The figures docs/concepts.md quotes are the ones kvplan prints: `kvplan plan --json`, the
example profile, and `kvplan replay` of the traces the page shows."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
TEXT = (REPO / "docs" / "concepts.md").read_text(encoding="utf-8")
QWEN = "Qwen/Qwen2-0.5B-Instruct"


def kvplan(*args: str) -> str:
    out = subprocess.run([sys.executable, "-m", "kvplan", *args], capture_output=True, text=True, cwd=REPO,
                         env={"HF_HUB_OFFLINE": "1", "PATH": ""})
    return out.stdout


def plan_json(*args: str) -> dict:
    return json.loads(kvplan("plan", "--model", QWEN, "--json", "--vllm-version", "0.17.1", *args))


FLAT = " ".join(TEXT.split())  # line breaks in the page are spaces


def quoted(*figures: object) -> None:
    for figure in figures:
        assert " ".join(str(figure).split()) in FLAT, f"docs/concepts.md does not quote {figure!r}"


def test_the_worked_example_is_kvplans():
    record = plan_json("--kv-cache-memory", "25938100224")
    page, blocks = record["page_size_bytes"], record["num_blocks"]
    (group,) = record["kv_cache_groups"]
    layers, spec = group["num_layers"], group["spec"]
    quoted(
        f"2 (K and V) × {spec['block_size']} tokens × {spec['num_kv_heads']} KV heads × {spec['head_size']} "
        f"(head size) × 2 bytes (bf16) = {page} bytes",
        f"25,938,100,224 // {page} // {layers} = {blocks:,}",
        f"`{layers} × {page:,} = {page * layers:,}`",
        f"`{layers} × {page} / 16 = {record['kv_bytes_per_token']:,}`",
        f"GPU KV cache size: {record['gpu_kv_cache_tokens']:,} tokens",
        f"per request: {record['max_concurrency']:.2f}x",
        f"({blocks:,} / cdiv(32,768, 16) = {blocks:,} / {32768 // 16:,})",
        f"`2,048 blocks × {page:,} × {layers} = {record['bytes_needed_for_one_max_len_request']:,}`",
        tuple(group["tensor_shape"]).__repr__(),
        f"`num_blocks - 1 = {record['num_usable_blocks']:,}`",
    )
    (size,) = {tensor["size"] for tensor in record["kv_cache_tensors"]}
    total = record["kv_cache_tensors_total_bytes"]
    quoted(f"{len(record['kv_cache_tensors'])} tensors × {size:,} bytes ({page} × {blocks:,}) = "
           f"{total:,} bytes ({total / 2**30:.2f} GiB)")
    assert plan_json("--kv-cache-memory", "25938100223")["num_blocks"] == 131927
    quoted("(25,938,100,223) gives 131,927 blocks")


def test_fp8_and_the_refusal():
    fp8 = plan_json("--kv-cache-memory", "25938100224", "--kv-cache-dtype", "fp8")
    quoted(f"the page is {fp8['page_size_bytes']} bytes", f"holds {fp8['num_blocks']:,} blocks",
           f"concurrency is {fp8['max_concurrency']:.2f}x")
    refused = plan_json("--kv-cache-memory", "300MiB")
    assert refused["fits"] is False
    quoted(f"is {refused['estimated_max_model_len']}.\")", f"measures that {refused['estimated_max_model_len']:,}")
    for fragment in ("To serve at least one request with the models's max seq len (32768), (0.38",
                     "GiB KV cache is needed"):
        assert fragment in refused["error"]
        quoted(fragment)


def test_the_profile_figures_are_the_example_profiles():
    profile = json.loads((REPO / "examples" / "checks" / "profiles" / "qwen2-0.5b-l4.json").read_text())
    quoted(f"total of {profile['total_bytes']:,} bytes", f"utilisation {profile['gpu_memory_utilization']} it requests",
           f"{profile['requested_bytes']:,} bytes; weights take {profile['weights_bytes']:,}",
           f"activation peak {profile['activation_peak_bytes']:,}", f"leaves {profile['available_kv_bytes']:,} bytes",
           f'("{profile["vllm_log"][1]}")',
           f"and {profile['num_blocks']:,} blocks")


def replay(name: str, tmp_path: Path) -> list[dict]:
    match = re.search(rf"<!-- trace: {name} -->\n```json\n(.*?)```", TEXT, re.S)
    assert match, f"no trace {name!r} in docs/concepts.md"
    path = tmp_path / f"{name}.json"
    path.write_text(match.group(1))
    return [json.loads(line) for line in
            kvplan("replay", str(path), "--json", "--vllm-version", "0.17.1").splitlines()]


def test_the_prefix_caching_trace(tmp_path):
    steps = replay("prefix", tmp_path)
    hits = {request: (step["step"], tokens) for step in steps if "step" in step
            for request, tokens in step["prefix_hit_tokens"].items()}
    step_b, hit_b = hits["b"]
    table_b = next(step["block_tables"]["b"] for step in steps if step.get("step") == step_b)
    quoted(f"gets a hit of **{hit_b} tokens** at step {step_b}",
           f"block table starts with `a`'s blocks `{table_b[:2]}`", f"`d` gets **{hits['d'][1]}** hit tokens")
    assert hit_b == 32 and hits["d"][1] == 0


def test_the_preemption_trace(tmp_path):
    lines = replay("preempt", tmp_path)
    steps, summary = lines[:-1], lines[-1]["summary"]
    preempted = next(step for step in steps if step["preempted"])
    resumed = next(step for step in steps if step["resumed"])
    finished = {request: step["step"] for step in steps for request in step["finished"]}
    quoted(f"At step {preempted['step']} `x` needs", f"`x` finishes at step {finished['x']}",
           f"at step {resumed['step']} `y` is admitted again with a prefix hit of "
           f"**{resumed['prefix_hit_tokens']['y']} tokens**",
           f"recomputes the other {resumed['scheduled']['y']} tokens", f"finishes at step {finished['y']}",
           f"with **{summary['total_preemptions']}** preemption")
    assert preempted["preempted"] == ["y"]


@pytest.mark.parametrize("page", ["concepts.md", "quickstart.md", "ci.md", "check.md", "cli.md"])
def test_docs_exist_and_are_linked_from_the_readme_or_each_other(page):
    assert (REPO / "docs" / page).is_file()
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    linked = f"docs/{page}" in readme or any(
        f"]({page})" in path.read_text(encoding="utf-8") for path in (REPO / "docs").glob("*.md"))
    assert linked, f"docs/{page} is reachable from nowhere"
