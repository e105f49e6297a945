"""What a check evaluates: a plan made on the spot, or a profile saved by `kvplan profile --save`.

Either way the target holds the plan record (`kvplan plan --json`), the profile record when there
is one, and the `PlanRequest` that reproduces the pool, so that the what-if questions (the
longest request that fits, the memory a requirement needs) are answered by the same sizing
functions. A saved profile is refused (exit 2) when its provenance does not match what the spec
asks for: other vLLM semantics, another model config, other knobs.

Reading a saved profile, or planning a catalog model with `kv_cache_memory`, never imports torch;
planning from `gpu` + `gpu_memory_utilization` runs the fake profile backend, which does."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from kvplan.errors import KvplanError
from kvplan.usecases.check.spec import TargetSpec
from kvplan.usecases.plan import PlanRequest, plan

# spec knob name -> PlanRequest field, where they differ (the spec takes sizes as `kvplan plan` flags do)
REQUEST_FIELD = {"kv_cache_memory": "kv_cache_memory_bytes", "gpu_memory": "gpu_memory_bytes"}
PLAN_FIELDS = tuple(f.name for f in dataclasses.fields(PlanRequest))
EFFECTIVE_IN_RECORD = ("block_size", "max_model_len", "max_num_batched_tokens", "max_num_seqs", "enable_prefix_caching")


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
    record: dict[str, Any] | None       # the plan record; None when a profile was refused at start-up
    profile: dict[str, Any] | None      # the profile record
    request: PlanRequest                # reproduces the pool: kv_cache_memory_bytes is the pool's memory
    budget: Budget | None = None
    path: Path | None = None

    @property
    def fits(self) -> bool:
        source = self.profile if self.profile is not None else self.record
        return bool(source and source.get("fits"))

    def plan_value(self, key: str) -> Any:
        return None if self.record is None else self.record.get(key)

    def describe(self) -> dict[str, Any]:
        record = self.record or {}
        gpu = record.get("gpu")
        return {
            "kind": self.kind,
            "label": self.label,
            "profile": None if self.path is None else str(self.path),
            "model": record.get("model", self.request.model),
            "config_sha256": record.get("config_sha256"),
            "gpu": gpu.get("key") if isinstance(gpu, dict) else None,
            "predicted": None if self.profile is None else self.profile.get("predicted"),
            "num_blocks": record.get("num_blocks"),
        }


def load_target(spec: TargetSpec, shown: str) -> Target:
    if spec.profile is not None:
        return _saved_profile(spec, shown)
    return plan_target(_request(spec, shown))


def _request(spec: TargetSpec, shown: str) -> PlanRequest:
    if spec.model is None:
        raise KvplanError(f"{shown}: target.model: required to plan on the spot (or give target.profile)")
    if spec.config_sha256 is not None:
        raise KvplanError(f"{shown}: target.config_sha256: applies to a saved profile (target.profile)")
    knobs = {REQUEST_FIELD.get(key, key): value for key, value in spec.knobs.items()}
    return PlanRequest(model=spec.model, **knobs)


def plan_target(request: PlanRequest) -> Target:
    """Plan on the spot: `kvplan plan` with `kv_cache_memory`, else the fake profile backend."""
    if request.kv_cache_memory_bytes is not None:
        result = plan(request)
        memory = f"kv_cache_memory {request.kv_cache_memory_bytes:,} B"
        return Target("plan", f"plan of {result.setup.shape.model_id} with {memory}", result.to_record(), None,
                      dataclasses.replace(request, with_weights=False))
    from kvplan.errors import require_profile_extra

    require_profile_extra("a check target planned from gpu and gpu_memory_utilization (without kv_cache_memory)")
    from kvplan.usecases.profile import ProfileOptions, run_profile
    from kvplan.usecases.profile_record import profile_record

    result = run_profile(ProfileOptions(request=request, backend="fake", allocate=False))
    return profile_target(profile_record(result), None)


def profile_target(document: dict[str, Any], path: Path | None, model: str | None = None) -> Target:
    """A profile record as a target; `model` replaces the provenance's model for replanning (a
    config.json beside the spec when the profile's model is not in the catalog)."""
    provenance = document.get("provenance")
    if not isinstance(provenance, dict) or not isinstance(provenance.get("knobs"), dict):
        where = path.name if path else "the profile"
        raise KvplanError(f"{where}: no provenance.knobs: not a profile saved by `kvplan profile --save`; "
                          "profile again with this kvplan")
    record = document.get("plan")
    knobs = {key: value for key, value in provenance["knobs"].items() if key in PLAN_FIELDS}
    knobs["model"] = model or provenance.get("model") or knobs.get("model")
    knobs["with_weights"] = False
    if isinstance(record, dict):
        knobs["kv_cache_memory_bytes"] = record.get("kv_cache_memory_bytes")
    budget = None
    total, non_kv = document.get("total_bytes"), document.get("non_kv_bytes")
    if not document.get("kv_cache_memory_given") and isinstance(total, int) and isinstance(non_kv, int):
        budget = Budget(total, non_kv, float(document.get("gpu_memory_utilization") or knobs["gpu_memory_utilization"]))
    predicted = " (predicted)" if document.get("predicted") else ""
    label = f"profile {path.name if path else ''} of {knobs['model']} on {document.get('device')}{predicted}"
    return Target("profile", " ".join(label.split()), record if isinstance(record, dict) else None, document,
                  PlanRequest(**knobs), budget, path)


def _saved_profile(spec: TargetSpec, shown: str) -> Target:
    from kvplan.usecases.profile_record import load_profile, profile_mismatches

    assert spec.profile is not None
    document = load_profile(spec.profile)
    expected_sha = spec.config_sha256
    if spec.model is not None:
        from kvplan.semantics.models.resolve import resolve_config

        resolved_sha = resolve_config(spec.model).sha256
        if expected_sha is not None and expected_sha != resolved_sha:
            raise KvplanError(f"{shown}: target.config_sha256: {expected_sha} is not the sha256 of {spec.model}'s "
                              f"config.json ({resolved_sha})")
        expected_sha = resolved_sha
    reasons = profile_mismatches(document, config_sha256=expected_sha)
    reasons += _knob_mismatches(document, spec.knobs)
    if reasons:
        raise KvplanError(
            f"{shown}: target.profile {spec.profile.name} does not match the spec: {'; '.join(reasons)}: "
            "profile again with the spec's model and knobs (`kvplan profile ... --save`), or fix the spec")
    return profile_target(document, spec.profile, spec.model)


def _knob_mismatches(document: dict[str, Any], wanted: dict[str, Any]) -> list[str]:
    saved = (document.get("provenance") or {}).get("knobs") or {}
    record = document.get("plan") or {}
    reasons = []
    for key, value in wanted.items():
        field = REQUEST_FIELD.get(key, key)
        if field not in saved:
            reasons.append(f"it does not record {key}")
            continue
        # a knob left at vLLM's default matches the value that default resolved to
        effective = record.get(field) if saved[field] is None and field in EFFECTIVE_IN_RECORD else saved[field]
        if effective != value:
            reasons.append(f"{key} is {effective!r} there, the spec asks for {value!r}")
    return reasons
