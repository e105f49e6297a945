"""The table `kvplan explain` prints: each term of the start-up as logged, as kvplan predicts it, the
difference, and a one-line reading of each difference beyond the tolerance.

The tolerance is issue 22's (and `profile`'s against real start-ups, docs/accuracy.md): max(150 MiB,
1% of the logged figure) for memory; for the pool's token and concurrency figures 1%, and at least
what the logged memory's rounding (+-0.005 GiB) moves them by.

    term_rows(log, context) -> (TermRow, ...)"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from kvplan.semantics.memory.budget import MemoryBudget, peak_activation_bytes
from kvplan.semantics.memory.measured import MeasuredSizing
from kvplan.units import format_gib
from kvplan.usecases.explain.log_reader import StartupLog
from kvplan.usecases.plan import PlanResult

Unit = Literal["bytes", "tokens", "x"]
MIN_TOLERANCE_BYTES = 150 << 20
RELATIVE_TOLERANCE = 0.01


@dataclass(frozen=True)
class Predicted:
    """What kvplan predicts for the logged start-up: the profile run's budget (None without torch,
    or when the model cannot be built) and the plan at the predicted memory; and the plan of the
    logged KV memory (the sizing alone)."""

    budget: MemoryBudget | None
    plan: PlanResult | None
    sized: PlanResult | None
    tensor_parallel_size: int = 1
    why_not: str | None = None          # why the memory terms are not predicted
    # the sizing of the logged memory -+0.005 GiB (the rounding of the logged figure)
    sized_range: tuple[PlanResult, PlanResult] | None = None


@dataclass(frozen=True)
class TermRow:
    key: str
    label: str
    unit: Unit
    logged: int | float | None
    predicted: int | float | None
    line: int | None                    # the log line of the logged figure
    tolerance: int | float | None = None
    reading: str | None = None          # why the difference exceeds the tolerance
    note: str | None = None             # what the predicted figure is, where it is not obvious

    @property
    def difference(self) -> int | float | None:
        if self.logged is None or self.predicted is None:
            return None
        return self.predicted - self.logged

    @property
    def within(self) -> bool | None:
        if self.difference is None or self.tolerance is None:
            return None
        return abs(self.difference) <= self.tolerance


def memory_tolerance(logged: int | float) -> int:
    return max(MIN_TOLERANCE_BYTES, int(abs(logged) * RELATIVE_TOLERANCE))


def _gib(value: int | float) -> str:
    return f"{format_gib(abs(value))} GiB"


def _above(row: TermRow) -> bool:
    return (row.difference or 0) < 0   # predicted below logged: the logged term is above the prediction


# key -> the reading of a difference beyond the tolerance (the row, the predictions)
def _reading_weights(row: TermRow, predicted: Predicted) -> str:
    if _above(row):
        return (f"vLLM loaded {_gib(row.difference or 0)} more than kvplan counts: its own model code (fused or "
                "padded layers, extra buffers), or an unquantized load of a checkpoint kvplan counts quantized")
    return (f"vLLM loaded {_gib(row.difference or 0)} less than kvplan counts: a quantized checkpoint or "
            "--quantization, or weights offloaded to the CPU")


def _reading_peak(row: TermRow, predicted: Predicted) -> str:
    budget = predicted.budget
    graphs = "" if budget is None or not budget.release.cuda_graphs_in_budget else (
        "; this release logs the transient peak plus its CUDA-graph estimate, whose split the log does not give")
    if _above(row):
        return (f"peak activation {_gib(row.difference or 0)} above prediction: vLLM's kernels' workspaces "
                f"(MoE, attention, sampler) that the Hugging Face forward kvplan runs does not allocate{graphs}")
    return (f"peak activation {_gib(row.difference or 0)} below prediction: vLLM's fused kernels keep fewer "
            f"intermediates than the Hugging Face forward kvplan runs{graphs}")


def _reading_non_torch(row: TermRow, predicted: Predicted) -> str:
    if _above(row):
        tp = "NCCL buffers under TP (this start-up runs TP " + str(predicted.tensor_parallel_size) + "), " \
            if predicted.tensor_parallel_size > 1 else ""
        return (f"non-torch memory {_gib(row.difference or 0)} above prediction: {tp}another process allocating "
                "GPU memory during start-up, or cuBLAS and attention-backend workspaces kvplan's catalog has no "
                "figure for")
    return (f"non-torch memory {_gib(row.difference or 0)} below prediction: kvplan's catalog figure is high for "
            "this GPU")


def _reading_consumed(row: TermRow, predicted: Predicted) -> str:
    if _above(row):
        tp = "NCCL buffers under TP, " if predicted.tensor_parallel_size > 1 else ""
        return (f"consumed memory {_gib(row.difference or 0)} above prediction: non-torch memory ({tp}another "
                "process, cuBLAS workspaces), torch's cached blocks, or runner state this release keeps on the GPU")
    return (f"consumed memory {_gib(row.difference or 0)} below prediction: weights or runner state kvplan "
            "counts that vLLM kept elsewhere (host memory, a quantized load)")


def _reading_non_kv(row: TermRow, predicted: Predicted) -> str:
    side = "above" if _above(row) else "below"
    return f"non-KV memory {_gib(row.difference or 0)} {side} prediction: the sum of the terms above"


def _reading_graphs(row: TermRow, predicted: Predicted) -> str:
    if _above(row):
        return (f"the CUDA-graph pool {_gib(row.difference or 0)} above kvplan's estimate: vLLM's estimator charges "
                "captures more than the pool they share (vllm#50780, #53013)")
    return f"the CUDA-graph pool {_gib(row.difference or 0)} below kvplan's estimate: the graphs reuse more memory"


def _reading_available(row: TermRow, predicted: Predicted) -> str:
    more = "more" if _above(row) else "less"
    return (f"vLLM had {_gib(row.difference or 0)} {more} for the KV cache than predicted: the differences of "
            "the terms above")


def _reading_free(row: TermRow, predicted: Predicted) -> str:
    return (f"{_gib(row.difference or 0)} of the GPU was in use before vLLM started: this process's CUDA context "
            "(about 0.5 GiB) and any other process; kvplan predicts for an idle GPU")


def _reading_after_warmup(row: TermRow, predicted: Predicted) -> str:
    if _above(row):
        return (f"{_gib(row.difference or 0)} more free after warmup and capture than predicted: a smaller "
                "CUDA-graph pool or runner state than kvplan counts")
    return (f"{_gib(row.difference or 0)} less free after warmup and capture than predicted: the captured "
            "CUDA-graph pool, torch's cached blocks or another process hold more than kvplan counts")


def _reading_transient(row: TermRow, predicted: Predicted) -> str:
    side = "above" if _above(row) else "below"
    return (f"the sizing step's transient {_gib(row.difference or 0)} {side} prediction: vLLM's kernels' "
            "workspaces and torch's reservation growth, which kvplan takes as the profile run's peak")


def _reading_measured(row: TermRow, predicted: Predicted) -> str:
    more = "more" if _above(row) else "less"
    return (f"vLLM measured {_gib(row.difference or 0)} {more} for the KV cache than predicted: the differences "
            "of the after-warmup terms above (avail = min(R - U, F + C - margin) - max(P, G))")


def _reading_tokens(row: TermRow, predicted: Predicted) -> str:
    return "follows the KV memory's difference" if row.key in ("kv_cache_tokens", "max_concurrency") else (
        "kvplan's sizing of the logged memory differs from vLLM's: another block size, KV dtype or layout than "
        "the settings assumed")


_READINGS: dict[str, Callable[[TermRow, Predicted], str]] = {
    "free_at_start": _reading_free,
    "weights": _reading_weights,
    "peak_activation": _reading_peak,
    "torch_peak": _reading_peak,
    "non_torch": _reading_non_torch,
    "consumed": _reading_consumed,
    "non_kv": _reading_non_kv,
    "graph_estimate": _reading_graphs,
    "graph_pool": _reading_graphs,
    "available_kv": _reading_available,
    "free_after_warmup": _reading_after_warmup,
    "warmup_peak": _reading_transient,
    "reserve_growth": _reading_transient,
    "kept_for_activations": _reading_transient,
    "measured_kv": _reading_measured,
    "extended_kv": _reading_measured,
    "kv_cache_tokens": _reading_tokens,
    "max_concurrency": _reading_tokens,
    "kv_cache_tokens_sized": _reading_tokens,
    "max_concurrency_sized": _reading_tokens,
}


def _budget_term(getter: Callable[[MemoryBudget], int | None]) -> Callable[[Predicted], int | None]:
    return lambda predicted: None if predicted.budget is None else getter(predicted.budget)


def _measured_term(getter: Callable[[MeasuredSizing], int]) -> Callable[[Predicted], int | None]:
    """A term of 0.34.0's measured path as predicted (`usecases/measured_sizing.py`); None where the
    prediction took the estimate path (another release, or a flag that turns the extensible cache off)."""
    def term(predicted: Predicted) -> int | None:
        measured = None if predicted.plan is None else predicted.plan.measured
        return None if measured is None else getter(measured)
    return term


def _graph_estimate(budget: MemoryBudget) -> int | None:
    return budget.cuda_graph_bytes if budget.release.cuda_graphs_in_budget else None


# (key, label, the predicted figure); the logged figure is the log's figure of the same key
_MEMORY_ROWS: tuple[tuple[str, str, Callable[[Predicted], int | None]], ...] = (
    ("free_at_start", "free at start-up", _budget_term(lambda budget: budget.free_at_start_bytes)),
    ("requested", "requested (total x utilization)", _budget_term(lambda budget: budget.requested_bytes)),
    ("weights", "model loading (weights)", _budget_term(lambda budget: budget.weights_bytes)),
    ("consumed", "consumed (weights + non-torch)", _budget_term(lambda budget: budget.total_consumed_bytes)),
    ("torch_peak", "torch peak increase", _budget_term(lambda budget: budget.activation_peak_bytes)),
    ("peak_activation", "peak activation", _budget_term(peak_activation_bytes)),
    ("non_torch", "non-torch memory", _budget_term(lambda budget: budget.non_torch_bytes)),
    ("graph_estimate", "CUDA-graph estimate", _budget_term(_graph_estimate)),
    ("graph_pool", "CUDA-graph pool (captured)", _budget_term(_graph_estimate)),
    ("non_kv", "non-KV memory", _budget_term(lambda budget: budget.non_kv_bytes)),
    ("available_kv", "available KV cache memory", _budget_term(lambda budget: budget.available_kv_bytes)),
    # 0.34.0's extensible KV cache: "Memory after warmup" and "Extended KV cache" (docs/vllm/changes-0.34.md
    # section 1.4), predicted term by term on the measured path
    ("free_after_warmup", "free after warmup and capture (F)", _measured_term(lambda m: m.terms.free_bytes)),
    ("committed_kv", "committed to the KV cache at warmup (C)", _measured_term(lambda m: m.terms.committed_bytes)),
    ("warmup_peak", "transient peak of the sizing step (P)", _measured_term(lambda m: m.terms.transient_peak_bytes)),
    ("reserve_growth", "torch reservation growth (G)",
     _measured_term(lambda m: m.terms.torch_reserve_growth_bytes)),
    ("kept_for_activations", "kept for transient activations, max(P, G)",
     _measured_term(lambda m: m.terms.kept_bytes)),
    ("measured_kv", "KV cache measured after warmup",
     _measured_term(lambda m: m.num_blocks * m.segments.bytes_per_block)),
    ("extended_kv", "KV cache committed (Extended KV cache)", _measured_term(lambda m: m.footprint_bytes)),
)
_MEASURED_KEYS = ("free_after_warmup", "committed_kv", "warmup_peak", "reserve_growth", "kept_for_activations",
                  "measured_kv", "extended_kv")


def term_rows(log: StartupLog, predicted: Predicted) -> tuple[TermRow, ...]:
    """A row for every term the log states (and the available KV memory always)."""
    rows = []
    for key, label, predict in _MEMORY_ROWS:
        found = log.figures.get(key)
        if found is None and key != "available_kv":
            continue
        logged = None if found is None else found.value
        note = None
        if key == "graph_pool":
            note = "predicted: kvplan's estimate of the pool" if predicted.budget is not None and \
                predicted.budget.release.cuda_graphs_in_budget else None
        value = predict(predicted)
        if value is None and key in _MEASURED_KEYS and predicted.plan is not None:
            note = ("not predicted: the prediction took the estimate path (the settings turn the extensible KV "
                    "cache off, or the release has none)")
        if value is None and key in ("graph_estimate", "graph_pool") and predicted.budget is not None:
            note = (f"not predicted: vLLM {predicted.budget.release.version}'s rules take no CUDA-graph estimate "
                    "from the KV budget")
        row = TermRow(key, label, "bytes", logged, value, None if found is None else found.line,
                      None if logged is None else memory_tolerance(logged), note=note)
        rows.append(_read(row, predicted))
    rows.extend(_pool_rows(log, predicted))
    return tuple(rows)


def _rounding(predicted: Predicted) -> tuple[int, float]:
    """How far the pool's figures move within the rounding of the logged KV memory."""
    if predicted.sized is None or predicted.sized_range is None:
        return 0, 0.0
    middle = predicted.sized.summary
    tokens = [result.summary.gpu_kv_cache_tokens or 0 for result in predicted.sized_range]
    concurrency = [result.summary.max_concurrency or 0.0 for result in predicted.sized_range]
    return (max(abs(value - (middle.gpu_kv_cache_tokens or 0)) for value in tokens),
            max(abs(value - (middle.max_concurrency or 0.0)) for value in concurrency))


def _pool_rows(log: StartupLog, predicted: Predicted) -> list[TermRow]:
    tokens, concurrency = log.figures.get("kv_cache_tokens"), log.figures.get("max_concurrency")
    rounding_tokens, rounding_concurrency = _rounding(predicted)
    rows: list[TermRow] = []
    sized_label = " (sizing of the logged memory)"
    for suffix, plan, label in (("", predicted.plan, ""), ("_sized", predicted.sized, sized_label)):
        summary = None if plan is None else plan.summary
        relative = 0.0 if suffix else RELATIVE_TOLERANCE
        if tokens is not None or suffix == "":
            logged_tokens = None if tokens is None else tokens.value
            rows.append(_read(TermRow(
                "kv_cache_tokens" + suffix, "GPU KV cache size" + label, "tokens", logged_tokens,
                None if summary is None else summary.gpu_kv_cache_tokens, None if tokens is None else tokens.line,
                None if logged_tokens is None else max(int(logged_tokens * relative), rounding_tokens)), predicted))
        if concurrency is not None:
            length = log.figure("concurrency_length") or 1
            rows.append(_read(TermRow(
                "max_concurrency" + suffix, f"maximum concurrency for {length:,} tokens{label}", "x",
                concurrency.value, None if summary is None or summary.max_concurrency is None
                else round(summary.max_concurrency, 2), concurrency.line,
                round(max(concurrency.value * relative, rounding_concurrency) + 0.01, 3)), predicted))
    return rows


def _read(row: TermRow, predicted: Predicted) -> TermRow:
    if row.within is False and row.key in _READINGS:
        return TermRow(row.key, row.label, row.unit, row.logged, row.predicted, row.line, row.tolerance,
                       _READINGS[row.key](row, predicted), row.note)
    return row
