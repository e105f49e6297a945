"""What `kvplan fit` answers, as frozen data: the configurations that meet the target, best first,
and one line per family (GPU, TP, PP, KV dtype) that none of its configurations could serve.

Memory figures (blocks, KV tokens, concurrency) are exact for the release; rates and latencies
come from the step-time model and are estimates."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from kvplan.usecases.configuration import Configuration
from kvplan.usecases.fit.request import FitRequest

# "failed": kvplan itself failed on the configuration (an internal error, not an answer about it)
PointStatus = Literal["fits", "does_not_fit", "refused", "short_of_concurrency", "failed"]
RejectReason = Literal["does_not_fit", "refused", "short_of_concurrency", "slo_missed", "failed"]


@dataclass(frozen=True)
class PlannedPoint:
    """One configuration after planning. `inferred`: decided from a neighbour's plan (more KV
    memory never makes a fitting configuration stop fitting), without a plan of its own."""

    configuration: Configuration           # the lengths and batch limits vLLM settled on, written out
    status: PointStatus
    inferred: bool = False
    reason: str | None = None
    kv_cache_memory_bytes: int | None = None     # per GPU
    memory_source: str | None = None
    num_gpu_blocks: int | None = None
    kv_cache_tokens: int | None = None           # vLLM's "GPU KV cache size", per GPU
    max_concurrency: float | None = None         # vLLM's figure, at max_model_len
    concurrency_at_target: float | None = None   # at --concurrency's tokens per request
    weights_per_gpu_bytes: int | None = None
    weights_warning: str | None = None           # the plan's, when it could not count the model's weights

    @property
    def meets_memory(self) -> bool:
        return self.status == "fits"


@dataclass(frozen=True)
class RateCheck:
    """The simulations of one configuration: the objectives at the workload's rate, then the
    highest rate at which they still hold and queueing stays bounded (estimates)."""

    rate: float                                   # requests/s offered
    meets: bool
    figures: tuple[tuple[str, float | None], ...]  # each objective's value at `rate`
    missed: tuple[str, ...]                       # what failed at `rate`, in words
    ttft_p95_s: float | None
    tpot_p95_s: float | None
    preemptions: int
    sustained: bool
    stalled: bool
    num_requests: int
    num_finished: int
    max_sustained_rate: float | None              # None: not even the lowest rate tried holds
    max_rate_bounded: bool                        # False: every higher rate tried held too (a lower bound)
    lowest_rate_tried: float
    runs: int
    step_time_method: str | None = None           # how the simulations priced each step (docs/accuracy.md)


@dataclass(frozen=True)
class FitConfiguration:
    point: PlannedPoint
    check: RateCheck | None                       # None without a workload (a concurrency goal alone)
    cost_per_hour: float | None                   # num_gpus x your price per GPU-hour
    gpu_hours_per_million_requests: float | None  # at the highest sustained rate
    cost_per_million_requests: float | None
    pareto: bool                                  # no other is both cheaper per hour and faster
    # copies of the configuration that carry the asked rate between them (data-parallel replicas,
    # each at rate / replicas, at most its highest sustained rate); 1 without a workload
    replicas: int = 1

    @property
    def configuration(self) -> Configuration:
        return self.point.configuration

    @property
    def gpus_at_rate(self) -> int:
        """GPUs that serve the asked rate: every replica's."""
        return self.replicas * self.configuration.num_gpus

    @property
    def cost_per_hour_at_rate(self) -> float | None:
        """What serving the asked rate costs per hour at your prices (None without them)."""
        return None if self.cost_per_hour is None else self.cost_per_hour * self.replicas


@dataclass(frozen=True)
class RejectedFamily:
    gpu: str
    tensor_parallel_size: int
    pipeline_parallel_size: int
    kv_cache_dtype: str
    reason: RejectReason
    detail: str
    closest: PlannedPoint                          # the configuration of the family that came closest
    check: RateCheck | None
    cost_per_hour: float | None

    @property
    def num_gpus(self) -> int:
        return self.tensor_parallel_size * self.pipeline_parallel_size


@dataclass(frozen=True)
class FitCounts:
    configurations: int        # in the search space
    planned: int               # plans made
    inferred: int              # decided without a plan of their own (monotone in KV memory)
    skipped_lengths: int       # not needed: a longer max_model_len of the same configuration fits
    profile_runs: int          # fake-backend profile runs behind the plans
    simulated: int             # configurations simulated
    simulation_runs: int       # runs of the workload, over every rate tried


@dataclass(frozen=True)
class FitResult:
    request: FitRequest
    configurations: tuple[FitConfiguration, ...]   # best first
    rejected: tuple[RejectedFamily, ...]           # cheapest first
    counts: FitCounts
    ranked_by: str
    executor: str
    workers: int
    notes: tuple[str, ...]
    weights_warnings: tuple[str, ...] = ()         # the plans' that could not count the model's weights, once each

    @property
    def found(self) -> bool:
        return bool(self.configurations)

    @property
    def estimate_methods(self) -> tuple[str, ...]:
        """How the latencies and rates of the answer were priced: each step-time method once."""
        checks = [c.check for c in self.configurations] + [f.check for f in self.rejected]
        return tuple(dict.fromkeys(c.step_time_method for c in checks if c is not None and c.step_time_method))
