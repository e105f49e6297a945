"""One serving configuration, as `kvplan fit` and `kvplan sweep` try many: a model on a GPU with
vLLM's settings, for one vLLM release. It turns into the request `plan` sizes, the engine a
workload runs on (`simulate`), and the `vllm serve` command line that starts it for real."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace

from kvplan.semantics.engine.args import EngineArgs
from kvplan.semantics.releases import DEFAULT_RELEASE, Release, Scheduling
from kvplan.usecases.plan import PlanRequest, PlanSummary
from kvplan.usecases.simulate.driver import PreparedWorkload, SimOptions, prepare
from kvplan.usecases.simulate.engine_source import EngineOverrides
from kvplan.usecases.simulate.workload import Workload

# the engine settings a workload's `engine` section may give (docs/workload.md) that size the pool too
WORKLOAD_SETTINGS = ("block_size", "max_model_len", "max_num_seqs", "max_num_batched_tokens",
                     "enable_prefix_caching", "enable_chunked_prefill", "scheduling")


@dataclass(frozen=True)
class Configuration:
    """None means "left unset": vLLM's default for the GPU and the release applies."""

    model: str
    release: Release = DEFAULT_RELEASE
    gpu: str | None = None
    gpu_memory_utilization: float | None = None
    kv_cache_memory_bytes: int | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    kv_cache_dtype: str = "auto"
    dtype: str = "auto"
    block_size: int | None = None
    max_model_len: int | None = None
    max_num_seqs: int | None = None
    max_num_batched_tokens: int | None = None
    enable_prefix_caching: bool | None = None
    enable_chunked_prefill: bool | None = None
    scheduling: Scheduling | None = None
    trust_remote_code: bool = False
    step_time: str | None = None           # how the simulation prices a step (--step-time; None: auto)

    @property
    def num_gpus(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size

    @property
    def utilization(self) -> float:
        """The gpu_memory_utilization this configuration is planned at: the one given, else the
        release's default for its sizing path (0.34.0: 1.0 on the measured path, 0.92 on the
        estimate; docs/vllm/changes-0.34.md §1.2), as `PlanRequest` resolves it."""
        return self.plan_request().utilization

    def plan_request(self) -> PlanRequest:
        return PlanRequest(
            model=self.model, release=self.release, gpu=self.gpu, gpu_memory_utilization=self.gpu_memory_utilization,
            kv_cache_memory_bytes=self.kv_cache_memory_bytes, tensor_parallel_size=self.tensor_parallel_size,
            pipeline_parallel_size=self.pipeline_parallel_size, kv_cache_dtype=self.kv_cache_dtype, dtype=self.dtype,
            block_size=self.block_size, max_model_len=self.max_model_len, max_num_seqs=self.max_num_seqs,
            max_num_batched_tokens=self.max_num_batched_tokens, enable_prefix_caching=self.enable_prefix_caching,
            enable_chunked_prefill=True if self.enable_chunked_prefill is None else self.enable_chunked_prefill,
            trust_remote_code=self.trust_remote_code,
        )

    def with_workload_settings(self, workload: Workload) -> Configuration:
        """The workload's engine settings where this configuration leaves them unset, so that the
        plan sizes the engine the workload runs on."""
        settings = {**workload.engine.args.given(), "scheduling": workload.engine.scheduling}
        unset = {name: settings[name] for name in WORKLOAD_SETTINGS
                 if getattr(self, name) is None and settings.get(name) is not None}
        return replace(self, **unset)

    def settled(self, plan: PlanSummary) -> Configuration:
        """This configuration with the lengths and batch limits vLLM settled on written out, so that
        its command line does not depend on defaults."""
        return replace(self, max_model_len=plan.max_model_len, max_num_seqs=plan.max_num_seqs,
                       max_num_batched_tokens=plan.max_num_batched_tokens)

    def vllm_serve_args(self) -> str:
        """The `vllm serve` command line of this configuration (kvplan's flags are spelled the same,
        so `kvplan simulate W.json --gpu GPU` takes the flags after the model as they are)."""
        args = ["vllm", "serve", self.model]
        if self.tensor_parallel_size != 1:
            args += ["--tensor-parallel-size", str(self.tensor_parallel_size)]
        if self.pipeline_parallel_size != 1:
            args += ["--pipeline-parallel-size", str(self.pipeline_parallel_size)]
        if self.dtype != "auto":
            args += ["--dtype", self.dtype]
        if self.kv_cache_dtype != "auto":
            args += ["--kv-cache-dtype", self.kv_cache_dtype]
        if self.kv_cache_memory_bytes is not None:
            args += ["--kv-cache-memory-bytes", str(self.kv_cache_memory_bytes)]
        else:
            if self.gpu_memory_utilization is not None or self.release.measured_utilization is None:
                args += ["--gpu-memory-utilization", f"{self.utilization:g}"]
            # else vLLM resolves an unset value itself (0.34.0: 1.0 with the extensible KV cache,
            # 0.92 without, docs/vllm/changes-0.34.md §1.2), which an explicit value would only cap
        for flag, value in (("--block-size", self.block_size), ("--max-model-len", self.max_model_len),
                            ("--max-num-seqs", self.max_num_seqs),
                            ("--max-num-batched-tokens", self.max_num_batched_tokens)):
            if value is not None:
                args += [flag, str(value)]
        for flag, on in (("enable-prefix-caching", self.enable_prefix_caching),
                         ("enable-chunked-prefill", self.enable_chunked_prefill)):
            if on is not None:
                args.append(f"--{flag}" if on else f"--no-{flag}")
        if self.scheduling == "sync":
            args.append("--no-async-scheduling")
        if self.trust_remote_code:
            args.append("--trust-remote-code")
        return shlex.join(args)

    def overrides(self, kv_cache_memory_bytes: int | None = None) -> EngineOverrides:
        """The engine of `simulate` for this configuration; `kv_cache_memory_bytes` (what a plan
        found) replaces the utilization, which would otherwise need a profile run again."""
        kv_bytes = self.kv_cache_memory_bytes if kv_cache_memory_bytes is None else kv_cache_memory_bytes
        args = EngineArgs(
            block_size=self.block_size, enable_prefix_caching=self.enable_prefix_caching,
            max_num_batched_tokens=self.max_num_batched_tokens, max_num_seqs=self.max_num_seqs,
            max_model_len=self.max_model_len, enable_chunked_prefill=self.enable_chunked_prefill,
            gpu_memory_utilization=None if kv_bytes is not None else self.gpu_memory_utilization,
            kv_cache_memory_bytes=kv_bytes, kv_cache_dtype=self.kv_cache_dtype, dtype=self.dtype,
            tensor_parallel_size=self.tensor_parallel_size, pipeline_parallel_size=self.pipeline_parallel_size,
            trust_remote_code=False)
        return EngineOverrides(args=args, scheduling=self.scheduling, gpu=self.gpu, step_time=self.step_time)

    def prepare(self, workload: Workload, kv_cache_memory_bytes: int | None = None,
                seed: int | None = None, step_time_ms: float | None = None) -> PreparedWorkload:
        """The workload's traffic on this configuration: its pool planned for this model (the
        workload's own pool source is set aside, its engine settings kept where this leaves them
        unset)."""
        engine = replace(workload.engine.settings_alone(), model=self.model)
        options = SimOptions(overrides=self.overrides(kv_cache_memory_bytes), seed=seed, step_time_ms=step_time_ms,
                             release=self.release)
        return prepare(replace(workload, engine=engine), options)
