"""The release table: every policy is data that the code reads from the release it is handed, and
no module compares version strings."""

from __future__ import annotations

import ast
import re
from dataclasses import replace
from pathlib import Path
from typing import get_args

import pytest

from kvplan.errors import KvplanError
from kvplan.report.replay_records import step_record
from kvplan.semantics.config.cache import HYBRID_ALIGNMENT, MAMBA_MODE_RULES, MLA_BLOCK_SIZE
from kvplan.semantics.config.scheduler import BATCH_DEFAULTS
from kvplan.semantics.engine.block_pool import UNHASHED_TO_HEAD
from kvplan.semantics.engine.groups import MAMBA_CACHE_MODES, ONE_BLOCK_SIZE
from kvplan.semantics.engine.kv_cache_manager import FREES_PROCESSED_ONLY, STATS_AT_LOOKUP
from kvplan.semantics.engine.mamba_manager import RETIRES_PAST_NULLS
from kvplan.semantics.engine.replay import replay
from kvplan.semantics.engine.scheduler import BATCHES_IN_FLIGHT, MAMBA_CHUNK_END, WHOLE_PROMPT_FIRST
from kvplan.semantics.engine.single_type_manager import CACHES_REACHABLE_ONLY
from kvplan.semantics.kv.grouping import PAGE_UNIFICATION, SPEC_BUCKETS
from kvplan.semantics.kv.layer_specs import CacheSettings, resolve_cache_layout
from kvplan.semantics.kv.sizing import (
    IN_FLIGHT_TOKENS,
    KV_CAPACITY,
    KV_TENSOR_LAYOUT,
    LOG_FORMATS,
    PER_REQUEST_MEMORY,
    size_kv_cache,
)
from kvplan.semantics.kv.specs import FullAttentionSpec, SizingLimits
from kvplan.semantics.memory.budget import (
    GRAPH_ESTIMATE_TAKEN,
    NON_KV_MEMORY,
    SUGGESTION_LOG_LEVEL,
    USAGE_LINE,
    MemoryBudget,
)
from kvplan.semantics.memory.cudagraphs import CAPTURE_PLANS, CAPTURE_SIZES
from kvplan.semantics.memory.measured import AUTO_FIT_PASSES, KV_SIZING, MEASURED_MARGIN
from kvplan.semantics.models.architectures import CONFIG_WIDE_WINDOW
from kvplan.semantics.models.validation import CONFIG_CLASSES
from kvplan.semantics.releases import (
    NEWEST_RELEASE,
    RELEASES,
    VLLM_0_17_1,
    VLLM_0_33_0,
    VLLM_0_34_0,
    Admission,
    AutoFitPasses,
    BatchDefaults,
    ConfigClasses,
    ConfigWideWindow,
    CudagraphCaptureSizes,
    FreedUnhashedBlocks,
    HybridBlockAlignment,
    HybridBlockSizes,
    InFlightTokens,
    KvCapacity,
    KvSizing,
    KvTensorLayout,
    LogFormat,
    MambaCacheMode,
    MambaChunkEnds,
    MambaRetirement,
    MeasuredKvMargin,
    MlaBlockSize,
    NonKvMemory,
    PageUnification,
    PerRequestMemory,
    PrefixCacheRetention,
    PrefixStats,
    Scheduling,
    SpecBuckets,
    WindowFrees,
    release_for_installed,
    release_named,
)
from kvplan.sources.traces import load_trace
from kvplan.usecases.plan import PlanRequest
from tests.golden import GOLDEN_CASES, normalised

KVPLAN = Path(__file__).resolve().parents[2] / "kvplan"
VERSION = re.compile(r"^\d+\.\d+(\.\d+)?$")


def test_the_table_holds_the_three_releases_and_the_newest_is_0_34_0():
    assert RELEASES == {"0.17.1": VLLM_0_17_1, "0.33.0": VLLM_0_33_0, "0.34.0": VLLM_0_34_0}
    assert NEWEST_RELEASE is VLLM_0_34_0
    assert release_named("0.34.0") is VLLM_0_34_0
    with pytest.raises(KvplanError, match=r"vllm_version must be one of 0\.17\.1, 0\.33\.0, 0\.34\.0"):
        release_named("0.20.0")


@pytest.mark.parametrize(("installed", "expected"), [
    (None, VLLM_0_34_0), ("0.17.1", VLLM_0_17_1), ("0.33.0", VLLM_0_33_0), ("0.17.1+cu128", VLLM_0_17_1),
    ("0.20.0", VLLM_0_34_0), ("0.17.0", VLLM_0_34_0), ("0.33.0rc1", VLLM_0_34_0), ("0.34.0", VLLM_0_34_0),
    ("0.34.0+cu129", VLLM_0_34_0),
])
def test_the_default_is_the_installed_release_when_supported_else_the_newest(installed, expected):
    assert release_for_installed(installed) is expected


# every table that implements a release policy, beside the policy's type: one entry per value
POLICY_TABLES = [
    pytest.param(NON_KV_MEMORY, NonKvMemory, id="NON_KV_MEMORY"),
    pytest.param(PER_REQUEST_MEMORY, PerRequestMemory, id="PER_REQUEST_MEMORY"),
    pytest.param(KV_CAPACITY, KvCapacity, id="KV_CAPACITY"),
    pytest.param(LOG_FORMATS, LogFormat, id="LOG_FORMATS"),
    pytest.param(KV_TENSOR_LAYOUT, KvTensorLayout, id="KV_TENSOR_LAYOUT"),
    pytest.param(IN_FLIGHT_TOKENS, InFlightTokens, id="IN_FLIGHT_TOKENS"),
    pytest.param(SPEC_BUCKETS, SpecBuckets, id="SPEC_BUCKETS"),
    pytest.param(PAGE_UNIFICATION, PageUnification, id="PAGE_UNIFICATION"),
    pytest.param(BATCH_DEFAULTS, BatchDefaults, id="BATCH_DEFAULTS"),
    pytest.param(MLA_BLOCK_SIZE, MlaBlockSize, id="MLA_BLOCK_SIZE"),
    pytest.param(HYBRID_ALIGNMENT, HybridBlockAlignment, id="HYBRID_ALIGNMENT"),
    pytest.param(UNHASHED_TO_HEAD, FreedUnhashedBlocks, id="UNHASHED_TO_HEAD"),
    pytest.param(WHOLE_PROMPT_FIRST, Admission, id="WHOLE_PROMPT_FIRST"),
    pytest.param(STATS_AT_LOOKUP, PrefixStats, id="STATS_AT_LOOKUP"),
    pytest.param(BATCHES_IN_FLIGHT, Scheduling, id="BATCHES_IN_FLIGHT"),
    pytest.param(CACHES_REACHABLE_ONLY, PrefixCacheRetention, id="CACHES_REACHABLE_ONLY"),
    pytest.param(FREES_PROCESSED_ONLY, WindowFrees, id="FREES_PROCESSED_ONLY"),
    pytest.param(MAMBA_CHUNK_END, MambaChunkEnds, id="MAMBA_CHUNK_END"),
    pytest.param(RETIRES_PAST_NULLS, MambaRetirement, id="RETIRES_PAST_NULLS"),
    pytest.param(ONE_BLOCK_SIZE, HybridBlockSizes, id="ONE_BLOCK_SIZE"),
    pytest.param(CONFIG_CLASSES, ConfigClasses, id="CONFIG_CLASSES"),
    pytest.param(CONFIG_WIDE_WINDOW, ConfigWideWindow, id="CONFIG_WIDE_WINDOW"),
    pytest.param(SUGGESTION_LOG_LEVEL, LogFormat, id="SUGGESTION_LOG_LEVEL"),
    pytest.param(USAGE_LINE, LogFormat, id="USAGE_LINE"),
    pytest.param(CAPTURE_SIZES, CudagraphCaptureSizes, id="CAPTURE_SIZES"),
    pytest.param(CAPTURE_PLANS, CudagraphCaptureSizes, id="CAPTURE_PLANS"),
    pytest.param(KV_SIZING, KvSizing, id="KV_SIZING"),
    pytest.param(GRAPH_ESTIMATE_TAKEN, KvSizing, id="GRAPH_ESTIMATE_TAKEN"),
    pytest.param(MEASURED_MARGIN, MeasuredKvMargin, id="MEASURED_MARGIN"),
    pytest.param(AUTO_FIT_PASSES, AutoFitPasses, id="AUTO_FIT_PASSES"),
]


@pytest.mark.parametrize(("table", "policy"), POLICY_TABLES)
def test_every_policy_value_has_its_implementation(table, policy):
    assert set(table) == set(get_args(policy))


def test_every_mamba_cache_mode_rule_has_its_release():
    assert set(MAMBA_MODE_RULES) == {release.mamba_cache_modes for release in RELEASES.values()}
    assert set(get_args(MambaCacheMode)) <= set(MAMBA_CACHE_MODES)


def test_the_engine_policies_move_the_records(traces_dir):
    """Each engine policy of 0.33.0, put alone on 0.17.1, changes a golden trace's replay."""
    def replayed(release):
        trace = load_trace(traces_dir / "stress-701.json", {"scheduling": "sync"})
        return replay(replace(trace, config=replace(trace.config, release=release)))

    plain = replayed(VLLM_0_17_1)
    for policy in ("freed_unhashed_blocks", "admission", "prefix_stats"):
        changed = replayed(replace(VLLM_0_17_1, version="test", **{policy: getattr(VLLM_0_33_0, policy)}))
        assert changed != replace(plain, config=changed.config), policy


@pytest.mark.parametrize(("policy", "case"), [
    ("mamba_cache_modes", "hybrid-606-0.33.0-sync"),
    ("prefix_cache_retention", "hybrid-702-0.33.0-sync"),
    ("window_frees", "hybrid-704-0.33.0-async"),
    ("mamba_chunk_ends", "hybrid-701-0.33.0-sync"),
    ("mamba_retirement", "hybrid-701-0.33.0-async"),
    ("admission", "hybrid-601-0.33.0-sync"),
])
def test_each_hybrid_policy_of_0_33_0_is_needed_for_its_records(policy, case):
    """0.33.0 with one policy put back to 0.17.1's value no longer reproduces a hybrid golden."""
    (golden,) = [c for c in GOLDEN_CASES if c.id == case]
    expected = [normalised(record) for record in golden.records()[:-1]]

    def records(release) -> list[dict]:
        trace = load_trace(golden.trace, golden.engine)
        collected: list[dict] = []
        replay(replace(trace, config=replace(trace.config, release=release)), lambda result, scheduler, arrived:
               collected.append(normalised(step_record(result, scheduler, arrived, dump_free_queue=True))))
        return collected

    assert records(VLLM_0_33_0) == expected
    assert records(replace(VLLM_0_33_0, version="test", **{policy: getattr(VLLM_0_17_1, policy)})) != expected


def test_the_default_utilization_is_the_releases():
    other = replace(VLLM_0_17_1, version="test", gpu_memory_utilization=0.92)
    assert PlanRequest.of(model="m", release=VLLM_0_17_1).utilization == 0.9
    assert PlanRequest.of(model="m", release=VLLM_0_33_0).utilization == 0.92
    assert PlanRequest.of(model="m", release=other).utilization == 0.92
    assert PlanRequest.of(model="m", release=other, gpu_memory_utilization=0.5).utilization == 0.5


def test_the_capacity_reserve_moves_the_fitting_boundary():
    # one request of 64 tokens needs exactly 4 blocks of 8,192 bytes x 24 layers
    specs = {f"model.layers.{i}.self_attn.attn": FullAttentionSpec(16, 2, 64, "bfloat16") for i in range(24)}
    limits, exact = SizingLimits(64, 2048), 4 * 8192 * 24
    assert size_kv_cache([specs], [exact], limits, release=VLLM_0_17_1).fits
    reserving = replace(VLLM_0_17_1, version="test", capacity_reserve_blocks=1)
    assert not size_kv_cache([specs], [exact], limits, release=reserving).fits
    assert size_kv_cache([specs], [exact + 8192 * 24], limits, release=reserving).fits


def test_cuda_graphs_leave_the_budget_only_where_the_release_says(catalog_shape):
    budget = MemoryBudget(total_bytes=100, free_at_start_bytes=100, utilization=0.9, weights_bytes=10,
                          activation_peak_bytes=5, non_torch_bytes=5, cuda_graph_bytes=7, release=VLLM_0_17_1)
    assert budget.available_kv_bytes == 90 - 20
    taking = replace(VLLM_0_17_1, version="test", cuda_graphs_in_budget=True)
    assert replace(budget, release=taking).available_kv_bytes == 90 - 20 - 7


def test_prefix_caching_of_hybrids_defaults_to_the_releases(catalog_shape):
    nemotron = catalog_shape("nvidia/Nemotron-H-56B-Base-8K")
    assert not resolve_cache_layout(
        nemotron, CacheSettings(max_model_len=8192, release=VLLM_0_17_1)).enable_prefix_caching
    caching = replace(VLLM_0_17_1, version="test", prefix_caching_for_hybrids=True)
    assert resolve_cache_layout(nemotron, CacheSettings(max_model_len=8192, release=caching)).enable_prefix_caching


def test_no_module_compares_version_strings():
    found = []
    for path in KVPLAN.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Compare):
                for side in (node.left, *node.comparators):
                    if isinstance(side, ast.Constant) and isinstance(side.value, str) and VERSION.match(side.value):
                        found.append(f"{path.relative_to(KVPLAN)}:{node.lineno}")
    assert not found, f"compare releases through their policies, not version strings: {found}"


def test_the_newest_release_is_found_by_version_number_not_by_text():
    from kvplan.semantics.releases import _version_key

    # as text "0.4.0" > "0.34.0"; as numbers 0.34.0 is the newer, which is what NEWEST_RELEASE takes
    assert _version_key(replace(VLLM_0_17_1, version="0.4.0")) < _version_key(VLLM_0_34_0)
    assert NEWEST_RELEASE is max(RELEASES.values(), key=_version_key)
