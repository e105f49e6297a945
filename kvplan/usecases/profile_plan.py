"""`kvplan plan --profile P.json`: the KV cache sized from a saved profile's measured terms, at other
settings, as if the GPU had been measured again.

A profile (`kvplan profile --save`, or `kvplan explain LOG --save-profile`) holds the device's total
memory and what the start-up took besides the KV cache: non-KV memory, and the CUDA-graph estimate
where the release takes it from the budget. At another `gpu_memory_utilization` the KV memory is
vLLM's formula on those terms, `ceil(total x utilization) - non-KV - graphs`; `max_model_len`, the
KV dtype, the block size and prefix caching change only the sizing. `max_num_batched_tokens` and
`max_num_seqs` change the profile run itself (its activation peak, the runner's state, the graphs
captured): those terms are re-predicted with the fake profile run (the change between the profile's
settings and the new ones, added to what was measured) and labelled so. A profile of another
model, dtype, parallel layout or device is not reused: profile again.

    plan_from_profile(profile, where, overrides) -> PlanResult"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any

from kvplan.errors import KvplanError
from kvplan.semantics.memory.budget import requested_memory
from kvplan.semantics.releases import RELEASES, Release
from kvplan.units import format_gib
from kvplan.usecases.plan import SETTING_NAMES, PlanRequest, PlanResult, plan, settle
from kvplan.usecases.profile_summary import ProfileSummary

# what a profile's terms belong to: a change of these needs another profile
_MEASURED_FOR = ("model", "dtype", "tensor_parallel_size", "pipeline_parallel_size", "gpu", "gpu_memory_bytes",
                 "trust_remote_code")
# the profile run's batch: a change re-predicts the terms that depend on it
_PROFILE_BATCH = ("max_num_batched_tokens", "max_num_seqs")


@dataclass(frozen=True)
class ProfileTerms:
    """A saved profile's memory, as the release adds it up."""

    total_bytes: int
    non_kv_bytes: int
    cuda_graph_bytes: int
    utilization: float


def _release(profile: ProfileSummary, where: str, release: Release | None) -> Release:
    saved = profile.provenance.vllm_semantics
    if saved not in RELEASES:
        raise KvplanError(f"{where}: it follows vLLM {saved} semantics, which this kvplan does not reproduce")
    if release is not None and release.version != saved:
        raise KvplanError(f"{where}: it follows vLLM {saved} semantics and --vllm-version is {release.version}: "
                          f"its terms are measured by {saved}'s rules; give --vllm-version {saved} or profile again")
    return RELEASES[saved]


def _terms(profile: ProfileSummary, where: str, release: Release) -> ProfileTerms:
    if profile.kv_cache_memory_given:
        raise KvplanError(f"{where}: made with --kv-cache-memory, so its KV memory was given, not measured: "
                          "profile without it to size the cache from the profile's terms")
    if profile.total_bytes is None or profile.non_kv_bytes is None or profile.gpu_memory_utilization is None:
        raise KvplanError(f"{where}: no measured terms (total_bytes, non_kv_bytes, gpu_memory_utilization): vLLM "
                          "refused to start before the profile run; profile a configuration that starts")
    graphs = (profile.cuda_graph_estimate_bytes or 0) if release.cuda_graphs_in_budget else 0
    return ProfileTerms(profile.total_bytes, profile.non_kv_bytes, graphs, profile.gpu_memory_utilization)


def _saved_request(profile: ProfileSummary, where: str, release: Release) -> PlanRequest:
    knobs = profile.provenance.knobs
    if knobs is None:
        raise KvplanError(f"{where}: no provenance.knobs: not a profile saved by `kvplan profile --save` or "
                          "`kvplan explain --save-profile`")
    fields = {key: value for key, value in knobs.items()
              if key in SETTING_NAMES and key not in ("release", "trust_remote_code", "kv_cache_memory_bytes")}
    fields["model"] = fields.get("model") or profile.provenance.model
    return PlanRequest.of(release=release, **fields)


def plan_from_profile(profile: ProfileSummary, where: str, overrides: Mapping[str, Any],
                      release: Release | None = None) -> PlanResult:
    """The plan at the saved settings changed by `overrides` (by name: `PlanRequest.of`), on the
    profile's measured terms."""
    release = _release(profile, where, release)
    terms = _terms(profile, where, release)
    saved = _saved_request(profile, where, release)
    if overrides.get("kv_cache_memory_bytes") is not None:
        raise KvplanError("--profile and --kv-cache-memory: give one (the profile's terms size the KV memory)")
    changed = sorted(key for key in _MEASURED_FOR
                     if overrides.get(key) is not None and overrides[key] != saved.setting(key))
    if changed:
        raise KvplanError(f"{where}: its terms were measured for another {', '.join(changed)}: profile that "
                          "configuration (`kvplan profile --save`, or `kvplan explain LOG --save-profile`)")
    request = saved.with_settings(**{key: value for key, value in overrides.items()
                                     if value is not None and key in SETTING_NAMES and key not in _MEASURED_FOR})
    request = replace(request, gpu_memory_bytes=terms.total_bytes)
    setup = settle(request)
    labels: list[str] = []
    non_kv, graphs = terms.non_kv_bytes, terms.cuda_graph_bytes
    saved_batch = _saved_batch(profile, saved)
    new_batch = (setup.batch.max_num_batched_tokens, setup.batch.max_num_seqs)
    if saved_batch != new_batch:
        delta_non_kv, delta_graphs = _repredicted(saved, request, saved_batch, new_batch)
        non_kv, graphs = non_kv + delta_non_kv, graphs + delta_graphs
        labels.append(
            f"re-predicted: the profile run's batch changes from {saved_batch[0]:,} tokens / {saved_batch[1]:,} seqs "
            f"to {new_batch[0]:,} / {new_batch[1]:,}: the activation peak, runner state and CUDA-graph estimate move "
            f"by {format_gib(delta_non_kv + delta_graphs)} GiB (the fake profile run's change, added to the "
            "profile's measured terms)")
    kv = requested_memory(terms.total_bytes, request.utilization) - non_kv - graphs
    result = plan(request.with_args(kv_cache_memory_bytes=kv), setup)
    graph_words = f" - CUDA-graph estimate {format_gib(graphs)} GiB" if release.cuda_graphs_in_budget else ""
    source = (f"saved profile {where}: ceil({format_gib(terms.total_bytes)} GiB x {request.utilization}) - non-KV "
              f"{format_gib(non_kv)} GiB{graph_words} ({'measured' if not labels else 'measured, re-predicted'})")
    return replace(result, memory_source=source, warnings=(*result.warnings, *labels))


def _saved_batch(profile: ProfileSummary, saved: PlanRequest) -> tuple[int, int]:
    """The batch the profile ran: its plan's limits (what vLLM settled), else the saved settings'."""
    if profile.plan is not None:
        return profile.plan.max_num_batched_tokens, profile.plan.max_num_seqs
    batch = settle(saved).batch
    return batch.max_num_batched_tokens, batch.max_num_seqs


def _repredicted(saved: PlanRequest, request: PlanRequest, before: tuple[int, int],
                 after: tuple[int, int]) -> tuple[int, int]:
    """How the non-KV memory and the graph estimate move from one profile batch to another, by the
    fake profile run at both (torch needed)."""
    from kvplan.errors import require_profile_extra

    require_profile_extra("re-predicting the terms that --max-num-batched-tokens / --max-num-seqs change")
    from kvplan.usecases.profile import ProfileRequest, run_profile

    def budget(tokens: int, seqs: int) -> tuple[int, int]:
        run = run_profile(ProfileRequest(plan=request.with_args(max_num_batched_tokens=tokens, max_num_seqs=seqs,
                                                      kv_cache_memory_bytes=None), backend="fake", allocate=False))
        if run.budget is None:
            raise KvplanError(f"re-predicting at {tokens:,} tokens / {seqs:,} seqs: the profile run refused it: "
                              f"{run.finding}")
        return run.budget.non_kv_bytes, run.budget.cuda_graph_budget_bytes

    old_non_kv, old_graphs = budget(*before)
    new_non_kv, new_graphs = budget(*after)
    return new_non_kv - old_non_kv, new_graphs - old_graphs
