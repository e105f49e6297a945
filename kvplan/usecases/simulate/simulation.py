"""`kvplan simulate`: a prepared workload run once, then the capacity questions answered."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from kvplan.usecases.simulate.capacity_search import Capacity, answer_capacity
from kvplan.usecases.simulate.driver import PreparedWorkload, Progress, run
from kvplan.usecases.simulate.metrics import RunMetrics, StepListener


@dataclass(frozen=True)
class SimResult:
    setup: PreparedWorkload
    metrics: RunMetrics
    capacity: Capacity
    notes: tuple[str, ...]

    @property
    def stalled(self) -> bool:
        return self.metrics.stalled


def simulate(setup: PreparedWorkload, *, find_max_rate: bool = False, progress: Progress | None = None,
             on_step: StepListener | None = None, stage: Callable[[str], None] | None = None) -> SimResult:
    """Run a prepared workload, then answer the capacity questions; ``on_step`` hears every step of
    the run, ``stage`` what runs next."""
    outcome = run(setup, progress=progress, on_step=on_step)
    notes = list(setup.notes)
    if outcome.num_rejected:
        notes.append(f"{outcome.num_rejected} requests were rejected: their prompt is not shorter than "
                     f"max_model_len ({setup.config.max_model_len}), as vLLM would refuse them")
    if outcome.num_conversations_cut:
        notes.append(f"{outcome.num_conversations_cut} conversations ended early: their next turn would not fit "
                     f"in max_model_len ({setup.config.max_model_len})")
    capacity = answer_capacity(setup, outcome, find_max_rate=find_max_rate, stage=stage)
    return SimResult(setup, outcome.metrics, capacity, tuple(notes))
