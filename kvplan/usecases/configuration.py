"""One serving configuration, as `kvplan fit` and `kvplan sweep` try many: a model on a GPU with
vLLM's settings, for one vLLM release. It turns into the request `plan` sizes, the engine a
workload runs on (`simulate`), and the `vllm serve` command line that starts it for real."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field, replace
from typing import Any

from kvplan.semantics.engine.args import SCHEDULES, EngineArgs, named, setting
from kvplan.semantics.releases import Release, Scheduling
from kvplan.sources.installed import DEFAULT_RELEASE
from kvplan.usecases.plan import PlanRequest, PlanSummary
from kvplan.usecases.simulate.driver import PreparedWorkload, SimOptions, prepare
from kvplan.usecases.simulate.engine_source import EngineOverrides
from kvplan.usecases.simulate.workload import Workload

# the engine arguments a workload's `engine` section may give (docs/workload.md) that size the pool too
WORKLOAD_ARGS = named(SCHEDULES)
# the `vllm serve` line: these flags when they differ from the release's default, then the memory, then
# these given values, then these switches when given (their `--no-` half when off)
SERVE_CHOICES = ("tensor_parallel_size", "pipeline_parallel_size", "dtype", "kv_cache_dtype")
SERVE_VALUES = ("block_size", "max_model_len", "max_num_seqs", "max_num_batched_tokens")
SERVE_SWITCHES = ("enable_prefix_caching", "enable_chunked_prefill")


@dataclass(frozen=True)
class Configuration:
    """A model on a GPU with vLLM's engine arguments (`args`; None: vLLM's default for the GPU and
    the release applies), the engine loop and how the simulation prices a step."""

    model: str
    release: Release = DEFAULT_RELEASE
    gpu: str | None = None
    args: EngineArgs = field(default_factory=EngineArgs)
    scheduling: Scheduling | None = None
    step_time: str | None = None           # how the simulation prices a step (--step-time; None: auto)

    def value(self, name: str) -> Any:
        """An engine argument as given, else this release's default (`EngineArgs.value`)."""
        return self.args.value(name, self.release)

    def with_args(self, **changes: Any) -> Configuration:
        """This configuration with these engine arguments replaced."""
        return replace(self, args=replace(self.args, **changes))

    @property
    def num_gpus(self) -> int:
        return int(self.value("tensor_parallel_size")) * int(self.value("pipeline_parallel_size"))

    @property
    def utilization(self) -> float:
        """The gpu_memory_utilization this configuration is planned at: the one given, else the
        release's default for its sizing path (0.34.0: 1.0 on the measured path, 0.92 on the
        estimate; docs/vllm/changes-0.34.md §1.2), as `PlanRequest` resolves it."""
        return self.plan_request().utilization

    def plan_request(self) -> PlanRequest:
        """The request `plan` sizes: these engine arguments (the plan takes the release's defaults
        where they are unset, `PlanRequest.value`) for this model on this GPU."""
        return PlanRequest(args=replace(self.args, model=self.model), release=self.release, gpu=self.gpu)

    def with_workload_settings(self, workload: Workload) -> Configuration:
        """The workload's engine settings where this configuration leaves them unset, so that the
        plan sizes the engine the workload runs on."""
        engine = workload.engine
        from_workload = EngineArgs(**{name: getattr(engine.args, name) for name in WORKLOAD_ARGS})
        return replace(self, args=self.args.over(from_workload),
                       scheduling=engine.scheduling if self.scheduling is None else self.scheduling)

    def settled(self, plan: PlanSummary) -> Configuration:
        """This configuration with the lengths and batch limits vLLM settled on written out, so that
        its command line does not depend on defaults."""
        return self.with_args(max_model_len=plan.max_model_len, max_num_seqs=plan.max_num_seqs,
                              max_num_batched_tokens=plan.max_num_batched_tokens)

    def vllm_serve_args(self) -> str:
        """The `vllm serve` command line of this configuration, with the flags `EngineArgs` declares
        (kvplan's flags are spelled the same, so `kvplan simulate W.json --gpu GPU` takes the flags
        after the model as they are)."""
        args = ["vllm", "serve", self.model]
        for name in SERVE_CHOICES:
            value = getattr(self.args, name)
            if value is not None and value != setting(name).default(self.release):
                args += [setting(name).flag, str(value)]
        if self.args.kv_cache_memory_bytes is not None:
            args += [setting("kv_cache_memory_bytes").flag, str(self.args.kv_cache_memory_bytes)]
        elif self.args.gpu_memory_utilization is not None or self.release.measured_utilization is None:
            args += [setting("gpu_memory_utilization").flag, f"{self.utilization:g}"]
        # else vLLM resolves an unset value itself (0.34.0: 1.0 with the extensible KV cache,
        # 0.92 without, docs/vllm/changes-0.34.md §1.2), which an explicit value would only cap
        for name in SERVE_VALUES:
            if (value := getattr(self.args, name)) is not None:
                args += [setting(name).flag, str(value)]
        for name in SERVE_SWITCHES:
            if (on := getattr(self.args, name)) is not None:
                on_flag, off_flag = setting(name).flags[0].split("/")
                args.append(on_flag if on else off_flag)
        if self.scheduling == "sync":
            args.append("--no-async-scheduling")
        if self.args.trust_remote_code:
            args.append(setting("trust_remote_code").flag)
        return shlex.join(args)

    def overrides(self, kv_cache_memory_bytes: int | None = None) -> EngineOverrides:
        """The engine of `simulate` for this configuration; `kv_cache_memory_bytes` (what a plan
        found) replaces the utilization, which would otherwise need a profile run again."""
        kv_bytes = self.args.kv_cache_memory_bytes if kv_cache_memory_bytes is None else kv_cache_memory_bytes
        args = replace(self.args, kv_cache_memory_bytes=kv_bytes,
                       gpu_memory_utilization=None if kv_bytes is not None else self.args.gpu_memory_utilization)
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
