"""`kvplan profile`: vLLM's start-up on one device, in its order (docs/vllm/kv-semantics.md §2;
what later releases change: docs/vllm/changes-0.33.md §1, docs/vllm/changes-0.34.md §1): snapshot
and `requested`, load the model, profile run, non-KV memory, available KV memory, sizing (the very
functions `kvplan plan` uses), then the KV tensors allocated and checked.

Public API:
    ProfileRequest(plan, backend="auto", device_index=0, load_format="dummy", ...)
    run_profile(options, progress=None) -> ProfileResult
    plan_for_device(request) -> PlanResult      (`plan`, predicting the KV memory of a GPU when none is given)
    choose_backend(name, ...) -> the backend name "auto" resolves to
    provenance_knobs(result) -> the settings a saved profile records
    summarize(result) -> ProfileSummary"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kvplan.errors import KvplanError, require_profile_extra
from kvplan.gpus.catalog import DEFAULT_GPU, GpuSpec, list_gpus
from kvplan.measure.backend import (
    BACKENDS,
    LOAD_FORMATS,
    ActivationMeasurement,
    AllocationReport,
    DeviceSnapshot,
    MemoryBackend,
    ModelSource,
    WeightsMeasurement,
)
from kvplan.measure.nvml import NvmlReport
from kvplan.semantics.config.parallel import pp_layer_ranges
from kvplan.semantics.dtypes import dtype_size
from kvplan.semantics.kv.sizing import (
    estimate_max_model_len_from_groups,
    measured_sizing_texts,
    reserved_bytes,
    sizing_limits,
)
from kvplan.semantics.memory.budget import (
    KvCacheMemorySuggestion,
    MemoryBudget,
    available_memory_lines,
    kv_cache_memory_suggestion,
    logs_kv_cache_memory_suggestion,
    model_loading_line,
    requested_memory,
    startup_refusal,
    utilization_for,
)
from kvplan.semantics.memory.cudagraphs import (
    FULL_GRAPH_PROFILING_SAMPLES,
    CudaGraphEstimate,
    capture_plan,
    extrapolate_from_largest,
    extrapolate_graph_pool,
    predicted_samples,
)
from kvplan.semantics.memory.profile_batch import ProfileBatch, profile_batch
from kvplan.semantics.memory.sampler import ASSUMED_MULTIPROCESSORS, RUNNER_STATE
from kvplan.semantics.releases import Release
from kvplan.units import format_duration, format_gib
from kvplan.usecases.measured_sizing import RankReadings, measured_plan
from kvplan.usecases.non_torch import SOURCE_FILE as NON_TORCH_SOURCE_FILE
from kvplan.usecases.non_torch import NonTorchPrediction, predict_non_torch
from kvplan.usecases.plan import (
    PlanRequest,
    PlanResult,
    SettledConfig,
    check_request,
    plan,
    predicts_kv_memory,
    settle,
)
from kvplan.usecases.profile_summary import ProfileSummary, Provenance, knobs_sha256

if TYPE_CHECKING:
    from kvplan.measure.shard import RankShard

Progress = Callable[[str], None]


@dataclass(frozen=True)
class ProfileRequest:
    """`plan` carries vLLM's settings (its `kv_cache_memory_bytes` is `--kv-cache-memory`);
    the rest is how kvplan measures."""

    plan: PlanRequest
    backend: str = "auto"
    device_index: int = 0
    load_format: str = "dummy"
    attention_backend: str = "flash_attn"
    allocate: bool = True
    non_torch_bytes: int | None = None      # --non-torch-bytes, for backends that cannot measure it
    cuda_graph_bytes: int | None = None     # --cuda-graph-bytes (vLLM's "Graph capturing ... took")
    cuda_context_bytes: int | None = None   # --cuda-context-bytes, for backends that cannot measure it


@dataclass(frozen=True)
class OutsideRequested:
    """What 0.17.1 leaves out of `total x utilisation` and must fit in `total - requested`."""

    headroom_bytes: int
    cuda_context_bytes: int | None
    cuda_context_source: str
    cuda_graph_bytes: int | None
    cuda_graph_source: str

    @property
    def known_bytes(self) -> int:
        return (self.cuda_context_bytes or 0) + (self.cuda_graph_bytes or 0)

    @property
    def fits(self) -> bool | None:
        """None while a term is unknown and the known ones fit."""
        if self.known_bytes > self.headroom_bytes:
            return False
        if self.cuda_context_bytes is None or self.cuda_graph_bytes is None:
            return None
        return True


@dataclass(frozen=True)
class FitTarget:
    """What reaches one request of `max_model_len` tokens, and vLLM's own suggestion."""

    max_model_len: int
    kv_cache_memory_bytes: int              # bytes one such request needs (vLLM's memory check)
    gpu_memory_utilization: float | None    # the smallest that leaves them; None: not even 1.0
    largest_max_model_len: int              # the longest request the available memory holds
    suggestion: KvCacheMemorySuggestion | None   # None where vLLM stops before logging it


@dataclass(frozen=True)
class RankMemory:
    """One rank's start-up: the rank of each pipeline stage (its TP ranks hold equal shards), its
    weights, its profile run's activation peak and the KV memory left to it."""

    pp_rank: int
    layers: tuple[int, int]                 # its decoder layers [start, end)
    weights: WeightsMeasurement
    activations: ActivationMeasurement
    budget: MemoryBudget
    non_torch_source: str
    graphs: CudaGraphEstimate | None = None   # the CUDA-graph pool the release takes from this rank's budget


@dataclass(frozen=True)
class ProfileResult:
    options: ProfileRequest
    setup: SettledConfig
    backend: str
    predicted: bool
    device_label: str
    gpu: GpuSpec | None
    snapshot: DeviceSnapshot
    batch: ProfileBatch
    weights: WeightsMeasurement | None
    activations: ActivationMeasurement | None
    budget: MemoryBudget | None
    non_torch_source: str
    plan: PlanResult | None
    allocation: AllocationReport | None
    outside: OutsideRequested
    target: FitTarget | None
    finding: str | None                     # vLLM's refusal: the configuration does not fit
    vllm_log: tuple[str, ...]
    warnings: tuple[str, ...]
    nvml: NvmlReport | None = None
    ranks: tuple[RankMemory, ...] = ()      # one per pipeline stage; the binding one gives the figures above
    cuda_graphs: CudaGraphEstimate | None = None   # the pool the release takes from the KV budget

    @property
    def fits(self) -> bool:
        return self.finding is None

    @property
    def summary(self) -> ProfileSummary:
        return summarize(self)


def choose_backend(name: str, cuda_is_usable: Callable[[], bool]) -> str:
    if name not in BACKENDS:
        raise KvplanError(f"--backend {name!r}: choose one of {', '.join(BACKENDS)}")
    if name == "auto":
        return "cuda" if cuda_is_usable() else "fake"
    return name


def _catalog_gpu_named(device_name: str) -> GpuSpec | None:
    """The catalog entry whose name is the CUDA device's name, if exactly one matches."""
    matches = [gpu for gpu in list_gpus() if gpu.name.lower() == device_name.strip().lower()]
    return matches[0] if len(matches) == 1 else None


def _model_directory(setup: SettledConfig) -> Path | None:
    if setup.resolved.source in ("local", "hf-cache"):
        return Path(setup.resolved.path).parent
    return None


def _check_options(options: ProfileRequest) -> None:
    check_request(options.plan)
    if options.load_format not in LOAD_FORMATS:
        raise KvplanError(f"--load-format {options.load_format!r}: choose dummy (random weights) or auto")
    for flag, value in (
        ("--non-torch-bytes", options.non_torch_bytes), ("--cuda-graph-bytes", options.cuda_graph_bytes),
        ("--cuda-context-bytes", options.cuda_context_bytes),
    ):
        if value is not None and value < 0:
            raise KvplanError(f"{flag} must be 0 or more bytes")


def _cuda_backend(options: ProfileRequest) -> tuple[MemoryBackend, PlanRequest, NvmlReport]:
    """The GPU, and the request planned for its measured total (and its catalog entry, if any)."""
    from kvplan.measure.cuda import CudaBackend
    from kvplan.measure.nvml import query_nvml

    backend = CudaBackend(options.device_index)
    _free, total = backend.cuda.mem_get_info(backend.device)
    request = options.plan
    gpu_key = request.gpu or (gpu.key if (gpu := _catalog_gpu_named(backend.device_name)) else None)
    return backend, replace(request, gpu=gpu_key, gpu_memory_bytes=int(total)), query_nvml(options.device_index)


def _host_backend(name: str, setup: SettledConfig) -> MemoryBackend:
    """The fake or cpu backend, planning for the GPU the setup names."""
    total = setup.device.total_bytes
    assert total is not None
    multiprocessors = setup.device.gpu.multiprocessors if setup.device.gpu else None
    if name == "fake":
        from kvplan.measure.fake import FakeBackend

        return FakeBackend(total, _label(setup), multiprocessors)
    from kvplan.measure.cpu import CpuBackend

    return CpuBackend(total, _label(setup), multiprocessors)


def _label(setup: SettledConfig) -> str:
    gpu = setup.device.gpu
    if gpu is not None:
        return f"{gpu.name} ({gpu.key})"
    return f"a {format_gib(setup.device.total_bytes or 0)} GiB GPU (--gpu-memory)"


def _outside(options: ProfileRequest, backend: str, snapshot: DeviceSnapshot, headroom: int,
             nvml: NvmlReport | None) -> OutsideRequested:
    if options.cuda_context_bytes is not None:
        context, context_source = options.cuda_context_bytes, "--cuda-context-bytes"
    elif backend == "cuda":
        others = nvml.other_processes_bytes() if nvml else 0
        context = snapshot.non_torch_bytes - others
        context_source = "measured: non-torch memory at start-up" + (", less other processes (NVML)" if others else "")
    else:
        context, context_source = None, f"not measured ({backend} backend); --cuda-context-bytes sets it"
    if options.plan.release.cuda_graphs_in_budget:
        graphs, graph_source = 0, "inside the budget: the release takes its estimate from the KV cache"
    elif options.plan.value("enforce_eager"):
        graphs, graph_source = 0, "--enforce-eager: vLLM captures no CUDA graphs"
    elif options.cuda_graph_bytes is not None:
        graphs, graph_source = options.cuda_graph_bytes, "--cuda-graph-bytes"
    else:
        # kvplan runs the Hugging Face model, not vLLM's graph capture
        graphs = None
        graph_source = "not measured; --cuda-graph-bytes sets it (vLLM logs 'Graph capturing ... took X GiB')"
    return OutsideRequested(headroom, context, context_source, graphs, graph_source)


def run_profile(options: ProfileRequest, progress: Progress | None = None) -> ProfileResult:
    """Everything `kvplan profile` does, as data; bad input raises KvplanError."""
    say = progress or (lambda _stage: None)
    warnings: list[str] = []
    _check_options(options)

    from kvplan.measure.cuda import cuda_usable

    name = choose_backend(options.backend, cuda_usable)
    request = options.plan
    sharded = request.value("tensor_parallel_size") > 1 or request.value("pipeline_parallel_size") > 1
    if sharded and options.backend == "auto":
        name = "fake"
    if sharded and name != "fake":
        raise KvplanError(
            f"the {name} backend measures one device that holds the whole model; for --tensor-parallel-size or "
            "--pipeline-parallel-size above 1 use --backend fake (each rank's shard on fake tensors) or "
            "`kvplan plan --kv-cache-memory BYTES`"
        )
    nvml: NvmlReport | None = None
    if name == "cuda":
        say(f"starting the {name} backend")
        backend, request, nvml = _cuda_backend(options)
        warnings.extend(nvml.warnings())
        setup = settle(request)
    else:
        request = options.plan
        if request.gpu is None and request.gpu_memory_bytes is None:
            request = replace(request, gpu=DEFAULT_GPU)
            warnings.append(
                f"no GPU given: predicting for the reference GPU {DEFAULT_GPU}; pass --gpu KEY or --gpu-memory"
            )
        setup = settle(request)
        # after the settings are settled: input they refuse is reported before any progress line
        say(f"starting the {name} backend")
        backend = _host_backend(name, setup)

    # 1. start-up snapshot and vLLM's refusal when less than `requested` is free
    snapshot = backend.snapshot()
    utilization = request.utilization
    refusal = startup_refusal(snapshot.free_bytes, snapshot.total_bytes, utilization, backend.device_label)
    batch = profile_batch(setup.batch.max_num_batched_tokens, setup.batch.max_num_seqs)
    headroom = snapshot.total_bytes - requested_memory(snapshot.total_bytes, utilization)
    outside = _outside(options, name, snapshot, headroom, nvml)
    if refusal is not None:
        return ProfileResult(
            options=options, setup=setup, backend=name, predicted=backend.predicted,
            device_label=backend.device_label, gpu=setup.device.gpu, snapshot=snapshot, batch=batch,
            weights=None, activations=None, budget=None, non_torch_source="", plan=None, allocation=None,
            outside=outside, target=None, finding=refusal, vllm_log=tuple(setup.logs), warnings=tuple(warnings),
            nvml=nvml,
        )

    # 2-4. each pipeline stage's rank (the TP ranks of a stage hold equal shards): its shard of the
    # model, its profile run, its non-KV memory and what is left for its KV cache
    source = ModelSource(
        model_id=setup.shape.model_id, config=setup.resolved.config, dtype=setup.model_dtype,
        load_format=options.load_format,  # type: ignore[arg-type]
        directory=_model_directory(setup), trust_remote_code=request.value("trust_remote_code"),
    )
    if setup.shape.is_hybrid:
        warnings.append(
            "Mamba / linear-attention layers run transformers' reference (unfused) code, which holds chunked-scan "
            "tensors vLLM's kernels do not: the activation peak is an upper bound"
        )
    multiprocessors = backend.multiprocessors()
    if multiprocessors is None:
        multiprocessors = ASSUMED_MULTIPROCESSORS
        warnings.append(
            f"SM count of this GPU unknown: the sampler's top-k/top-p scratch buffer assumes {multiprocessors}"
        )
    ranks = []
    shards = rank_shards(setup)
    for number, shard in enumerate(shards, start=1):
        # a count of the stages profiled, so that a long run says how far it is
        rank_say = say if len(shards) == 1 else (lambda text, n=number: say(f"stage {n} of {len(shards)}: {text}"))
        ranks.append(_profile_rank(backend, name, source, shard, setup, options, request, batch, multiprocessors,
                                   snapshot, rank_say, warnings))
    # the rank with the least KV memory bounds the pool (vLLM takes the smallest block count)
    binding = min(ranks, key=lambda rank: rank.budget.available_kv_bytes)
    weights, activations, budget = binding.weights, binding.activations, binding.budget
    weights_bytes, non_torch_source = weights.weights_bytes, binding.non_torch_source

    # 5. sizing with the functions of `kvplan plan` (0.34.0's measured path: the capacity, then the
    # blocks vLLM measures after warmup and CUDA-graph capture), then the tensors
    say("sizing the KV cache")
    path = options.plan.sizing_path
    per_worker = tuple(rank.budget.available_kv_bytes for rank in ranks)
    if path.measured:
        capacity = plan(request.with_args(kv_cache_memory_bytes=budget.available_kv_bytes), setup,
                        kv_cache_memory_per_worker=per_worker, report_capacity=False,
                        texts=measured_sizing_texts(request.release, request.utilization, after_warmup=False))
        say("predicting the memory vLLM measures after warmup and CUDA-graph capture")
        result = measured_plan(request, setup, capacity, [_readings(rank) for rank in ranks],
                               init_free_bytes=snapshot.free_bytes, path=path)
    else:
        result = replace(plan(request.with_args(kv_cache_memory_bytes=budget.available_kv_bytes), setup,
                              kv_cache_memory_per_worker=per_worker), path=path)
    allocation = None
    finding = result.sizing.finding
    config = result.kv_config
    if result.fits and options.allocate and config is not None and config.kv_cache_tensors:
        say(f"allocating {len(config.kv_cache_tensors)} KV tensors ({format_gib(config.pool_bytes)} GiB)")
        allocation = backend.allocate(config, options.attention_backend)
        if not allocation.check.passed:
            finding = f"the KV tensors failed the slot-mapping round trip: {allocation.check}"

    target = _target(result, setup, budget, options, result.kv_cache_memory_bytes)
    if outside.fits is False:
        warnings.append(
            f"the CUDA context and CUDA-graph pool ({format_gib(outside.known_bytes)} GiB) do not fit in the "
            f"{format_gib(outside.headroom_bytes)} GiB outside gpu_memory_utilization: vLLM may run out of memory "
            "capturing graphs"
        )
    log = (
        *setup.logs, model_loading_line(weights_bytes), *available_memory_lines(budget),
        *result.sizing.log_lines,
    )
    return ProfileResult(
        options=options, setup=setup, backend=name, predicted=backend.predicted, device_label=backend.device_label,
        gpu=setup.device.gpu, snapshot=snapshot, batch=batch, weights=replace(weights, weights_bytes=weights_bytes),
        activations=activations, budget=budget, non_torch_source=non_torch_source, plan=result,
        allocation=allocation, outside=outside, target=target, finding=finding, vllm_log=tuple(log),
        warnings=tuple(warnings) + tuple(result.warnings), nvml=nvml, ranks=tuple(ranks),
        cuda_graphs=binding.graphs,
    )


def _readings(rank: RankMemory) -> RankReadings:
    """What 0.34.0's measurement rests on for one rank: the budget's terms and the CUDA-graph pool it
    captures (the estimate's figure, here the pool's actual size: vLLM measures it in free memory)."""
    return RankReadings(rank.budget, rank.graphs.bytes if rank.graphs else 0)


def rank_shards(setup: SettledConfig) -> list[RankShard | None]:
    """The shard of each pipeline stage's rank, None for a model on one GPU: the stages take the
    layers the KV cache's stages take (VLLM_PP_LAYER_PARTITION included)."""
    from kvplan.measure.shard import RankShard

    cache = setup.cache
    if cache.tensor_parallel_size == 1 and cache.pipeline_parallel_size == 1:
        return [None]
    stages = pp_layer_ranges(setup.shape.num_hidden_layers, cache.pipeline_parallel_size, cache.pp_layer_partition)
    return [RankShard(cache.tensor_parallel_size, layers, number == len(stages) - 1, setup.shape.vocab_size)
            for number, layers in enumerate(stages)]


def _profile_rank(
    backend: MemoryBackend, name: str, source: ModelSource, shard: RankShard | None, setup: SettledConfig,
    options: ProfileRequest, request: PlanRequest, batch: ProfileBatch, multiprocessors: int,
    snapshot: DeviceSnapshot, say: Progress, warnings: list[str],
) -> RankMemory:
    """One rank's model load and profile run, and its budget."""
    stage = "" if shard is None else (f" (layers {shard.layers.start}-{shard.layers.stop - 1}, 1/"
                                      f"{shard.tensor_parallel_size} of each tensor-parallel layer)")
    say(f"loading {setup.shape.model_id}{stage} ({options.load_format} weights, {setup.model_dtype})")
    weights = backend.load_model(replace(source, shard=shard))
    if shard is not None or setup.shape.quantization:
        from kvplan.measure.meta_build import weights_for

        # a shard's bytes follow vLLM's sharding rules (a transformers build keeps every stage's
        # embeddings); a quantized checkpoint's follow its scheme (transformers builds it unquantized)
        estimate = weights_for(setup.resolved, setup.model_dtype, setup.cache.tensor_parallel_size,
                               setup.cache.pipeline_parallel_size, trust_remote_code=request.value("trust_remote_code"),
                               pp_layer_partition=setup.cache.pp_layer_partition)
        pp_rank = 0 if shard is None else rank_index(shard, setup)
        per_rank = estimate.per_stage_bytes[pp_rank]
        if setup.shape.quantization and pp_rank == 0:
            warnings.append(
                f"quantized checkpoint: weights are {format_gib(per_rank)} GiB per GPU by its scheme "
                f"({estimate.method}); the transformers build measured {format_gib(weights.weights_bytes)} GiB "
                "unquantized, and the activation peak is the unquantized model's"
            )
        how = weights.how if shard is None else f"vLLM's sharding of the model's parameters ({estimate.method})"
        weights = replace(weights, weights_bytes=per_rank, how=how)
    plural = "" if shard is None else " on this rank's shard"
    if name == "cpu":
        say(_cpu_forward_estimate(weights.weights_bytes, setup.model_dtype, batch.num_tokens))
    say(f"profile run{plural}: {batch.num_tokens} tokens over {batch.num_reqs} requests, then the dummy sampler")
    release = request.release
    activations = backend.profile(batch, multiprocessors, release.profile_sampler)
    graphs = _cuda_graph_estimate(options, name, backend, setup, say)
    backend.release_model()
    if activations.non_torch_increase_bytes is not None:
        non_torch, non_torch_source = activations.non_torch_increase_bytes, "measured"
    elif options.non_torch_bytes is not None:
        non_torch, non_torch_source = options.non_torch_bytes, "--non-torch-bytes"
    elif (logged := _logged_non_torch(setup, release)) is not None:
        # real vLLM start-ups of this GPU (or its family) at this TP: before the catalog's per-GPU
        # figure, which cannot tell TP 1 from the NCCL buffers of TP > 1 (usecases/non_torch.py)
        non_torch, non_torch_source = logged.non_torch_bytes, logged.source
    elif setup.device.gpu is not None and setup.device.gpu.non_torch_bytes is not None:
        non_torch, non_torch_source = setup.device.gpu.non_torch_bytes, f"GPU catalog ({setup.device.gpu.key})"
    else:
        non_torch, non_torch_source = 0, "assumed 0"
        if not any(warning.startswith("non-torch memory") for warning in warnings):
            tp = setup.cache.tensor_parallel_size
            warnings.append(
                f"non-torch memory (cuBLAS workspaces, NCCL and attention-backend buffers) is not measured by the "
                f"{name} backend and no real vLLM log of this GPU (or its family) at TP {tp} gives it "
                f"({NON_TORCH_SOURCE_FILE}), so it is taken as 0; pass --non-torch-bytes to set it"
            )
    # V2's sampler state is held by the last pipeline stage's runner, which samples
    samples = shard is None or shard.last_stage
    runner_state = 0 if activations.consumed_bytes is not None or not samples else \
        RUNNER_STATE[release.profile_sampler](setup.batch.max_num_seqs, activations.sampler.vocab_size)
    budget = MemoryBudget(
        kv_sizing=request.sizing_path.kv_sizing,
        total_bytes=snapshot.total_bytes, free_at_start_bytes=snapshot.free_bytes, utilization=request.utilization,
        weights_bytes=weights.weights_bytes, activation_peak_bytes=activations.activation_peak_bytes,
        non_torch_bytes=non_torch, kv_cache_memory_override=options.plan.args.kv_cache_memory_bytes,
        release=release, cuda_graph_bytes=graphs.bytes if graphs else options.cuda_graph_bytes or 0,
        retained_bytes=activations.retained_bytes, consumed_bytes=activations.consumed_bytes,
        runner_state_bytes=runner_state,
    )
    layers = (0, setup.shape.num_hidden_layers) if shard is None else (shard.layers.start, shard.layers.stop)
    return RankMemory(0 if shard is None else rank_index(shard, setup), layers, weights, activations, budget,
                      non_torch_source, graphs)


def _logged_non_torch(setup: SettledConfig, release: Release) -> NonTorchPrediction | None:
    gpu = setup.device.gpu
    return None if gpu is None else predict_non_torch(gpu, setup.cache.tensor_parallel_size, release)


def rank_index(shard: RankShard, setup: SettledConfig) -> int:
    """The pipeline stage a shard belongs to."""
    stages = pp_layer_ranges(setup.shape.num_hidden_layers, setup.cache.pipeline_parallel_size,
                             setup.cache.pp_layer_partition)
    return stages.index(shard.layers)


def _cpu_forward_estimate(weights_bytes: int, dtype: str, tokens: int) -> str:
    """What the cpu backend's profile run will take, said before it starts: its forward is real."""
    from kvplan.measure.cpu_speed import forward_seconds, matmul_flops_per_s

    parameters = weights_bytes / dtype_size(dtype)
    rate = matmul_flops_per_s()
    return (f"the cpu backend's profile run is a real forward of {tokens:,} tokens through {parameters / 1e9:.2f} B "
            f"parameters: about {format_duration(forward_seconds(parameters, tokens, rate))} on this CPU "
            f"({rate / 1e9:,.0f} GFLOP/s measured; --backend fake predicts the same memory in seconds)")


def _cuda_graph_estimate(options: ProfileRequest, backend_name: str, backend: MemoryBackend, setup: SettledConfig,
                         say: Progress) -> CudaGraphEstimate | None:
    """The CUDA-graph pool a release that takes it from the KV budget subtracts (None for one that
    does not): given, measured by capturing graphs on the GPU, or predicted from the fake forward."""
    release = options.plan.release
    if not release.cuda_graphs_in_budget:
        return None
    if options.cuda_graph_bytes is not None:
        return CudaGraphEstimate(options.cuda_graph_bytes, "given", "--cuda-graph-bytes")
    if options.plan.value("enforce_eager"):
        # vLLM's --enforce-eager sets cudagraph_mode NONE: `capture_model` records nothing
        return CudaGraphEstimate(0, "given", "--enforce-eager: no CUDA graphs")
    plan = capture_plan(setup.batch.max_num_seqs, setup.batch.max_num_batched_tokens, setup.device.capability,
                        release=release)
    if not plan.piecewise:
        return CudaGraphEstimate(0, "given", "no capture sizes")
    largest = plan.piecewise[:FULL_GRAPH_PROFILING_SAMPLES]
    if backend_name == "cuda":
        say(f"capturing CUDA graphs of the forward at {', '.join(map(str, largest))} tokens into a throw-away pool")
        samples = backend.graph_samples(largest)
        how = (f"measured: graphs of the forward at {' and '.join(map(str, largest))} tokens captured into a "
               f"throw-away pool ({', '.join(f'{sample:,}' for sample in samples)} B), extrapolated to the "
               f"{plan.num_graphs} graphs vLLM captures (first + others x max(second, 1 MiB))")
        return CudaGraphEstimate(extrapolate_from_largest(plan, samples), "measured", how, plan)
    say(f"predicting the CUDA-graph pool from a {largest[0]}-token forward")
    peak = backend.forward_peak(largest[0])
    dtype_bytes = dtype_size(setup.model_dtype)
    piecewise, full = predicted_samples(plan, peak, setup.shape.hidden_size, dtype_bytes)
    how = (f"predicted: the {largest[0]}-token forward's activation peak ({peak:,} B) for the largest of "
           f"{len(plan.piecewise)} PIECEWISE graphs, the hidden states (at least 1 MiB) for every other, and "
           f"{len(plan.full)} FULL graphs extrapolated from their two largest, as vLLM 0.33.0's estimator")
    return CudaGraphEstimate(extrapolate_graph_pool(plan, piecewise, full), "predicted", how, plan)


def _target(
    result: PlanResult, setup: SettledConfig, budget: MemoryBudget, options: ProfileRequest, kv_bytes: int,
) -> FitTarget | None:
    groups = result.sizing.groups
    if not groups:
        return None
    needed = result.sizing.bytes_needed_for_one_max_len_request
    release = options.plan.release
    limits = sizing_limits(int(setup.shape.max_model_len), setup.batch.max_num_batched_tokens,
                           options.plan.value("pipeline_parallel_size"), release=release)
    available = kv_bytes - reserved_bytes(groups, release)
    largest = estimate_max_model_len_from_groups(groups, available, limits, release) if available > 0 else 0
    return FitTarget(
        max_model_len=result.sizing.max_model_len,
        kv_cache_memory_bytes=needed,
        gpu_memory_utilization=utilization_for(budget.total_bytes, budget.non_kv_bytes, max(needed, 1)),
        largest_max_model_len=largest,
        suggestion=kv_cache_memory_suggestion(budget, budget.cuda_graph_bytes)
        if logs_kv_cache_memory_suggestion(budget, result.sizing.fits) else None,
    )


# engine arguments that vLLM 0.34.0 added
SINCE_0_34_0 = ("enable_extensible_kv_cache",)

PREDICTED_MEMORY = "predicted: ceil(total x utilization) - weights - activation peak (fake profile run)"
PREDICTED_MEASURED_MEMORY = ("predicted: the memory vLLM measures free after warmup and CUDA-graph capture, less "
                             "max(1 GiB, 0.75 x transient peak) and max(transient peak, reservation growth) "
                             "(fake profile run)")


def plan_for_device(request: PlanRequest, progress: Progress | None = None) -> PlanResult:
    """Like `plan`, but without `kv_cache_memory_bytes` the KV memory of the GPU named by `--gpu` /
    `--gpu-memory` is predicted by the profile run on the fake backend (needs torch)."""
    if not predicts_kv_memory(request):
        return plan(request)
    require_profile_extra("predicting the KV memory of --gpu (no --kv-cache-memory given)")
    profile = run_profile(ProfileRequest(plan=request, backend="fake", allocate=False), progress)
    if profile.plan is None:
        raise KvplanError(f"the profile run refused this configuration: {profile.finding}")
    source = PREDICTED_MEASURED_MEMORY if profile.plan.sizing_path.measured else PREDICTED_MEMORY
    return replace(profile.plan, memory_source=source, warnings=profile.warnings,
                   non_torch_bytes=None if profile.budget is None else profile.budget.non_torch_bytes,
                   non_torch_source=profile.non_torch_source or None)


def provenance_knobs(result: ProfileResult) -> dict[str, Any]:
    """The settings a saved profile was made with: vLLM's, then how kvplan measured."""
    options = result.options
    # the release is the provenance's `vllm_semantics`, not a setting; a setting only 0.34.0 has is
    # recorded where it was given (profiles of earlier releases keep their knobs and digest)
    # (--prompt-len only chooses which concurrency figures are shown: not a setting either)
    knobs = {name: value for name, value in options.plan.recorded().items()
             if name not in ("release", "prompt_lens") and not (name in SINCE_0_34_0 and value is None)}
    knobs.update(
        backend=result.backend, load_format=options.load_format, attention_backend=options.attention_backend,
        allocate=options.allocate, non_torch_bytes=options.non_torch_bytes,
        cuda_graph_bytes=options.cuda_graph_bytes, cuda_context_bytes=options.cuda_context_bytes,
        device_index=options.device_index if result.backend == "cuda" else None,
    )
    return knobs


def summarize(result: ProfileResult) -> ProfileSummary:
    budget, weights, activations = result.budget, result.weights, result.activations
    knobs = provenance_knobs(result)
    return ProfileSummary(
        fits=result.fits,
        error=result.finding,
        predicted=result.predicted,
        device=result.device_label,
        total_bytes=result.snapshot.total_bytes,
        gpu_memory_utilization=result.options.plan.utilization,
        kv_cache_memory_given=result.options.plan.args.kv_cache_memory_bytes is not None,
        weights_bytes=None if weights is None else weights.weights_bytes,
        activation_peak_bytes=None if activations is None else activations.activation_peak_bytes,
        non_torch_bytes=None if budget is None else budget.non_torch_bytes,
        non_kv_bytes=None if budget is None else budget.non_kv_bytes,
        available_kv_bytes=None if budget is None else budget.available_kv_bytes,
        largest_max_model_len=None if result.target is None else result.target.largest_max_model_len,
        cuda_graph_estimate_bytes=None if result.cuda_graphs is None else result.cuda_graphs.bytes,
        profile_run_tokens=result.batch.num_tokens,
        plan=None if result.plan is None else result.plan.summary,
        provenance=Provenance(
            vllm_semantics=result.options.plan.release.version, model=result.setup.shape.model_id,
            config_sha256=result.setup.resolved.sha256, knobs=knobs, knobs_sha256=knobs_sha256(knobs),
        ),
    )
