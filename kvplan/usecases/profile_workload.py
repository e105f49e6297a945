"""`kvplan profile --workload`: the workload's simulation run on the pool the profile really
allocated, with K/V written and read back at every step (`kvplan.measure.pool_writer`).

    require_real_pool(backend, allocate)                      (before profiling: exit 2 otherwise)
    profile_engine(result) -> ResolvedEngine                   (the profile's pool as the engine)
    run_workload_check(result, workload, verify_every=..., progress=None) -> WorkloadCheck"""

from __future__ import annotations

from dataclasses import dataclass

from kvplan.errors import KvplanError
from kvplan.measure.pool_writer import Mismatch, PoolWriter
from kvplan.semantics.engine.config import EngineConfig
from kvplan.usecases.profile import ProfileResult
from kvplan.usecases.simulate.driver import PreparedWorkload, Progress, SimOptions, prepare, run
from kvplan.usecases.simulate.engine_source import ResolvedEngine, pool_from_plan
from kvplan.usecases.simulate.metrics import RunMetrics
from kvplan.usecases.simulate.workload import Workload

DEFAULT_VERIFY_EVERY = 32  # steps between two read-backs of every running request
REFUSE_FAKE = (
    "--workload writes K/V into the really allocated KV cache, which the fake backend only builds on the meta "
    "device: use --backend cpu with a --gpu-memory small enough for RAM (e.g. 4GiB), or run on a GPU"
)


def require_real_pool(backend: str, allocate: bool) -> None:
    """Refuse, before any profiling, a run that would have no real pool to write into."""
    if backend == "fake":
        raise KvplanError(REFUSE_FAKE)
    if not allocate:
        raise KvplanError("--workload runs on the allocated KV cache: drop --no-allocate")


@dataclass(frozen=True)
class WorkloadCheck:
    workload: str
    attention_backend: str
    prepared: PreparedWorkload          # the simulation: the profile's pool as its engine
    tensors_written: int
    layers_verified: tuple[str, ...]
    verify_every: int
    steps: int
    tokens_written: int
    request_verifications: int
    tokens_verified: int
    prefix_hit_tokens_verified: int
    mismatched_tokens: int
    first_mismatch: Mismatch | None
    metrics: RunMetrics
    num_rejected: int
    num_conversations_cut: int
    notes: tuple[str, ...]

    @property
    def passed(self) -> bool:
        return self.mismatched_tokens == 0 and self.tokens_verified > 0

    @property
    def finding(self) -> str | None:
        if self.mismatched_tokens:
            where = self.first_mismatch
            first = "" if where is None else (
                f" (first at step {where.step}: request {where.request_id}, position {where.position}, "
                f"block {where.block_id}, {where.layer})")
            return (f"the workload check read back {self.mismatched_tokens:,} of {self.tokens_verified:,} tokens "
                    f"with K/V that differ from what was written{first}")
        if not self.tokens_verified and not self.metrics.stalled:   # a stall is its own verdict (exit 3)
            return "the workload check verified no token: no request of the workload was scheduled"
        return None


def profile_engine(result: ProfileResult) -> ResolvedEngine:
    """The engine the workload runs on: the pool the profile allocated and the profile's settings."""
    allocation = result.allocation
    if result.plan is None or allocation is None or allocation.pool is None:
        raise KvplanError(REFUSE_FAKE if result.backend == "fake" else
                          "--workload needs the allocated KV cache, and this profile allocated none")
    plan = result.plan.summary
    pool = pool_from_plan(plan, "plan")
    num_blocks = allocation.pool.config.num_blocks
    config = EngineConfig(num_gpu_blocks=num_blocks, enable_chunked_prefill=plan.enable_chunked_prefill,
                          release=result.options.plan.release, kv_cache_groups=pool.engine_groups(), **pool.settings)
    groups = f" shared by {len(pool.kv_cache_groups)} KV cache groups" if len(pool.kv_cache_groups) > 1 else ""
    note = (f"the workload's engine section is replaced by the profile's pool: {num_blocks:,} blocks of "
            f"{config.block_size} tokens (null block included){groups}, max_model_len {config.max_model_len:,}, "
            f"{config.max_num_batched_tokens:,} tokens and {config.max_num_seqs} requests per step, prefix caching "
            f"{'on' if config.enable_prefix_caching else 'off'}")
    return ResolvedEngine(config, "profile", pool.facts, (note,), planned_groups=pool.kv_cache_groups,
                          planned_tokens=pool.gpu_kv_cache_tokens)


def run_workload_check(result: ProfileResult, workload: Workload, *, verify_every: int = DEFAULT_VERIFY_EVERY,
                       progress: Progress | None = None) -> WorkloadCheck:
    """Simulate `workload` on the profile's allocated pool, writing and checking K/V at every step."""
    engine = profile_engine(result)
    allocation = result.allocation
    assert allocation is not None and allocation.pool is not None
    setup = prepare(workload, SimOptions(engine=engine, release=engine.config.release))
    writer = PoolWriter(allocation.pool, setup.config, verify_every)
    outcome = run(setup, progress=progress, model_runner=writer)
    return WorkloadCheck(
        workload=workload.name, attention_backend=allocation.attention_backend, prepared=setup,
        tensors_written=writer.num_tensors, layers_verified=writer.layers_verified,
        verify_every=verify_every, steps=writer.steps, tokens_written=writer.tokens_written,
        request_verifications=writer.request_verifications, tokens_verified=writer.tokens_verified,
        prefix_hit_tokens_verified=writer.prefix_hit_tokens_verified, mismatched_tokens=writer.mismatched_tokens,
        first_mismatch=writer.first_mismatch, metrics=outcome.metrics, num_rejected=outcome.num_rejected,
        num_conversations_cut=outcome.num_conversations_cut, notes=setup.notes,
    )
