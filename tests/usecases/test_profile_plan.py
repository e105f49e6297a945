"""`plan --profile`: a saved profile's measured terms size the cache at other settings. Issue 22's
done-when: a profile saved from a log gives, at the log's own settings, the log's available KV
memory (within 1 MiB), and at another utilization the figure vLLM's formula gives."""

from __future__ import annotations

import json
import math

import pytest

from kvplan.errors import KvplanError
from kvplan.report.explain_json import log_profile_record
from kvplan.semantics.memory.startup_log import GIB
from kvplan.semantics.releases import VLLM_0_17_1, VLLM_0_33_0
from kvplan.usecases.explain.explain import ExplainRequest, explain
from kvplan.usecases.explain.log_reader import decode_log
from kvplan.usecases.profile_plan import plan_from_profile
from kvplan.usecases.profile_summary import parse_profile

MIB = 1 << 20
LOGS = {
    "0.17.1": ("vllm-0.19.0-llama-3.1-8b-h100-tp1.log", {}, 58.11, 0.95),
    "0.33.0": ("vllm-0.31.0-llama-3.1-8b-a100-excerpt.log", {"model": "meta-llama/Llama-3.1-8B-Instruct"}, 56.21, 0.92),
}


def saved(data_dir, version):
    name, given, _, _ = LOGS[version]
    result = explain(ExplainRequest(decode_log((data_dir / "logs" / name).read_bytes()), name, given, version,
                                    predict_memory=False))
    record = json.loads(json.dumps(log_profile_record(result)))
    return result, parse_profile(record, name)


@pytest.mark.parametrize("version", sorted(LOGS))
def test_at_the_logs_own_settings_the_logs_kv_memory(data_dir, version):
    _, profile = saved(data_dir, version)
    result = plan_from_profile(profile, "p.json", {})
    assert abs(result.kv_cache_memory_bytes - round(LOGS[version][2] * GIB)) <= MIB
    assert result.request.release.version == version


@pytest.mark.parametrize("version", sorted(LOGS))
def test_at_another_utilization_vllms_formula(data_dir, version):
    result, profile = saved(data_dir, version)
    budget = result.logged_budget
    assert budget is not None
    total, logged_utilization = budget.total_bytes, LOGS[version][3]
    available = round(LOGS[version][2] * GIB)
    for utilization in (0.8, 0.9, 0.97):
        planned = plan_from_profile(profile, "p.json", {"gpu_memory_utilization": utilization})
        # ceil(total x u') - (ceil(total x u) - available): the non-KV memory (and graphs) as measured
        expected = math.ceil(total * utilization) - (math.ceil(total * logged_utilization) - available)
        assert planned.kv_cache_memory_bytes == expected
        assert "saved profile p.json" in planned.memory_source


def test_max_model_len_and_kv_dtype_change_the_sizing_only(data_dir):
    _, profile = saved(data_dir, "0.17.1")
    base = plan_from_profile(profile, "p.json", {})
    fp8 = plan_from_profile(profile, "p.json", {"kv_cache_dtype": "fp8", "max_model_len": 32768})
    assert fp8.kv_cache_memory_bytes == base.kv_cache_memory_bytes
    assert fp8.summary.max_model_len == 32768
    assert fp8.summary.gpu_kv_cache_tokens == pytest.approx(2 * base.summary.gpu_kv_cache_tokens, rel=0.001)


def test_a_profile_is_not_reused_for_another_model_layout_or_release(data_dir):
    _, profile = saved(data_dir, "0.17.1")
    with pytest.raises(KvplanError, match="another tensor_parallel_size"):
        plan_from_profile(profile, "p.json", {"tensor_parallel_size": 2})
    with pytest.raises(KvplanError, match="another model"):
        plan_from_profile(profile, "p.json", {"model": "Qwen/Qwen2.5-7B-Instruct"})
    with pytest.raises(KvplanError, match=r"--vllm-version 0\.17\.1"):
        plan_from_profile(profile, "p.json", {}, VLLM_0_33_0)
    with pytest.raises(KvplanError, match="give one"):
        plan_from_profile(profile, "p.json", {"kv_cache_memory_bytes": GIB})
    assert plan_from_profile(profile, "p.json", {}, VLLM_0_17_1).fits


@pytest.mark.slow
def test_another_batch_re_predicts_the_terms_it_changes_and_says_so(data_dir):
    _, profile = saved(data_dir, "0.17.1")
    base = plan_from_profile(profile, "p.json", {})
    smaller = plan_from_profile(profile, "p.json", {"max_num_batched_tokens": 2048, "max_num_seqs": 256})
    # a smaller profile batch peaks lower: more KV memory, by the fake run's change
    assert smaller.kv_cache_memory_bytes > base.kv_cache_memory_bytes
    assert any(warning.startswith("re-predicted") for warning in smaller.warnings)
    assert "re-predicted" in smaller.memory_source
