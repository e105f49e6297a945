"""Where the simulated engine comes from: a block count, a saved profile, or a plan made on the spot.

``resolve_engine`` stacks the workload's ``engine`` section, the source it names and the
command-line overrides (`EngineArgs.over`) into the engine's ``EngineConfig`` (validated by vLLM's rules) and the
model facts that the step-time model uses. Only ``plan_pool`` needs the planner (and through it
the model's config); a profile or a plain ``num_gpu_blocks`` never does.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from kvplan.errors import DoesNotFitError, KvplanError
from kvplan.parsing import FieldError, as_int, child
from kvplan.semantics.engine.args import RESOLVES, SCHEDULES, SIZES, EngineArgs, named, setting
from kvplan.semantics.engine.config import EngineConfig
from kvplan.semantics.engine.groups import KVCacheGroup
from kvplan.semantics.engine.trace import CONFIG_KEYS, RELEASE_KEY, parse_config
from kvplan.semantics.kv.sizing import kv_cache_tokens
from kvplan.semantics.kv.specs import FullAttentionSpec
from kvplan.semantics.releases import RELEASES, Release, release_named
from kvplan.sources.installed import default_release
from kvplan.usecases.plan import PlanRequest, PlanSummary, plan
from kvplan.usecases.profile_summary import load_profile, release_mismatch
from kvplan.usecases.replay import EngineSettings
from kvplan.usecases.simulate.compute_shape import compute_shape, kernel_facts
from kvplan.usecases.simulate.timing import ComputeShape, KernelFacts
from kvplan.usecases.simulate.workload import EngineSpec

# settings a saved profile or a plan fixes along with the pool size
POOL_SETTINGS = named(RESOLVES)
# what a pool planned from engine.model takes of the stacked engine arguments: the scheduler's and the
# sizing ones (the rest, such as --enforce-eager, price the steps only)
PLANNED_SETTINGS = named(SCHEDULES, SIZES)


@dataclass(frozen=True)
class EngineOverrides(EngineSettings):
    """Command-line options: the engine's settings, the sizing settings of a pool planned from
    engine.model (in `args`), the GPU and how steps are priced; None leaves the workload's value."""

    gpu: str | None = None
    gpu_memory: int | None = None
    step_time: str | None = None             # --step-time: auto, kernels or roofline (usecases/step_time_methods.py)


@dataclass(frozen=True)
class ModelFacts:
    """What the step-time model needs to know about the model and the GPU the pool was sized on."""

    model: str | None = None
    gpu: str | None = None
    weights_bytes: int | None = None
    kv_bytes_per_token: int | None = None
    calibration: tuple[tuple[int, float], ...] = ()
    # what one GPU computes per token (the roofline with factors); None: the plan did not say (a profile)
    compute: ComputeShape | None = None
    timing_notes: tuple[str, ...] = ()      # weights the step time cannot price as they are
    kernels: KernelFacts | None = None      # what measured kernel tables need (a plan's model); None: unknown


@dataclass(frozen=True)
class ResolvedEngine:
    config: EngineConfig
    source: str  # "num_gpu_blocks", "profile", "plan", or "--num-gpu-blocks"
    facts: ModelFacts
    notes: tuple[str, ...] = ()
    # the model's KV cache groups as the plan gave them (their layers included); empty without a model
    planned_groups: tuple[KVCacheGroup, ...] = ()
    planned_tokens: int | None = None   # the plan's "GPU KV cache size", for its own pool
    weights_warning: str | None = None  # the plan's, when it could not count the model's weights

    @property
    def kv_cache_groups(self) -> tuple[KVCacheGroup, ...]:
        """The groups the engine runs, with their layers where a plan says how many."""
        return self.planned_groups or self.config.groups

    @property
    def gpu_kv_cache_tokens(self) -> int:
        """vLLM's "GPU KV cache size" of the engine's pool: the plan's figure for the plan's pool, else
        blocks per group times the smallest block size."""
        if self.planned_tokens is not None and self.source in ("plan", "profile"):
            return self.planned_tokens
        return kv_cache_tokens(self.config.num_gpu_blocks, [group.block_size or 0 for group in self.config.groups])


@dataclass(frozen=True)
class PlannedPool:
    """The part of a plan (or a saved profile's plan record) that the simulation uses."""

    num_blocks: int
    settings: dict[str, Any]
    facts: ModelFacts
    kv_cache_groups: tuple[KVCacheGroup, ...] = ()
    gpu_kv_cache_tokens: int | None = None
    weights_warning: str | None = None      # a plan's, when it could not count the model's weights

    def engine_groups(self, block_size: int | None = None) -> tuple[KVCacheGroup, ...] | None:
        """What the engine config takes: None for one full-attention group of the engine's block size
        (the single-group engine), else the model's groups. With another block size than the plan's
        (--block-size on a profile's pool), every group takes the engine's."""
        groups = self.kv_cache_groups
        if block_size is not None and block_size != self.settings["block_size"]:
            groups = tuple(replace(group, block_size=None) for group in groups)
        single = len(groups) == 1 and groups[0].spec is FullAttentionSpec
        if not groups or (single and groups[0].block_size in (None, self.settings["block_size"])):
            return None
        return groups


def resolve_engine(spec: EngineSpec, overrides: EngineOverrides, where: str,
                   release: Release | None = None) -> ResolvedEngine:
    """The effective engine: its pool source < the file < the command line (`EngineArgs.over`), one
    line on any mistake. The release is the given one, else the workload's `engine.vllm_version`,
    else the default."""
    notes: list[str] = []
    if release is None:
        release = default_release() if spec.vllm_version is None else _named_release(spec.vllm_version, where)
    command = overrides.args
    # what sizes a pool planned from engine.model (`SIZES`), and the device memory
    given = [setting(name).flag for name in named(SIZES) if getattr(command, name) is not None]
    given += ["--gpu-memory"] if overrides.gpu_memory is not None else []
    if given and spec.model is None:
        raise KvplanError(f"{given[0]} applies only when the workload plans the pool from "
                          "engine.model; a profile or num_gpu_blocks fixes the pool size")
    stacked = command.over(spec.args)
    if stacked.kv_cache_memory_bytes is not None and stacked.gpu_memory_utilization:
        raise KvplanError(f"{where}: engine.kv_cache_memory fixes the KV-cache memory, so gpu_memory_utilization "
                          "would have no effect: give one of them")
    pool: PlannedPool | None = None
    source = "num_gpu_blocks"
    if spec.profile is not None:
        pool, source = read_profile(spec.profile, where, release), "profile"
        if overrides.gpu is not None and pool.facts.gpu not in (None, overrides.gpu):
            notes.append(f"the pool size is the profile's, measured on {pool.facts.gpu}; "
                         f"--gpu {overrides.gpu} changes only the step-time estimate")
    elif spec.model is not None:
        # an unset gpu_memory_utilization: the release's default for the sizing path, as `kvplan plan`
        # resolves it (0.34.0: 1.0 on the measured path, docs/vllm/changes-0.34.md §1.2)
        pool, source = plan_pool(model=spec.model, gpu=overrides.gpu or spec.gpu,
                                 gpu_memory=overrides.gpu_memory or spec.gpu_memory, args=stacked,
                                 release=release), "plan"

    merged = EngineArgs(**pool.settings) if pool else EngineArgs()
    for layer, layer_name in ((spec.args, "engine"), (command, "the command line")):
        if source == "profile" and overrides.num_gpu_blocks is None:
            for key in POOL_SETTINGS:
                value, fixed = getattr(layer, key), getattr(merged, key)
                if value is None or value == fixed:
                    continue
                if key == "block_size":
                    raise KvplanError(
                        f"{where}: block_size {value} from {layer_name} differs from the profile's "
                        f"({fixed}), and the profile's num_blocks holds only for its block size: "
                        "save a profile with that block size or give --num-gpu-blocks")
                notes.append(f"{key} is {value} here but {fixed} in the profile; "
                             "the profile's block count was measured with its own value")
        merged = layer.over(merged)

    num_gpu_blocks = overrides.num_gpu_blocks if overrides.num_gpu_blocks is not None else (
        pool.num_blocks if pool else spec.num_gpu_blocks)
    if overrides.num_gpu_blocks is not None:
        source = "--num-gpu-blocks"
    if num_gpu_blocks is None:
        raise KvplanError(f"{where}: engine: no pool size: give engine.num_gpu_blocks, engine.profile or "
                          "engine.model in the workload, or --num-gpu-blocks")
    own = {"hash_algo": spec.hash_algo, "hash_seed": spec.hash_seed, RELEASE_KEY: release.version,
           "scheduling": overrides.scheduling or spec.scheduling, "num_gpu_blocks": num_gpu_blocks}
    raw = {key: value for key, value in (*merged.given().items(), *own.items())
           if key in CONFIG_KEYS and value is not None}
    groups = pool.engine_groups(merged.block_size) if pool else spec.kv_cache_groups
    config = _engine_config(raw, groups, pool, spec, where)
    facts = pool.facts if pool else ModelFacts(gpu=spec.gpu)
    return ResolvedEngine(config, source, facts, tuple(notes), planned_groups=pool.kv_cache_groups if pool else (),
                          planned_tokens=pool.gpu_kv_cache_tokens if pool else None,
                          weights_warning=pool.weights_warning if pool else None)


def _engine_config(raw: dict[str, Any], groups: tuple[KVCacheGroup, ...] | None, pool: PlannedPool | None,
                   spec: EngineSpec, where: str) -> EngineConfig:
    """The engine config; a block size the plan derived (a Mamba hybrid's 544 or 2080) is taken as
    vLLM's own, where a user's must be one of vLLM's choices."""
    derived = pool.settings["block_size"] if pool is not None and raw.get("block_size") == \
        pool.settings["block_size"] else None
    return parse_config(raw, where, groups=groups, derived_block_size=derived)


def _named_release(version: str, where: str) -> Release:
    try:
        return release_named(version)
    except KvplanError as error:
        raise KvplanError(f"{where}: engine.{error}") from None


def plan_pool(*, model: str, gpu: str | None, gpu_memory: int | None, args: EngineArgs,
              release: Release) -> PlannedPool:
    """Plan the pool for ``model`` with kvplan's planner: `kvplan plan` on ``args.kv_cache_memory_bytes``
    (no torch for catalog models), else the KV memory of ``gpu`` / ``gpu_memory`` at
    ``args.gpu_memory_utilization`` as the fake profile run predicts it (needs the `profile` extra)."""
    kv_cache_memory = args.kv_cache_memory_bytes
    planned = {name: value for name, value in args.given().items() if name in PLANNED_SETTINGS}
    request = PlanRequest(args=EngineArgs(model=model, trust_remote_code=args.trust_remote_code, **planned),
                          gpu=gpu, gpu_memory_bytes=gpu_memory, release=release)
    if kv_cache_memory is None and gpu is None and gpu_memory is None:
        raise KvplanError("engine.model: give engine.gpu (or gpu_memory) or engine.kv_cache_memory to size the pool")
    if kv_cache_memory is not None:
        result = plan(request)
    else:
        from kvplan.usecases.profile import plan_for_device

        result = plan_for_device(request)
    summary = result.summary
    if not summary.fits or summary.num_blocks is None:
        fix = result.suggested_fix
        raise DoesNotFitError(f"engine.model: {model} does not fit: {summary.error}" + (f"; {fix}" if fix else ""))
    shape, timing_notes = compute_shape(result)
    try:
        pool = pool_from_plan(summary, "plan")
        return replace(pool, weights_warning=result.weights_warning,
                       facts=replace(pool.facts, compute=shape, timing_notes=timing_notes,
                                     kernels=kernel_facts(result)))
    except FieldError as error:
        raise KvplanError(f"engine.model: the planner's record: {error}") from None


def read_profile(path: Path, where: str, release: Release) -> PlannedPool:
    """A profile saved by `kvplan profile --save`: its plan and any step-time calibration. A
    profile saved under another release than the run's is refused, as `kvplan check` refuses it
    (`release_mismatch`): its block count is that release's."""
    shown = f"{where}: engine.profile ({path.name})"
    profile = load_profile(path, shown)
    mismatch = release_mismatch(profile, release, "this run")
    if mismatch is not None:
        saved = profile.provenance.vllm_semantics
        again = f"`kvplan profile ... --vllm-version {release.version} --save`"
        fix = (f"give --vllm-version {saved} (or engine.vllm_version \"{saved}\" in the workload), or profile "
               f"again under {release.version} ({again})" if saved in RELEASES else f"profile again ({again})")
        raise KvplanError(f"{shown} does not match this run: {mismatch}: {fix}")
    if profile.plan is None:
        raise KvplanError(f"{shown}: plan: expected an object, got null")
    try:
        pool = pool_from_plan(profile.plan, "plan")
    except FieldError as error:
        raise KvplanError(f"{shown}: {error}") from None
    return replace(pool, facts=replace(pool.facts, calibration=profile.calibration))


def pool_from_plan(plan: PlanSummary, path: str) -> PlannedPool:
    """The pool size, its settings and the model facts of a plan."""
    settings: dict[str, Any] = {name: getattr(plan, name) for name in POOL_SETTINGS}
    # the step time is per GPU: with tensor parallelism each GPU reads its share of the weights
    weights = plan.weights_per_gpu_bytes if plan.weights_per_gpu_bytes is not None else plan.weights_bytes
    weights_key = "weights_per_gpu_bytes" if plan.weights_per_gpu_bytes is not None else "weights_bytes"
    per_token = plan.kv_bytes_per_token
    return PlannedPool(
        num_blocks=as_int(plan.num_blocks, child(path, "num_blocks"), minimum=2),
        settings=settings,
        kv_cache_groups=plan.kv_cache_groups,
        gpu_kv_cache_tokens=plan.gpu_kv_cache_tokens,
        facts=ModelFacts(
            model=plan.model,
            gpu=plan.gpu,
            weights_bytes=None if weights is None else as_int(weights, child(path, weights_key), minimum=0),
            kv_bytes_per_token=None if per_token is None else as_int(per_token, child(path, "kv_bytes_per_token"),
                                                                     minimum=1),
        ),
    )
