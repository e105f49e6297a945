"""Targets: a saved profile is read without torch and refused when its provenance does not match."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from kvplan.errors import KvplanError
from kvplan.semantics.releases import VLLM_0_33_0, release_named
from kvplan.usecases.check.spec import TargetSpec
from kvplan.usecases.check.target import load_target
from kvplan.usecases.plan import SETTING_NAMES, PlanRequest, plan
from tests.usecases.check.factories import EXAMPLES, QWEN

PROFILE = EXAMPLES / "profiles" / "qwen2-0.5b-l4.json"
# the release whose semantics the example profile was saved under
PROFILE_RELEASE = release_named(json.loads(PROFILE.read_text())["provenance"]["vllm_semantics"])


def saved_profile(tmp_path, **provenance_changes) -> str:
    document = json.loads(PROFILE.read_text())
    document["provenance"].update(provenance_changes)
    (tmp_path / "p.json").write_text(json.dumps(document))
    return "p.json"


def spec_with_target(write_spec, target: str):
    return write_spec(f"[target]\n{target}\n[[assert]]\nfits = true")


def test_the_example_profile_is_reproduced_by_the_planner():
    """A saved profile's plan record is what `kvplan plan` gives for its knobs and KV memory,
    so a check's what-if answers (replanning) agree with the profile."""
    document = json.loads(PROFILE.read_text())
    record = document["plan"]
    knobs = {k: v for k, v in document["provenance"]["knobs"].items() if k in SETTING_NAMES}
    replanned = plan(PlanRequest.of(**{**knobs, "kv_cache_memory_bytes": record["kv_cache_memory_bytes"]},
                                 release=PROFILE_RELEASE))
    assert replanned.num_blocks == record["num_blocks"] == document["num_blocks"]
    assert replanned.sizing.gpu_kv_cache_tokens == record["gpu_kv_cache_tokens"]


def test_a_matching_profile_is_the_target(write_spec, tmp_path):
    name = saved_profile(tmp_path)
    spec = spec_with_target(write_spec, f'profile = "{name}"\nmodel = "{QWEN}"\ngpu = "l4-24gb"\nmax_model_len = 32768')
    target = load_target(spec.target, "spec.toml", PROFILE_RELEASE)
    assert target.kind == "profile" and target.fits
    assert target.budget.total_bytes == target.profile.total_bytes
    assert target.budget.non_kv_bytes == target.profile.non_kv_bytes
    assert target.request.args.kv_cache_memory_bytes == target.plan.kv_cache_memory_bytes


@pytest.mark.parametrize(("provenance", "target", "reason"), [
    ({"vllm_semantics": "0.11.0"}, "", "vLLM 0.11.0 semantics"),
    ({}, 'model = "Qwen/Qwen3-8B"', "different model config"),
    ({}, 'config_sha256 = "00ff"', "different model config"),
    ({}, "gpu_memory_utilization = 0.95", "gpu_memory_utilization is 0.9 there, the spec asks for 0.95"),
    ({}, 'gpu = "h100-sxm-80gb"', "gpu is 'l4-24gb' there"),
    ({}, "max_model_len = 4096", "max_model_len is 32768 there"),
])
def test_a_mismatched_profile_is_refused(write_spec, tmp_path, provenance, target, reason):
    name = saved_profile(tmp_path, **provenance)
    spec = spec_with_target(write_spec, f'profile = "{name}"\n{target}')
    with pytest.raises(KvplanError) as raised:
        load_target(spec.target, "spec.toml", PROFILE_RELEASE)
    message = str(raised.value)
    assert message.startswith("spec.toml: target.profile p.json does not match the spec: ")
    assert reason in message
    assert raised.value.exit_code == 2


def test_a_profile_of_another_release_is_refused(write_spec, tmp_path):
    other = next(version for version in ("0.17.1", "0.33.0") if version != PROFILE_RELEASE.version)
    name = saved_profile(tmp_path)
    spec = write_spec(f'vllm_version = "{other}"\n[target]\nprofile = "{name}"\n[[assert]]\nfits = true')
    with pytest.raises(KvplanError, match=f"it follows vLLM {PROFILE_RELEASE.version} semantics, this check follows "
                                          f"{other}"):
        load_target(spec.target, "spec.toml", spec.release)


def test_a_missing_profile_is_bad_input(write_spec):
    spec = spec_with_target(write_spec, 'profile = "nowhere.json"')
    with pytest.raises(KvplanError, match="no such file"):
        load_target(spec.target, "spec.toml", PROFILE_RELEASE)


def test_planning_on_the_spot_needs_a_model():
    with pytest.raises(KvplanError, match=r"spec\.toml: target\.model: required"):
        load_target(TargetSpec(settings={"kv_cache_memory": 10**9}), "spec.toml", VLLM_0_33_0)


@pytest.mark.parametrize("spec", ["l4-chat.toml", "fail-tight-kv-cache.toml"])
def test_check_never_imports_torch_for_a_saved_profile_or_a_catalog_plan(spec):
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from kvplan.usecases.check.spec import load_spec\n"
        "from kvplan.usecases.check.evaluate import evaluate\n"
        f"report = evaluate(load_spec(Path({str(EXAMPLES / spec)!r})))\n"
        "heavy = sorted(m for m in sys.modules if m.split('.')[0] in ('torch', 'transformers'))\n"
        "print(len(report.results), heavy)\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         env={"HF_HUB_OFFLINE": "1", "PATH": ""})
    count, heavy = out.stdout.split(" ", 1)
    assert int(count) > 0
    assert heavy.strip() == "[]"
