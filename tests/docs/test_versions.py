"""docs/versions.md lists every policy of the release table with its value in each release, and the
examples it gives are what kvplan computes."""

from __future__ import annotations

import dataclasses
import re
from pathlib import Path

from kvplan.semantics.kv.sizing import estimate_max_model_len_from_groups, kv_capacity, size_kv_cache
from kvplan.semantics.kv.specs import FullAttentionSpec, SizingLimits, SlidingWindowSpec
from kvplan.semantics.releases import RELEASES, VLLM_0_17_1, VLLM_0_33_0, VLLM_0_34_0, Release
from kvplan.usecases.plan import PlanRequest, plan

TEXT = (Path(__file__).resolve().parents[2] / "docs" / "versions.md").read_text(encoding="utf-8")
ROW = re.compile(r"^\| `(?P<policy>\w+)` \| `(?P<v0171>[^`]*)` \| `(?P<v0330>[^`]*)` \| `(?P<v0340>[^`]*)` \|", re.M)
KVPLAN = Path(__file__).resolve().parents[2] / "kvplan"
# releases.py's docstring: "policy   semantics/... (TABLE: ...)", one line per policy (continuations indented)
WHERE = re.compile(r"^    (?P<policy>[a-z_]+) {2,}(?P<where>\S.*(?:\n {34}.*)*)", re.M)


def documented() -> dict[str, tuple[str, str, str]]:
    return {m["policy"]: (m["v0171"], m["v0330"], m["v0340"]) for m in ROW.finditer(TEXT)}


def test_every_policy_of_the_release_table_is_documented_and_nothing_else():
    policies = [field.name for field in dataclasses.fields(Release) if field.name != "version"]
    assert sorted(documented()) == sorted(policies)


def test_the_documented_values_are_the_releases():
    assert list(RELEASES) == ["0.17.1", "0.33.0", "0.34.0"]
    for policy, values in documented().items():
        assert values == tuple(str(getattr(release, policy)) for release in (VLLM_0_17_1, VLLM_0_33_0, VLLM_0_34_0)), \
            policy


def test_every_documented_policy_is_applied_where_the_release_table_says():
    """Each policy of docs/versions.md (0.34.0's included) is named in releases.py's list of where it is
    applied, every module named there exists and defines the table or function it names, and every
    table named there is keyed by the policy's values (tests/semantics/test_releases.py)."""
    import kvplan.semantics.releases as releases

    where = {m["policy"]: m["where"] for m in WHERE.finditer(releases.__doc__ or "")}
    assert sorted(where) == sorted(documented())
    for policy, text in where.items():
        named = re.findall(r"(semantics/[\w/]+\.py)(?: \(([^()]*))?", text)
        assert named or policy == "gpu_memory_utilization", policy
        for module, paren in named:
            source = (KVPLAN / module).read_text(encoding="utf-8")
            tables = (paren or "").split(":", 1)[0] if ":" in (paren or "") else ""
            for table in re.findall(r"\b[A-Z][A-Z_]{3,}\b", tables):
                assert re.search(rf"^{table}\b", source, re.M), (policy, module, table)
    # and every policy is read somewhere outside the table itself
    sources = "\n".join(path.read_text(encoding="utf-8") for path in KVPLAN.rglob("*.py")
                        if path.name != "releases.py")
    for policy in documented():
        assert re.search(rf"\.{policy}\b", sources), policy


def window_model(full: int, sliding: int, window: int) -> dict:
    spec = FullAttentionSpec(16, 8, 64, "bfloat16")
    swa = SlidingWindowSpec(16, 8, 64, "bfloat16", sliding_window=window)
    layers = {f"model.layers.{i}.attn": spec for i in range(full)}
    layers |= {f"model.layers.{full + i}.attn": swa for i in range(sliding)}
    return layers


def test_per_request_memory_example():
    # 2 full + 6 sliding-window(512) layers, 600 blocks of the pool, max_model_len 4,001, 2,048 per step
    specs = window_model(2, 6, 512)
    for release, expected in ((VLLM_0_17_1, 4001), (VLLM_0_33_0, 2384)):
        groups = size_kv_cache([specs], [1 << 34], SizingLimits(4001, 2048), release=release).groups
        assert [len(group.layer_names) for group in groups] == [2, 2, 2, 2]
        per_block = 2 * specs["model.layers.0.attn"].page_size_bytes
        # 0.33.0 reserves the window plus two batches in flight (async scheduling)
        limits = SizingLimits(4001, 2048, 4096 if release is VLLM_0_33_0 else None)
        assert estimate_max_model_len_from_groups(groups, 600 * per_block, limits, release) == expected


def test_kv_capacity_example():
    specs = {f"model.layers.{i}.attn": FullAttentionSpec(16, 8, 64, "bfloat16") for i in range(4)}
    for release, tokens in ((VLLM_0_17_1, 40_016), (VLLM_0_33_0, 39_866)):
        result = size_kv_cache([specs], [2501 * 4 * 32768], SizingLimits(4001, 2048), release=release)
        assert result.config is not None and result.config.num_blocks == 2501
        assert kv_capacity(result.config, SizingLimits(4001, 2048), release)[0] == tokens


def test_group_padding_ratio_example():
    specs = window_model(8, 11, 128)
    for release, sizes in ((VLLM_0_17_1, {8}), (VLLM_0_33_0, {11})):
        groups = size_kv_cache([specs], [1 << 34], SizingLimits(4096, 2048), release=release).groups
        assert {max(len(group.layer_names) for group in groups)} == sizes


def test_plan_examples():
    def planned(release: Release, **knobs):
        return plan(PlanRequest.of(with_weights=False, release=release, **knobs))

    llama = {"model": "meta-llama/Llama-3.1-8B-Instruct", "kv_cache_memory_bytes": 20 << 30}
    assert len(planned(VLLM_0_17_1, **llama).kv_config.kv_cache_tensors) == 32
    new = planned(VLLM_0_33_0, **llama)
    assert new.kv_config.pool_bytes == 21_474_836_480 and new.sizing.log_lines == (
        "GPU KV cache size: 163,840 tokens, Maximum concurrency for 131,072 tokens per request: 1.25x",)
    deepseek = {"model": "deepseek-ai/DeepSeek-V3", "kv_cache_memory_bytes": 70 << 30, "gpu": "b200-180gb"}
    assert (planned(VLLM_0_17_1, **deepseek).setup.layout.block_size,
            planned(VLLM_0_33_0, **deepseek).setup.layout.block_size) == (64, 32)
    nemotron = {"model": "nvidia/Nemotron-H-56B-Base-8K", "kv_cache_memory_bytes": 20 << 30,
                "tensor_parallel_size": 4}
    old, new = planned(VLLM_0_17_1, **nemotron), planned(VLLM_0_33_0, **nemotron)
    assert (old.num_blocks, old.setup.layout.block_size, new.num_blocks, new.setup.layout.block_size) == \
        (1008, 2080, 508, 4128)
    assert planned(VLLM_0_33_0, **nemotron, block_size=64).setup.layout.block_size == 4160
    qwen = {"model": "Qwen/Qwen2-0.5B-Instruct", "max_model_len": 1024}
    assert planned(VLLM_0_17_1, **qwen, kv_cache_memory_bytes=1 << 30, num_gpu_blocks_override=20).fits
    assert not planned(VLLM_0_33_0, **qwen, kv_cache_memory_bytes=1 << 30, num_gpu_blocks_override=20).fits
    exactly = 64 * 24 * 8192
    assert planned(VLLM_0_17_1, **qwen, kv_cache_memory_bytes=exactly).fits
    assert not planned(VLLM_0_33_0, **qwen, kv_cache_memory_bytes=exactly).fits
    assert planned(VLLM_0_33_0, **qwen, kv_cache_memory_bytes=exactly + 24 * 8192).fits
