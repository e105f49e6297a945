"""What a check evaluates: a plan made on the spot, or a profile saved by `kvplan profile --save`.

Either way the target holds the plan's summary, the profile's when there is one, and the
`PlanRequest` that reproduces the pool, so that the what-if questions (the longest request that
fits, the memory a requirement needs) are answered by the same sizing functions. A saved profile
is refused (exit 2) when its provenance does not match what the spec asks for: other vLLM
semantics, another model config, other settings.

Reading a saved profile, or planning a catalog model with `kv_cache_memory`, never imports torch;
planning from `gpu` + `gpu_memory_utilization` runs the fake profile backend, which does."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kvplan.errors import KvplanError
from kvplan.semantics.releases import Release
from kvplan.usecases.check.spec import TargetSpec
from kvplan.usecases.plan import SETTING_NAMES, PlanRequest, PlanResult, PlanSummary, plan
from kvplan.usecases.profile_summary import ProfileSummary, load_profile, profile_mismatches

# spec setting name -> the request's setting, where they differ (the spec takes sizes as `kvplan plan` flags do)
REQUEST_FIELD = {"kv_cache_memory": "kv_cache_memory_bytes", "gpu_memory": "gpu_memory_bytes"}
# request fields a file (spec, profile provenance) never sets: only the command line does
NOT_FROM_FILES = ("trust_remote_code", "release")
# settings left unset in a profile's request, and where its plan says what they resolved to
EFFECTIVE_IN_PLAN: dict[str, Callable[[PlanSummary], Any]] = {
    "block_size": lambda plan: plan.block_size,
    "max_model_len": lambda plan: plan.max_model_len,
    "max_num_batched_tokens": lambda plan: plan.max_num_batched_tokens,
    "max_num_seqs": lambda plan: plan.max_num_seqs,
    "enable_prefix_caching": lambda plan: plan.enable_prefix_caching,
}


@dataclass(frozen=True)
class Budget:
    """A profile's measured memory, so that KV bytes can be turned into a utilisation."""

    total_bytes: int
    non_kv_bytes: int
    utilization: float


@dataclass(frozen=True)
class Target:
    kind: Literal["plan", "profile"]
    label: str
    plan: PlanSummary | None            # None when a profile was refused at start-up
    profile: ProfileSummary | None
    request: PlanRequest                # reproduces the pool: kv_cache_memory_bytes is the pool's memory
    budget: Budget | None = None
    path: Path | None = None
    weights_warning: str | None = None  # the plan's, when it could not count the model's weights

    @property
    def fits(self) -> bool:
        if self.profile is not None:
            return self.profile.fits
        return self.plan is not None and self.plan.fits

    @property
    def num_blocks(self) -> int | None:
        return None if self.plan is None else self.plan.num_blocks


def load_target(spec: TargetSpec, shown: str, release: Release, *, trust_remote_code: bool = False) -> Target:
    """The spec's target; `trust_remote_code` is the command line's (`kvplan check --trust-remote-code`):
    neither the spec nor a profile's provenance can turn it on."""
    if spec.profile is not None:
        return _saved_profile(spec, shown, release, trust_remote_code)
    return plan_target(_request(spec, shown, release, trust_remote_code))


def _request(spec: TargetSpec, shown: str, release: Release, trust_remote_code: bool) -> PlanRequest:
    if spec.model is None:
        raise KvplanError(f"{shown}: target.model: required to plan on the spot (or give target.profile)")
    if spec.config_sha256 is not None:
        raise KvplanError(f"{shown}: target.config_sha256: applies to a saved profile (target.profile)")
    settings = {REQUEST_FIELD.get(key, key): value for key, value in spec.settings.items()}
    return PlanRequest.of(model=spec.model, release=release, trust_remote_code=trust_remote_code, **settings)


def plan_target(request: PlanRequest) -> Target:
    """Plan on the spot: `kvplan plan` with `kv_cache_memory`, else the fake profile backend."""
    if request.args.kv_cache_memory_bytes is not None:
        result = plan(request)
        memory = f"kv_cache_memory {request.args.kv_cache_memory_bytes:,} B"
        return plan_result_target(result, f"plan of {result.setup.shape.model_id} with {memory}")
    from kvplan.errors import require_profile_extra

    require_profile_extra("a check target planned from gpu and gpu_memory_utilization (without kv_cache_memory)")
    from kvplan.usecases.profile import ProfileRequest, run_profile

    profiled = run_profile(ProfileRequest(plan=request, backend="fake", allocate=False))
    return profile_target(profiled.summary, None, release=request.release)


def plan_result_target(result: PlanResult, label: str) -> Target:
    """A plan at hand; its request is replanned with the KV memory the plan used (also when it was
    predicted for a GPU)."""
    request = result.request.with_settings(kv_cache_memory_bytes=result.kv_cache_memory_bytes,
                                  with_weights=False)
    return Target("plan", label, result.summary, None, request, weights_warning=result.weights_warning)


def profile_target(profile: ProfileSummary, path: Path | None, model: str | None = None,
                   *, release: Release, trust_remote_code: bool = False) -> Target:
    """A profile as a target; `model` replaces the provenance's model for replanning (a config.json
    beside the spec when the profile's model is not in the catalog). The provenance is data: its
    knobs say how the profile was made, and `trust_remote_code` among them is never a setting."""
    provenance = profile.provenance
    if provenance.knobs is None:
        where = path.name if path else "the profile"
        raise KvplanError(f"{where}: no provenance.knobs: not a profile saved by `kvplan profile --save`; "
                          "profile again with this kvplan")
    settings = {key: value for key, value in provenance.knobs.items()
                if key in SETTING_NAMES and key not in NOT_FROM_FILES}
    settings["trust_remote_code"] = trust_remote_code
    settings["model"] = model or provenance.model or settings.get("model")
    settings["with_weights"] = False
    if profile.plan is not None:
        settings["kv_cache_memory_bytes"] = profile.plan.kv_cache_memory_bytes
    budget = None
    total, non_kv = profile.total_bytes, profile.non_kv_bytes
    if not profile.kv_cache_memory_given and total is not None and non_kv is not None:
        budget = Budget(total, non_kv, float(profile.gpu_memory_utilization or settings["gpu_memory_utilization"]))
    predicted = " (predicted)" if profile.predicted else ""
    label = f"profile {path.name if path else ''} of {settings['model']} on {profile.device}{predicted}"
    request = PlanRequest.of(release=release, **settings)
    return Target("profile", " ".join(label.split()), profile.plan, profile, request, budget, path)


def _saved_profile(spec: TargetSpec, shown: str, release: Release, trust_remote_code: bool) -> Target:
    assert spec.profile is not None
    document = load_profile(spec.profile, f"{shown}: target.profile ({spec.profile.name})")
    expected_sha = spec.config_sha256
    if spec.model is not None:
        from kvplan.sources.models import resolve_config

        resolved_sha = resolve_config(spec.model).sha256
        if expected_sha is not None and expected_sha != resolved_sha:
            raise KvplanError(f"{shown}: target.config_sha256: {expected_sha} is not the sha256 of {spec.model}'s "
                              f"config.json ({resolved_sha})")
        expected_sha = resolved_sha
    reasons = profile_mismatches(document, release, config_sha256=expected_sha)
    reasons += _setting_mismatches(document, spec.settings)
    if reasons:
        raise KvplanError(
            f"{shown}: target.profile {spec.profile.name} does not match the spec: {'; '.join(reasons)}: "
            "profile again with the spec's model and settings (`kvplan profile ... --save`), or fix the spec")
    return profile_target(document, spec.profile, spec.model, release=release, trust_remote_code=trust_remote_code)


def _setting_mismatches(profile: ProfileSummary, wanted: dict[str, Any]) -> list[str]:
    saved = profile.provenance.knobs or {}
    reasons = []
    for key, value in wanted.items():
        field = REQUEST_FIELD.get(key, key)
        if field not in saved:
            reasons.append(f"it does not record {key}")
            continue
        # a setting left at vLLM's default matches the value that default resolved to
        effective = saved[field]
        if effective is None and field in EFFECTIVE_IN_PLAN and profile.plan is not None:
            effective = EFFECTIVE_IN_PLAN[field](profile.plan)
        if effective != value:
            reasons.append(f"{key} is {effective!r} there, the spec asks for {value!r}")
    return reasons
