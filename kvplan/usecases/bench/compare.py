"""`kvplan bench compare PREDICTED MEASURED`: two `vllm bench serve` result documents, metric by metric.

Either may be kvplan's prediction (`kvplan bench serve --save-result`) or a real result file of
`vllm bench serve --save-result`; the metrics compared are those both hold with a number:
throughputs, the duration, and every mean, median, standard deviation and percentile of TTFT,
TPOT, ITL and E2EL. The error is relative to the measurement: (predicted - measured) / measured.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kvplan.errors import KvplanError
from kvplan.files import parse_json, read_input_text

THROUGHPUTS = ("request_throughput", "output_throughput", "total_token_throughput", "duration",
               "max_output_tokens_per_s")
_LATENCY = re.compile(r"^(mean|median|std|p\d+(?:\.\d+)?)_(ttft|tpot|itl|e2el)_ms$")
_ORDER = {"ttft": 0, "tpot": 1, "itl": 2, "e2el": 3}
_STAT = {"mean": 0, "median": 1, "std": 3}


@dataclass(frozen=True)
class MetricComparison:
    metric: str
    predicted: float
    measured: float

    @property
    def relative_error(self) -> float | None:
        return None if self.measured == 0 else (self.predicted - self.measured) / self.measured


@dataclass(frozen=True)
class Comparison:
    predicted_source: str
    measured_source: str
    rows: tuple[MetricComparison, ...]
    predicted_is_prediction: bool
    measured_is_prediction: bool


def load_result(path: Path) -> dict[str, Any]:
    """A result document of `vllm bench serve --save-result` (or kvplan's): one JSON object."""
    document = parse_json(read_input_text(path, path.name), path.name)
    if isinstance(document, list) and document and all(isinstance(d, dict) for d in document):
        document = document[-1]     # `--append-result` files hold several; the last is the newest
    if not isinstance(document, dict):
        raise KvplanError(f"{path.name}: expected a vllm bench serve result (a JSON object)")
    if not any(key in document for key in THROUGHPUTS) and not any(_LATENCY.match(key) for key in document):
        raise KvplanError(f"{path.name}: no vllm bench serve metric in it (request_throughput, mean_ttft_ms, ...)")
    return document


def compare(predicted: dict[str, Any], measured: dict[str, Any], predicted_source: str = "predicted",
            measured_source: str = "measured") -> Comparison:
    rows = []
    for key in sorted((k for k in predicted if k in measured and _comparable(k)), key=_sort_key):
        p, m = predicted[key], measured[key]
        if _number(p) and _number(m):
            rows.append(MetricComparison(key, float(p), float(m)))
    if not rows:
        raise KvplanError(f"{predicted_source} and {measured_source} share no metric with a number: compare two "
                          "vllm bench serve results")
    return Comparison(predicted_source, measured_source, tuple(rows), bool(predicted.get("prediction")),
                      bool(measured.get("prediction")))


def _comparable(key: str) -> bool:
    return key in THROUGHPUTS or _LATENCY.match(key) is not None


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _sort_key(key: str) -> tuple[int, int, float, str]:
    if key in THROUGHPUTS:
        return (0, THROUGHPUTS.index(key), 0.0, key)
    match = _LATENCY.match(key)
    assert match is not None
    stat, metric = match.groups()
    rank = float(stat[1:]) if stat.startswith("p") else -10.0 + _STAT[stat]
    return (1 + _ORDER[metric], 0, rank, key)
