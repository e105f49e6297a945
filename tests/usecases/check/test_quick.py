"""The quick forms: --assert-* flags on plan (and, once wired, profile and simulate)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from kvplan.cli.quick_asserts import verdict_exit_code
from kvplan.errors import KvplanError
from kvplan.semantics.releases import VLLM_0_17_1
from kvplan.sources.installed import default_release
from kvplan.usecases.check.assertions import Concurrency
from kvplan.usecases.check.quick import parse_quick_asserts, plan_report, profile_report, simulation_report
from kvplan.usecases.plan import PlanRequest, plan
from kvplan.usecases.profile_summary import load_profile
from tests.usecases.check.factories import GOLDEN_KV_BYTES, QWEN, tiny_workload


def test_flags_in_both_spellings():
    assertions = parse_quick_asserts(
        ["--assert-min-kv-tokens", "500000", "--assert-fits", "--assert-min-concurrency=16@8192",
         "--assert-max-model-len-fits=32768"], "plan")
    assert [(a.kind.key, a.required) for a in assertions] == [
        ("min_kv_tokens", 500000), ("fits", True), ("min_concurrency", Concurrency(16.0, 8192)),
        ("max_model_len_fits", 32768)]
    assert parse_quick_asserts([], "plan") == ()


@pytest.mark.parametrize(("args", "command", "message"), [
    (["--assert-min-kv-tokenz", "5"], "plan", "did you mean --assert-min-kv-tokens?"),
    (["--assert-max-preemptions", "0"], "plan", "applies to `kvplan simulate`, not `kvplan plan`"),
    (["--assert-min-kv-tokens", "5"], "simulate", "applies to `kvplan plan` and `kvplan profile`"),
    (["--assert-min-kv-tokens"], "plan", "needs a value"),
    (["--assert-min-kv-tokens", "lots"], "plan", "--assert-min-kv-tokens: expected a number"),
    (["--jsn"], "plan", "no such option: --jsn"),
    (["stray"], "profile", "unexpected argument: stray"),
])
def test_bad_flags_are_bad_input(args, command, message):
    with pytest.raises(KvplanError) as raised:
        parse_quick_asserts(args, command)
    assert message in str(raised.value)


def test_quick_verdicts_and_exit_codes():
    # the golden case's 131,928 blocks are 0.17.1's (block 16)
    result = plan(PlanRequest.of(model=QWEN, kv_cache_memory_bytes=GOLDEN_KV_BYTES, release=VLLM_0_17_1))
    holds = parse_quick_asserts(["--assert-min-num-blocks=131928"], "plan")
    fails = parse_quick_asserts(["--assert-min-num-blocks=131929"], "plan")
    assert verdict_exit_code(plan_report(holds, result)) == 0
    assert verdict_exit_code(plan_report(fails, result)) == 1
    assert verdict_exit_code(None, finding=True) == 1
    assert verdict_exit_code(plan_report(holds, result), finding=True) == 1


def test_a_saved_profile_is_checked_without_a_request():
    path = Path(__file__).parents[3] / "examples/checks/profiles/qwen2-0.5b-l4.json"
    profile = load_profile(path, path.name)
    assertions = parse_quick_asserts(["--assert-min-kv-tokens=1000000", "--assert-max-activation-peak-bytes=1GiB"],
                                     "profile")
    report = profile_report(assertions, profile, VLLM_0_17_1)
    assert report.passed
    assert report.results[1].measured == profile.activation_peak_bytes == json.loads(path.read_text())[
        "activation_peak_bytes"]


def test_a_simulation_is_checked_from_its_result_alone(tmp_path):
    from kvplan.usecases.simulate.driver import SimOptions, prepare
    from kvplan.usecases.simulate.simulation import simulate
    from kvplan.usecases.simulate.workload import parse_workload

    setup = prepare(parse_workload(tiny_workload(), tmp_path, "w.json"), SimOptions())
    result = simulate(setup)
    report = simulation_report(parse_quick_asserts(["--assert-max-preemptions=0"], "simulate"), result)
    verdict = report.results[0]
    assert verdict.measured == result.metrics.preemptions.total > 0
    zero = result.capacity.zero_preemption.num_gpu_blocks
    assert f"--num-gpu-blocks {zero}" in verdict.hint


def run_plan(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "kvplan", "plan", "--model", QWEN, *args],
                          capture_output=True, text=True, env={"HF_HUB_OFFLINE": "1", "PATH": ""})


def test_plan_json_stays_pure_and_the_verdict_goes_to_stderr():
    passed = run_plan("--kv-cache-memory", "24GiB", "--json", "--assert-min-kv-tokens", "2000000")
    assert passed.returncode == 0
    # 24 GiB // (block x 12,288 B per token): 32,768 blocks of 64 tokens under the default release
    assert json.loads(passed.stdout)["num_blocks"] == (24 << 30) // (default_release().default_block_size * 12288)
    assert "all 1 assertions hold" in passed.stderr
    failed = run_plan("--kv-cache-memory", "24GiB", "--json", "--assert-min-kv-tokens=3000000")
    assert failed.returncode == 1
    assert json.loads(failed.stdout)["gpu_kv_cache_tokens"] == 2_097_152
    assert "raise kv_cache_memory to 36,864,000,000 bytes" in " ".join(failed.stderr.split())
    bad = run_plan("--kv-cache-memory", "24GiB", "--assert-nonsense=1")
    assert bad.returncode == 2 and bad.stdout == ""
    assert bad.stderr.count("\n") == 1
