"""What a profile tells the other use cases, and the one reader of a saved profile: `simulate` and
`check` read a file of `kvplan profile --save` back into a typed `ProfileSummary`, on machines
without a GPU and without torch. The profile record (`kvplan.report.profile_json`) writes these
figures under the very keys read here.

    load_profile(path, where) -> ProfileSummary      (exit 2, naming the field, for anything else)
    parse_profile(document, where) -> ProfileSummary
    knobs_sha256(knobs) -> str
    profile_mismatches(profile, release, config_sha256=None, knobs=None) -> [reason, ...]"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvplan import limits
from kvplan.errors import KvplanError
from kvplan.files import parse_json, read_input_text
from kvplan.parsing import (
    FieldError,
    as_bool,
    as_int,
    as_list,
    as_number,
    as_number_or_int,
    as_object,
    as_str,
    child,
    get,
    get_optional,
    parse_calibration,
)
from kvplan.schema import Boolean, Checked, Field, Integer, ListOf, Number, Record, Text, check_document
from kvplan.semantics.engine.groups import KVCacheGroup, engine_group, spec_layout
from kvplan.semantics.kv.specs import LAYER_SPECS, MambaSpec
from kvplan.semantics.releases import RELEASES, VLLM_0_17_1, Release
from kvplan.usecases.plan import PlanSummary
from kvplan.usecases.plan_settings import CALIBRATION, PLANNING_SETTINGS

PROFILE_KIND = "kvplan.profile"
PROFILE_SCHEMA_VERSION = 1
PROFILE_SCHEMA_VERSIONS = (1,)

# The figures the profile record holds at its top level under `ProfileSummary`'s own attribute
# names, each with its reader and its value when the key is absent (None: absent or null reads as
# None). `parse_profile` reads them from this table; `report/profile_json` writes them from the
# summary under the same names (tests/report/test_profile_json.py reads a record back through here).
TOP_LEVEL_FIGURES: tuple[tuple[str, Callable[[Any, str], Any], bool | None], ...] = (
    ("fits", as_bool, False),
    ("error", as_str, None),
    ("predicted", as_bool, None),
    ("device", as_str, None),
    ("total_bytes", as_int, None),
    ("gpu_memory_utilization", as_number, None),
    ("kv_cache_memory_given", as_bool, False),
    ("weights_bytes", as_int, None),
    ("activation_peak_bytes", as_int, None),
    ("non_torch_bytes", as_int, None),
    ("non_kv_bytes", as_int, None),
    ("available_kv_bytes", as_int, None),
    ("largest_max_model_len", as_int, None),
    ("cuda_graph_estimate_bytes", as_int, None),
)

# The figures a saved profile is read back for, with their ranges: a profile is kvplan's own output,
# but a file on disk is an input like any other, checked before its numbers are used. Other keys
# are informational and pass unchecked.
_BYTES = Integer(0, limits.MAX_BYTES)
_TOKENS = Integer(0, limits.MAX_TOKENS)
_PLAN = Record({
    "model": Field(Text(max_length=limits.MAX_PATH), nullable=True),
    "config_sha256": Field(Text(max_length=64), nullable=True),
    "fits": Field(Boolean(), nullable=True),
    "error": Field(Text(max_length=100_000), nullable=True),
    "block_size": Field(Integer(1, limits.MAX_TOKENS), required=True),
    "max_model_len": Field(Integer(1, limits.MAX_TOKENS), required=True),
    "max_num_batched_tokens": Field(Integer(1, limits.MAX_TOKENS), required=True),
    "max_num_seqs": Field(Integer(1, limits.MAX_SEQS), required=True),
    "enable_prefix_caching": Field(Boolean(), required=True),
    "enable_chunked_prefill": Field(Boolean(), nullable=True),
    # what is left for the KV cache: negative when the rest of the model does not fit
    "kv_cache_memory_bytes": Field(Integer(-limits.MAX_BYTES, limits.MAX_BYTES), nullable=True),
    "num_blocks": Field(Integer(0, limits.MAX_BLOCKS), nullable=True),
    "num_usable_blocks": Field(Integer(0, limits.MAX_BLOCKS), nullable=True),
    "gpu_kv_cache_tokens": Field(Integer(0, limits.MAX_BLOCKS * 1024), nullable=True),
    "max_concurrency": Field(Number(0, limits.MAX_BLOCKS * 1024), nullable=True),
    "kv_bytes_per_token": Field(Number(0, limits.MAX_BYTES), nullable=True),
    "weights_bytes": Field(_BYTES, nullable=True),
    "weights_per_gpu_bytes": Field(_BYTES, nullable=True),
    "bytes_needed_for_one_max_len_request": Field(_BYTES, nullable=True),
    "estimated_max_model_len": Field(_TOKENS, nullable=True),
    "kv_cache_groups": Field(ListOf(Record({"spec": Field(Record({
        "block_size": Field(Integer(1, limits.MAX_TOKENS), required=True)}, open=True), required=True)},
        open=True), 0, limits.MAX_LAYERS), nullable=True),
}, open=True)
# the settings a profile was made with, which `check` replans with; trust_remote_code among them is a
# record of how it was made, never a setting (kvplan check --trust-remote-code is)
_KNOBS = Record({
    "model": Field(Text(max_length=limits.MAX_PATH), nullable=True),
    "kv_cache_memory_bytes": Field(Integer(1, limits.MAX_BYTES), nullable=True),
    "gpu_memory_bytes": Field(Integer(1, limits.MAX_BYTES), nullable=True),
    **{key: Field(field.kind, nullable=True) for key, field in PLANNING_SETTINGS.items()
       if key not in ("kv_cache_memory", "gpu_memory")},
    "with_weights": Field(Boolean(), nullable=True),
    "trust_remote_code": Field(Boolean(), nullable=True),
}, open=True)
PROFILE = Record({
    "kind": Field(Checked(Text(max_length=64), lambda kind: None if kind == PROFILE_KIND else (
        f"expected {PROFILE_KIND!r} (a file written by `kvplan profile --save`), got {kind!r}")), required=True),
    "schema_version": Field(Integer(1, 10**6)),
    "fits": Field(Boolean(), nullable=True),
    "error": Field(Text(max_length=100_000), nullable=True),
    "predicted": Field(Boolean(), nullable=True),
    "device": Field(Text(max_length=limits.MAX_TEXT), nullable=True),
    "total_bytes": Field(_BYTES, nullable=True),
    "gpu_memory_utilization": Field(Number(0, 1), nullable=True),
    "kv_cache_memory_given": Field(Boolean(), nullable=True),
    "weights_bytes": Field(_BYTES, nullable=True),
    "activation_peak_bytes": Field(_BYTES, nullable=True),
    "non_torch_bytes": Field(_BYTES, nullable=True),
    "non_kv_bytes": Field(_BYTES, nullable=True),
    "available_kv_bytes": Field(Integer(-limits.MAX_BYTES, limits.MAX_BYTES), nullable=True),
    "largest_max_model_len": Field(_TOKENS, nullable=True),
    "cuda_graph_estimate_bytes": Field(_BYTES, nullable=True),
    "profile_run": Field(Record({"num_tokens": Field(_TOKENS, nullable=True)}, open=True), nullable=True),
    "plan": Field(_PLAN, nullable=True),
    "provenance": Field(Record({
        "vllm_semantics": Field(Text(max_length=64), nullable=True),
        "model": Field(Text(max_length=limits.MAX_PATH), nullable=True),
        "config_sha256": Field(Text(max_length=64), nullable=True),
        "knobs": Field(_KNOBS, nullable=True),
        "knobs_sha256": Field(Text(max_length=64), nullable=True),
    }, open=True), nullable=True),
    "calibration": Field(Record({"step_time": Field(CALIBRATION, nullable=True)}, open=True), nullable=True),
}, open=True, title="a profile saved by `kvplan profile --save`")


@dataclass(frozen=True)
class Provenance:
    """Where a profile came from: the semantics, the model config and the settings it was made with."""

    vllm_semantics: str | None
    model: str | None
    config_sha256: str | None
    knobs: Mapping[str, Any] | None      # the request's settings and how kvplan measured
    knobs_sha256: str | None


@dataclass(frozen=True)
class ProfileSummary:
    """The figures of a profile that `check` asserts on and `simulate` runs with."""

    fits: bool
    error: str | None
    predicted: bool | None
    device: str | None
    total_bytes: int | None
    gpu_memory_utilization: float | None
    kv_cache_memory_given: bool
    weights_bytes: int | None
    activation_peak_bytes: int | None
    non_torch_bytes: int | None
    non_kv_bytes: int | None
    available_kv_bytes: int | None
    largest_max_model_len: int | None
    profile_run_tokens: int | None          # the profile run's batch (max_num_batched_tokens)
    plan: PlanSummary | None                # None when vLLM refused to start before sizing
    provenance: Provenance
    calibration: tuple[tuple[int, float], ...] = ()   # step times measured on the device
    # the CUDA-graph pool a release that takes it from the KV budget subtracted (None: it does not)
    cuda_graph_estimate_bytes: int | None = None


def knobs_sha256(knobs: Mapping[str, Any]) -> str:
    return hashlib.sha256(json.dumps(knobs, sort_keys=True, default=str).encode()).hexdigest()


def load_profile(path: Path, where: str) -> ProfileSummary:
    """A file saved by `kvplan profile --save`; `where` names the field that gave the path."""
    if not Path(path).exists():
        raise KvplanError(f"{where}: no such file: {path}; write one with `kvplan profile --save`")
    return parse_profile(parse_json(read_input_text(Path(path), where), where), where)


def parse_profile(document: Any, where: str) -> ProfileSummary:
    check_document(PROFILE, document, where)
    try:
        return _profile(document)
    except FieldError as error:
        raise KvplanError(f"{where}: {error}") from None


def _profile(document: Any) -> ProfileSummary:
    top = as_object(document, "")
    if top.get("kind") != PROFILE_KIND:
        raise FieldError("kind", f"expected {PROFILE_KIND!r} (a file written by `kvplan profile --save`), "
                                 f"got {top.get('kind')!r}")
    version = top.get("schema_version")
    if type(version) is not int or version not in PROFILE_SCHEMA_VERSIONS:
        raise FieldError("schema_version", f"unsupported profile version {version!r} "
                                           f"(this kvplan reads {', '.join(map(str, PROFILE_SCHEMA_VERSIONS))})")
    run = top.get("profile_run")
    calibration: tuple[tuple[int, float], ...] = ()
    raw_calibration = top.get("calibration")
    if isinstance(raw_calibration, dict) and "step_time" in raw_calibration:
        calibration = parse_calibration(raw_calibration["step_time"], child("calibration", "step_time"))
    figures = {
        key: get_optional(top, key, "", reader) if absent is None else get(top, key, "", reader, absent)
        for key, reader, absent in TOP_LEVEL_FIGURES
    }
    return ProfileSummary(
        **figures,
        profile_run_tokens=get_optional(as_object(run, "profile_run"), "num_tokens", "profile_run", as_int)
        if run is not None else None,
        plan=None if top.get("plan") is None else parse_plan(top["plan"], "plan"),
        provenance=_provenance(top.get("provenance")),
        calibration=calibration,
    )


def _provenance(raw: Any) -> Provenance:
    if raw is None:
        return Provenance(None, None, None, None, None)
    provenance = as_object(raw, "provenance")
    knobs = provenance.get("knobs")
    return Provenance(
        vllm_semantics=get_optional(provenance, "vllm_semantics", "provenance", as_str),
        model=get_optional(provenance, "model", "provenance", as_str),
        config_sha256=get_optional(provenance, "config_sha256", "provenance", as_str),
        knobs=as_object(knobs, "provenance.knobs") if knobs is not None else None,
        knobs_sha256=get_optional(provenance, "knobs_sha256", "provenance", as_str),
    )


def parse_plan(raw: Any, path: str) -> PlanSummary:
    """A plan record (`kvplan plan --json`, or a profile's `plan`) as the summary the use cases read."""
    plan = as_object(raw, path)
    gpu = plan.get("gpu")
    return PlanSummary(
        model=plan.get("model") if isinstance(plan.get("model"), str) else None,
        config_sha256=get_optional(plan, "config_sha256", path, as_str),
        gpu=_gpu_key(gpu),
        fits=get(plan, "fits", path, as_bool, True),
        error=get_optional(plan, "error", path, as_str),
        block_size=get(plan, "block_size", path, as_int, minimum=1),
        max_model_len=get(plan, "max_model_len", path, as_int, minimum=1),
        max_num_batched_tokens=get(plan, "max_num_batched_tokens", path, as_int, minimum=1),
        max_num_seqs=get(plan, "max_num_seqs", path, as_int, minimum=1),
        enable_prefix_caching=get(plan, "enable_prefix_caching", path, as_bool),
        enable_chunked_prefill=get(plan, "enable_chunked_prefill", path, as_bool, True),
        kv_cache_memory_bytes=get_optional(plan, "kv_cache_memory_bytes", path, as_int),
        num_blocks=get_optional(plan, "num_blocks", path, as_int),
        num_usable_blocks=get_optional(plan, "num_usable_blocks", path, as_int),
        gpu_kv_cache_tokens=get_optional(plan, "gpu_kv_cache_tokens", path, as_int),
        max_concurrency=get_optional(plan, "max_concurrency", path, as_number),
        kv_bytes_per_token=get_optional(plan, "kv_bytes_per_token", path, as_number_or_int),
        weights_bytes=get_optional(plan, "weights_bytes", path, as_int),
        weights_per_gpu_bytes=get_optional(plan, "weights_per_gpu_bytes", path, as_int),
        bytes_needed_for_one_max_len_request=get_optional(plan, "bytes_needed_for_one_max_len_request", path,
                                                          as_int),
        estimated_max_model_len=get_optional(plan, "estimated_max_model_len", path, as_int),
        group_block_sizes=_group_block_sizes(plan.get("kv_cache_groups") or [], child(path, "kv_cache_groups")),
        kv_cache_groups=_engine_groups(plan.get("kv_cache_groups") or [], child(path, "kv_cache_groups"),
                                       _record_release(plan)),
    )


def _record_release(plan: Mapping[str, Any]) -> Release:
    """The release a plan record was made under: a record without `vllm_semantics` predates 0.33.0's
    support and follows 0.17.1; an unknown one is refused by `profile_mismatches`, not here."""
    version = plan.get("vllm_semantics")
    return RELEASES.get(version, VLLM_0_17_1) if isinstance(version, str) else VLLM_0_17_1


def _group_specs(raw: Any, path: str) -> list[tuple[Mapping[str, Any], Mapping[str, Any], str]]:
    """Each group record, its spec record and the spec's path."""
    specs = []
    for i, group in enumerate(as_list(raw, path, non_empty=False)):
        spec_path = child(child(path, i), "spec")
        record = as_object(group, child(path, i))
        specs.append((record, as_object(record.get("spec"), spec_path), spec_path))
    return specs


def _group_block_sizes(raw: Any, path: str) -> tuple[int, ...]:
    return tuple(get(spec, "block_size", spec_path, as_int, minimum=1)
                 for _, spec, spec_path in _group_specs(raw, path))


def _engine_groups(raw: Any, path: str, release: Release) -> tuple[KVCacheGroup, ...]:
    """The engine's groups, as `PlanSummary.kv_cache_groups` holds them: a group of unequal pages
    runs with its first layer's spec, as vLLM's scheduler does, and a Mamba group takes the prefill
    checkpoint blocks of the record's release."""
    groups = []
    for record, spec, spec_path in _group_specs(raw, path):
        if spec.get("type") == "UniformTypeKVCacheSpecs":
            members = as_object(spec.get("layers"), child(spec_path, "layers"))
            spec_path = child(child(spec_path, "layers"), next(iter(members), ""))
            spec = as_object(next(iter(members.values()), None), spec_path)
        type_name = get(spec, "type", spec_path, as_str)
        mamba_type = None
        if LAYER_SPECS.get(type_name) is MambaSpec:
            mamba_type = get(spec, "mamba_type", spec_path, as_str)
            layout = spec_layout(type_name, mamba=(mamba_type,
                                                   as_list(spec.get("shapes"), child(spec_path, "shapes")),
                                                   as_list(spec.get("dtypes"), child(spec_path, "dtypes"))))
        else:
            layout = spec_layout(type_name, attention=(get(spec, "num_kv_heads", spec_path, as_int),
                                                       get(spec, "head_size", spec_path, as_int),
                                                       get(spec, "dtype", spec_path, as_str)))
        try:
            groups.append(engine_group(
                type_name, get(spec, "block_size", spec_path, as_int, minimum=1),
                get(record, "num_layers", path, as_int, minimum=0), layout,
                sliding_window=get_optional(spec, "sliding_window", spec_path, as_int),
                attention_chunk_size=get_optional(spec, "attention_chunk_size", spec_path, as_int),
                mamba_cache_mode=get_optional(spec, "mamba_cache_mode", spec_path, as_str),
                mamba_type=mamba_type, release=release,
            ))
        except KvplanError as error:
            raise FieldError(child(spec_path, "type"), str(error)) from None
    return tuple(groups)


def _gpu_key(gpu: Any) -> str | None:
    if isinstance(gpu, dict):
        key = gpu.get("key")
        return key if isinstance(key, str) else None
    return gpu if isinstance(gpu, str) else None


def release_mismatch(profile: ProfileSummary, release: Release, run: str) -> str | None:
    """The one release rule of every command that reads a saved profile (check's target, a
    workload's engine.profile in simulate, sweep and fit): a profile describes the release it was
    saved under, and only that one (its pool size follows that release's sizing)."""
    saved = profile.provenance.vllm_semantics
    if saved == release.version:
        return None
    if saved is None:
        return f"it records no vLLM release (provenance.vllm_semantics), {run} follows {release.version}"
    return f"it follows vLLM {saved} semantics, {run} follows {release.version}"


def profile_mismatches(
    profile: ProfileSummary, release: Release, config_sha256: str | None = None,
    knobs: Mapping[str, Any] | None = None,
) -> list[str]:
    """Why a saved profile does not describe this release, this model and these knobs (empty: it does)."""
    provenance = profile.provenance
    reasons = []
    mismatch = release_mismatch(profile, release, "this check")
    if mismatch is not None:
        reasons.append(mismatch)
    if config_sha256 is not None and provenance.config_sha256 != config_sha256:
        reasons.append("it was made for a different model config (config sha256 differs)")
    if knobs is not None and provenance.knobs_sha256 != knobs_sha256(knobs):
        saved = provenance.knobs or {}
        changed = sorted(key for key in set(saved) | set(knobs) if saved.get(key) != knobs.get(key))
        reasons.append("its knobs differ: " + ", ".join(changed) if changed else "its knobs differ")
    return reasons
