"""The vLLM releases kvplan reproduces, as data: one `Release` per release, holding the value of
every policy that differs between releases. Code reads the policy from the `Release` it was handed
(a request's `release`), never a version string; each policy's variants are implemented next to
the code that applies them, in a table keyed by the policy's value, so a new release is a new row
here plus, where its behaviour is new, one more entry in such a table.

Which release applies is one rule: --vllm-version, else the input file's `vllm_version`, else the
release of the `vllm` package installed beside kvplan when kvplan reproduces it, otherwise the newest
(`NEWEST_RELEASE`). The last step maps a version string here (`release_for_installed`); reading the
installed version is `kvplan.sources.installed.default_release()`, as this layer reads nothing.
Where semantics take a release and none is given (tests, one-off calls), it is `NEWEST_RELEASE`.

Where each policy is applied (docs/versions.md gives every value and its effect on a number):

    gpu_memory_utilization        default of PlanRequest (plan, profile, check) and of workloads' engine.model
    non_kv_memory                 semantics/memory/budget.py (NON_KV_MEMORY: how non-KV memory adds up)
    cuda_graphs_in_budget         semantics/memory/budget.py (the CUDA-graph pool taken from the KV budget)
    cudagraph_capture_sizes       semantics/memory/cudagraphs.py (CAPTURE_SIZES: batch sizes graphs are captured for;
                                  CAPTURE_PLANS: the PIECEWISE and FULL graphs)
    profile_sampler               measure/dummy_run.py (DUMMY_SAMPLERS: the sampler passes of the profile run),
                                  semantics/memory/sampler.py (RUNNER_STATE: the sampler state the runner keeps)
    batch_defaults                semantics/config/scheduler.py (BATCH_DEFAULTS: the GPU tiers of the batch limits)
    mla_block_size                semantics/config/cache.py (MLA_BLOCK_SIZE: the block size an MLA backend sets)
    hybrid_block_alignment        semantics/config/cache.py (HYBRID_ALIGNMENT: what the Mamba-hybrid block rounds to)
    prefix_caching_for_hybrids    semantics/kv/layer_specs.py (the default of --enable-prefix-caching for hybrids)
    hook_ssm_cache_dtype          semantics/kv/layer_specs.py (Nemotron-H's ssm state dtype by vLLM's model hook)
    spec_buckets                  semantics/kv/grouping.py (SPEC_BUCKETS: which layers may share a group)
    page_unification              semantics/kv/grouping.py (PAGE_UNIFICATION: how unequal pages are made equal)
    group_padding_ratio           semantics/kv/grouping.py (when unequal layer types are padded to one group size)
    in_flight_tokens              semantics/kv/sizing.py (IN_FLIGHT_TOKENS: a window request's reservation)
    kv_tensor_layout              semantics/kv/sizing.py (KV_TENSOR_LAYOUT: the tensors the pool is made of)
    blocks_override               semantics/kv/sizing.py (when --num-gpu-blocks-override applies)
    capacity_reserve_blocks       semantics/kv/sizing.py (blocks the memory check and auto-fit hold back)
    per_request_memory            semantics/kv/sizing.py (PER_REQUEST_MEMORY: one max_model_len request's bytes)
    kv_capacity                   semantics/kv/sizing.py (KV_CAPACITY: the token and concurrency figures)
    log_format                    semantics/kv/sizing.py (LOG_FORMATS: vLLM's wording), semantics/memory/budget.py
                                  (SUGGESTION_LOG_LEVEL, USAGE_LINE: the --kv-cache-memory suggestion's level and
                                  usage sentence)
    freed_unhashed_blocks         semantics/engine/block_pool.py (UNHASHED_TO_HEAD: where a freed unhashed block goes)
    admission                     semantics/engine/scheduler.py (WHOLE_PROMPT_FIRST: what must fit to admit)
    prefix_stats                  semantics/engine/kv_cache_manager.py (STATS_AT_LOOKUP: when lookups are counted)
    scheduling                    semantics/engine/scheduler.py (BATCHES_IN_FLIGHT: the loop `vllm serve` runs)
    mamba_cache_modes             semantics/engine/groups.py (the Mamba cache modes with prefix caching on),
                                  semantics/config/cache.py (MAMBA_MODE_RULES: the mode a model's config settles on)
    prefix_cache_retention        semantics/engine/single_type_manager.py (CACHES_REACHABLE_ONLY: which blocks of
                                  sliding-window and Mamba groups enter the prefix cache)
    window_frees                  semantics/engine/kv_cache_manager.py (FREES_PROCESSED_ONLY: the tokens that decide
                                  which blocks fall out of a window)
    mamba_chunk_ends              semantics/engine/scheduler.py (MAMBA_CHUNK_END: where a Mamba "align" prefill
                                  chunk ends)
    mamba_retirement              semantics/engine/mamba_manager.py (RETIRES_PAST_NULLS: which Mamba "align" blocks
                                  before the running state are freed)
    hybrid_block_sizes            semantics/engine/config.py (the group block sizes reproduced with several groups)
    config_classes                semantics/models/validation.py (CONFIG_CLASSES: what the config classes refuse)
    config_wide_window            semantics/models/architectures.py (CONFIG_WIDE_WINDOW: CacheConfig.sliding_window)
    quantization_names            semantics/config/quantization.py (the method name vLLM resolves a checkpoint's to)
    mamba_prefill_checkpoints     semantics/engine/groups.py (CHECKPOINTING_MAMBA_TYPES: which Mamba layers take a
                                  prefill checkpoint block; the engine reads the group's fields)
    kv_sizing                     semantics/memory/measured.py (KV_SIZING: which path sizes the cache, and why),
                                  semantics/memory/budget.py (GRAPH_ESTIMATE_TAKEN: no graph estimate when measured)
    measured_utilization          semantics/memory/measured.py (default_utilization: an unset utilization, measured)
    measured_kv_margin            semantics/memory/measured.py (MEASURED_MARGIN: what the measured path keeps free)
    default_block_size            semantics/config/cache.py (the size backends' preferences and the hybrid alignment
                                  are taken against), semantics/kv/layer_specs.py, semantics/engine/config.py
    mamba_sync_output_caching     semantics/engine/scheduler.py (Scheduler._cache_at_sync_output: Mamba hybrids hash
                                  at output time in sync mode)
    auto_fit_passes               semantics/memory/measured.py (AUTO_FIT_PASSES: auto-fit again after warmup)

0.34.0 (`docs/vllm/changes-0.34.md`, its section 9 lists these policies) is 0.33.0's row with the measured
sizing path and its new values of cudagraph_capture_sizes (SM100 grids), in_flight_tokens (Model
Runner V2 only) and log_format (the lines after warmup).

The `admission` "whole_prompt" is vLLM 0.33.0's `scheduler_reserve_full_isl` with its per-request caps:
a sliding-window or chunked-local group counts at most the blocks a request can hold at once while
tokens are in flight (`max_admission_blocks_per_request`), so a long prompt of a hybrid is admitted
when its reachable blocks fit."""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Literal

from kvplan.errors import KvplanError

# 0.17.1: weights + torch peak increase + non-torch increase; 0.33.0: the drop in free memory from
# start-up to after the profile run, plus the transient peak above what stays allocated
NonKvMemory = Literal["weights_peak_non_torch", "consumed_plus_transient_peak"]
# the profile run's dummy sampler: Model Runner V1's one pass (fp32 logits, probabilities and noise),
# or V2's two passes, the default parameters then `SamplingParams.for_sampler_warmup()` (the fp32
# logits pipeline), with V2's per-request sampler state (penalty counts) held by the runner
ProfileSampler = Literal["v1_one_pass", "v2_default_and_warmup"]
# the batch sizes CUDA graphs are captured for: up to 512 (0.17.1), or up to 1024 on SM100-family GPUs
# with max_num_batched_tokens and max_num_seqs added when they fit (0.33.0)
# with max_num_batched_tokens and max_num_seqs added when they fit (0.33.0); or, on SM100-family GPUs,
# PIECEWISE graphs on a token grid up to min(8192, max_num_batched_tokens) and FULL decode graphs on a
# request grid up to max_num_seqs, 0.33.0's list elsewhere (0.34.0, docs/vllm/changes-0.34.md section 3)
CudagraphCaptureSizes = Literal["up_to_512", "up_to_1024_on_sm100_with_batch_limits", "split_grids_on_sm100"]
# an MLA model's block size: forced by the backend when the requested one does not suit it, or the
# selected backend's preferred size when none is requested (a requested one picks a backend that takes it)
MlaBlockSize = Literal["forced_by_backend", "preferred_by_backend"]
# the Mamba-hybrid attention block rounds to the kernel's block, or to the larger of it and the
# configured block (MLA at least 128)
HybridBlockAlignment = Literal["kernel_block", "kernel_or_configured_block"]
# layers share a group when their specs are equal, or also when the specs can be merged (full attention
# layers differing only in window or chunk size)
SpecBuckets = Literal["equal_specs", "mergeable_specs"]
# smaller pages are scaled up by block size only, or padded where that cannot work (Mamba; attention
# pages that do not divide the largest)
PageUnification = Literal["scale_block_size", "scale_or_pad"]
# tokens a sliding-window or chunked-local request may hold beyond its window: one batch
# (max_num_batched_tokens), or every batch in flight (max_concurrent_batches x max_num_batched_tokens):
# two with one pipeline stage and one per stage with several (0.33.0 runs Model Runner V1, synchronously,
# with PP), or pp + 1 always (0.34.0: Model Runner V2 only, asynchronous with PP too)
InFlightTokens = Literal["one_batch", "concurrent_batches", "pp_plus_one_batches"]
# the pool's tensors: one per layer of the largest group, shared across groups; or one backing
# allocation that every group's layers view at their own strides (groups alias from byte 0)
KvTensorLayout = Literal["tensor_per_layer", "shared_backing"]
# --num-gpu-blocks-override replaces the block count after the memory checks, or replaces the memory
# before them (so an override too small for max_model_len is refused)
BlocksOverride = Literal["after_checks", "before_checks"]
# 0.17.1: group 0's blocks for every layer of a group; 0.33.0: every group's blocks
PerRequestMemory = Literal["first_group_times_group_size", "sum_over_groups"]
# the capacity figures: tokens = blocks per group x smallest block size and concurrency from the padded
# per-request bytes; or concurrency = blocks / (sum over groups of a request's blocks) and
# tokens = int(concurrency x max_model_len)
KvCapacity = Literal["blocks_per_group", "concurrency_times_length"]
# vLLM's wording: two capacity lines ("GPU KV cache size", "Maximum concurrency") and the 0.17.1 texts,
# or one merged line and the 0.33.0 texts (memory check, auto-fit, --kv-cache-memory suggestion), or
# 0.34.0's: the merged line logged after warmup on the measured block count, the "Memory after warmup"
# and "Extended KV cache" lines, its auto-fit texts (docs/vllm/changes-0.34.md sections 1.4 and 1.5)
LogFormat = Literal["separate_capacity_lines", "merged_capacity_line", "merged_capacity_line_after_warmup"]
# freed blocks without a hash (every block with caching off) join the free queue's tail, or its head
FreedUnhashedBlocks = Literal["tail", "head"]
# a waiting request is admitted when its next chunk fits, or when its whole prompt fits and then the chunk
Admission = Literal["first_chunk", "whole_prompt"]
# prefix-cache statistics count every lookup (a blocked queue head again at every step), or admissions only
PrefixStats = Literal["every_lookup", "on_admission"]
# the GPU tiers of the batch defaults: 70 GiB and more but not A100 is large, or also a 160 GiB tier
# (the API server gets 16384 tokens) with GB10 kept small
BatchDefaults = Literal["two_tiers", "three_tiers"]
# sync: a batch's output is processed in the step that scheduled it (`--no-async-scheduling`); async: the
# next batch is scheduled before it, with two batches in flight (`vllm serve`'s default in both releases)
Scheduling = Literal["sync", "async"]
# "all" (a cached state at every block end) is a mode of 0.17.1 only: a model that asks for it runs
# "align" where the release lacks it
MambaCacheMode = Literal["align", "all"]
# sliding-window and Mamba groups hash every full block ("dense"), or only the blocks a later request
# can hit ("reachable": the ones ending at the prompt's replay boundary, num_prompt_tokens - 1, and at a
# shared-prefix junction the hybrid lookup detected; vLLM 0.33.0's prefix_cache_retention_interval=0)
PrefixCacheRetention = Literal["dense", "reachable"]
# a group's out-of-window blocks are freed on the tokens computed so far ("computed"), or on those whose
# batch has been processed ("processed": computed minus in flight, one step later under async)
WindowFrees = Literal["computed", "processed"]
# a Mamba "align" prefill chunk ends on a block boundary up to the last boundary of the known tokens
# ("last_boundary", 0.17.1), or up to the last boundary before the last token and at a shared-prefix
# junction, a chunk that starts inside a block ending at that block's end ("last_checkpoint", 0.33.0)
MambaChunkEnds = Literal["last_boundary", "last_checkpoint"]
# a Mamba "align" group frees the blocks before its running state walking back until the first null
# entry ("stop_at_null", 0.17.1), or every real block there, past nulls ("past_nulls", 0.33.0)
MambaRetirement = Literal["stop_at_null", "past_nulls"]
# several KV cache groups may use any multiple of the hash block size ("multiples", 0.17.1), or are
# reproduced with one block size only ("uniform": 0.33.0 hashes at the groups' gcd and, with Mamba
# "align", hits inside a block, which kvplan does not reproduce)
HybridBlockSizes = Literal["multiples", "uniform"]
# the transformers config classes a release reads config.json with: 4.57's (0.17.1, some classes vLLM's
# own) or 5.x's strict dataclasses (0.33.0), which check layer_types' length and field types everywhere
ConfigClasses = Literal["transformers_4_57", "transformers_5"]
# when CacheConfig.sliding_window is the config's window (layers without their own window fall back to
# it): unless layer_types mixes types (0.17.1), or only without layer_types or with all of them sliding
ConfigWideWindow = Literal["unless_interleaved", "no_layer_types_or_all_sliding"]
# no Mamba layer exports a state from inside a prefill chunk ("none", 0.17.1: its MambaSpec has no
# prefill checkpoint fields), or Mamba-2 mixers and gated delta nets (with FlashInfer's prefill) do,
# into one prefill checkpoint block, so that "align" need not split the prompt's last chunk at its
# cacheable boundary ("mamba2_and_gdn", 0.33.0: num_prefill_checkpoint_blocks=1); a Mamba-1 mixer never does
MambaPrefillCheckpoints = Literal["none", "mamba2_and_gdn"]
# how the block count is decided: from the profile run's estimate (requested - non-KV - CUDA-graph
# estimate), or from the memory measured after warmup and CUDA-graph capture where the extensible KV
# cache is on (0.34.0 on CUDA without --kv-cache-memory, --num-gpu-blocks-override or
# --no-enable-extensible-kv-cache; docs/vllm/changes-0.34.md section 1.1)
KvSizing = Literal["profiled_estimate", "measured_after_capture"]
# what the measured path keeps free of the memory it measures: nothing (a release without that path),
# or max(1 GiB, 0.75 x P) plus max(P, G), P the sizing step's transient peak and G torch's reservation
# growth (docs/vllm/changes-0.34.md section 1.4)
MeasuredKvMargin = Literal["none", "max_1gib_or_three_quarters_peak"]
# auto-fit of --max-model-len auto runs once (on the memory the check sees), or a second time after
# warmup on the measured blocks when the block count is measured (docs/vllm/changes-0.34.md section 1.5)
AutoFitPasses = Literal["once", "twice_when_measured"]


@dataclass(frozen=True)
class Release:
    version: str
    # memory at start-up (profile)
    gpu_memory_utilization: float                  # vLLM's default --gpu-memory-utilization
    non_kv_memory: NonKvMemory                     # how the profile run's terms add up to non-KV memory
    cuda_graphs_in_budget: bool                    # the CUDA-graph pool is taken from the KV budget
    cudagraph_capture_sizes: CudagraphCaptureSizes  # the batch sizes CUDA graphs are captured for
    profile_sampler: ProfileSampler                # the sampler passes of the profile run, and the runner's state
    # settings vLLM settles before sizing
    batch_defaults: BatchDefaults                  # the GPU tiers of the default batch limits
    mla_block_size: MlaBlockSize                   # the block size an MLA backend sets
    hybrid_block_alignment: HybridBlockAlignment   # what a Mamba hybrid's attention block rounds to
    prefix_caching_for_hybrids: bool               # the default of prefix caching for Mamba hybrids
    hook_ssm_cache_dtype: str                      # Nemotron-H's ssm state dtype when its config names none
    # sizing
    spec_buckets: SpecBuckets                      # which layers may share a KV cache group
    page_unification: PageUnification              # how unequal page sizes are made equal
    group_padding_ratio: float                     # pad layer types to one group size below this size ratio
    in_flight_tokens: InFlightTokens               # what a sliding-window request reserves beyond its window
    kv_tensor_layout: KvTensorLayout               # the tensors the pool is made of
    blocks_override: BlocksOverride                # when --num-gpu-blocks-override applies
    capacity_reserve_blocks: int                   # blocks the memory check and auto-fit hold back
    per_request_memory: PerRequestMemory           # what one max_model_len request needs, over groups
    kv_capacity: KvCapacity                        # the token and concurrency figures of the pool
    log_format: LogFormat                          # vLLM's wording of the lines kvplan repeats
    # engine
    freed_unhashed_blocks: FreedUnhashedBlocks     # where a freed block without a hash goes
    admission: Admission                           # when a waiting request is admitted
    prefix_stats: PrefixStats                      # when prefix-cache statistics are recorded
    scheduling: Scheduling                         # the engine loop `vllm serve` runs (--scheduling overrides)
    mamba_cache_modes: tuple[MambaCacheMode, ...]  # the Mamba cache modes with prefix caching on
    prefix_cache_retention: PrefixCacheRetention   # which sliding-window and Mamba blocks are hashed
    window_frees: WindowFrees                      # the tokens that decide which blocks left a window
    mamba_chunk_ends: MambaChunkEnds               # where a Mamba "align" prefill chunk ends
    mamba_retirement: MambaRetirement              # which Mamba "align" blocks behind the state are freed
    hybrid_block_sizes: HybridBlockSizes           # the group block sizes reproduced with several groups
    config_classes: ConfigClasses                  # the config classes config.json is read with
    config_wide_window: ConfigWideWindow           # when CacheConfig.sliding_window is the config's window
    # (model_type, checkpoint quant_method, the method name vLLM resolves it to) where they differ
    quantization_names: tuple[tuple[str, str, str], ...]
    mamba_prefill_checkpoints: MambaPrefillCheckpoints  # which Mamba layers take prefill checkpoint blocks
    # docs/vllm/changes-0.34.md section 9's new policies
    kv_sizing: KvSizing                            # how the block count is decided
    measured_utilization: float | None             # gpu_memory_utilization's default on the measured path
    measured_kv_margin: MeasuredKvMargin           # what the measured path keeps free
    default_block_size: int                        # the block size backends' preferences are taken against
    mamba_sync_output_caching: bool                # Mamba hybrids hash blocks at output time in sync mode
    auto_fit_passes: AutoFitPasses                 # auto-fit of max_model_len: once, or again after warmup


VLLM_0_17_1 = Release(
    version="0.17.1",
    gpu_memory_utilization=0.9,
    non_kv_memory="weights_peak_non_torch",
    cuda_graphs_in_budget=False,
    cudagraph_capture_sizes="up_to_512",
    profile_sampler="v1_one_pass",
    batch_defaults="two_tiers",
    mla_block_size="forced_by_backend",
    hybrid_block_alignment="kernel_block",
    prefix_caching_for_hybrids=False,
    hook_ssm_cache_dtype="float16",
    spec_buckets="equal_specs",
    page_unification="scale_block_size",
    group_padding_ratio=1.25,
    in_flight_tokens="one_batch",
    kv_tensor_layout="tensor_per_layer",
    blocks_override="after_checks",
    capacity_reserve_blocks=0,
    per_request_memory="first_group_times_group_size",
    kv_capacity="blocks_per_group",
    log_format="separate_capacity_lines",
    freed_unhashed_blocks="tail",
    admission="first_chunk",
    prefix_stats="every_lookup",
    scheduling="async",
    mamba_cache_modes=("align", "all"),
    prefix_cache_retention="dense",
    window_frees="computed",
    mamba_chunk_ends="last_boundary",
    mamba_retirement="stop_at_null",
    hybrid_block_sizes="multiples",
    config_classes="transformers_4_57",
    config_wide_window="unless_interleaved",
    quantization_names=(),
    mamba_prefill_checkpoints="none",
    kv_sizing="profiled_estimate",
    measured_utilization=None,
    measured_kv_margin="none",
    default_block_size=16,
    mamba_sync_output_caching=False,
    auto_fit_passes="once",
)

# The engine's policies are 0.33.0's (docs/vllm/replay-0.33.md and, with several KV cache groups,
# vLLM 0.33.0's coordinator and managers, docs/vllm/changes-0.33.md §3.4 and §3.5; checked against its
# records in both modes); the sizing ones reproduce tests/data/sizing/vllm-0.33.0-cases.json, the
# memory ones docs/vllm/changes-0.33.md §1.
VLLM_0_33_0 = Release(
    version="0.33.0",
    gpu_memory_utilization=0.92,
    non_kv_memory="consumed_plus_transient_peak",
    cuda_graphs_in_budget=True,
    cudagraph_capture_sizes="up_to_1024_on_sm100_with_batch_limits",
    profile_sampler="v2_default_and_warmup",
    batch_defaults="three_tiers",
    mla_block_size="preferred_by_backend",
    hybrid_block_alignment="kernel_or_configured_block",
    prefix_caching_for_hybrids=True,
    hook_ssm_cache_dtype="float32",
    spec_buckets="mergeable_specs",
    page_unification="scale_or_pad",
    group_padding_ratio=1.5,
    in_flight_tokens="concurrent_batches",
    kv_tensor_layout="shared_backing",
    blocks_override="before_checks",
    capacity_reserve_blocks=1,
    per_request_memory="sum_over_groups",
    kv_capacity="concurrency_times_length",
    log_format="merged_capacity_line",
    freed_unhashed_blocks="head",
    admission="whole_prompt",
    prefix_stats="on_admission",
    scheduling="async",
    mamba_cache_modes=("align",),
    prefix_cache_retention="reachable",
    window_frees="processed",
    mamba_chunk_ends="last_checkpoint",
    mamba_retirement="past_nulls",
    hybrid_block_sizes="uniform",
    config_classes="transformers_5",
    config_wide_window="no_layer_types_or_all_sliding",
    quantization_names=(("gpt_oss", "mxfp4", "gpt_oss_mxfp4"),),
    mamba_prefill_checkpoints="mamba2_and_gdn",
    kv_sizing="profiled_estimate",
    measured_utilization=None,
    measured_kv_margin="none",
    default_block_size=16,
    mamba_sync_output_caching=False,
    auto_fit_passes="once",
)

# docs/vllm/changes-0.34.md: 0.33.0's planning and engine, plus the measured sizing path of the extensible
# KV cache (section 1), the default block size 64 (section 2), the SM100 capture grids (section 3),
# Model Runner V2 only (section 1.7), the Mamba sync output-time hashing (section 6.1) and the log
# lines of section 1.4; the new policies are listed in its section 9
VLLM_0_34_0 = replace(
    VLLM_0_33_0,
    version="0.34.0",
    cudagraph_capture_sizes="split_grids_on_sm100",
    in_flight_tokens="pp_plus_one_batches",
    log_format="merged_capacity_line_after_warmup",
    kv_sizing="measured_after_capture",
    measured_utilization=1.0,
    measured_kv_margin="max_1gib_or_three_quarters_peak",
    default_block_size=64,
    mamba_sync_output_caching=True,
    auto_fit_passes="twice_when_measured",
)

RELEASES: dict[str, Release] = {release.version: release for release in (VLLM_0_17_1, VLLM_0_33_0, VLLM_0_34_0)}


def _version_key(release: Release) -> tuple[int, ...]:
    """A release's version as numbers, so that 0.34.0 sorts after 0.4.0 (as text it would not)."""
    return tuple(int(part) for part in release.version.split("."))


# The newest release of the table, by version: the default when no supported vllm is installed, and
# the release of the semantics' own defaults (a caller that knows the command's release passes it)
NEWEST_RELEASE = max(RELEASES.values(), key=_version_key)


def release_for_installed(installed: str | None) -> Release:
    """The default rule: the installed vllm's release when kvplan reproduces it (a local build
    suffix such as `+cu128` is ignored), otherwise the newest release kvplan reproduces."""
    public = None if installed is None else installed.split("+", 1)[0]
    return RELEASES.get(public or "", NEWEST_RELEASE)


def release_named(version: str) -> Release:
    """The release of a version string the user gave (a file's `vllm_version`, --vllm-version)."""
    try:
        return RELEASES[version]
    except (KeyError, TypeError):
        raise KvplanError(f"vllm_version must be one of {', '.join(RELEASES)} (the releases kvplan reproduces), "
                          f"got {version!r}") from None
