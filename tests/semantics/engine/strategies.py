"""Hypothesis strategies shared by the engine's property tests."""

from __future__ import annotations

from typing import Any, get_args

from hypothesis import strategies as st

from kvplan.semantics.engine.trace import TraceRequest
from kvplan.semantics.releases import RELEASES, Scheduling


@st.composite
def trace_requests(draw: st.DrawFn, max_model_len: int, max_requests: int) -> tuple[TraceRequest, ...]:
    """1 to `max_requests` requests sharing some of three prefixes, arriving over steps 0-8."""
    requests = []
    for ordinal in range(draw(st.integers(1, max_requests))):
        prefix_len = draw(st.integers(0, max_model_len - 1))
        unique_len = draw(st.integers(0 if prefix_len else 1, max_model_len - 1 - prefix_len))
        requests.append(TraceRequest(
            f"q{ordinal}", ordinal, draw(st.integers(0, 8)), draw(st.integers(1, 30)),
            prefix_id=draw(st.integers(0, 2)), prefix_len=prefix_len, unique_len=unique_len,
        ))
    return tuple(requests)


@st.composite
def engine_knobs(draw: st.DrawFn, max_num_gpu_blocks: int) -> dict[str, Any]:
    """EngineConfig keywords (without groups) that vLLM accepts: small pools, small models, any
    release and scheduling mode."""
    max_model_len = draw(st.integers(8, 160))
    chunked = draw(st.booleans())
    max_num_seqs = draw(st.integers(1, 6))
    lowest_budget = max(max_num_seqs, 1 if chunked else max_model_len)
    return {
        "num_gpu_blocks": draw(st.integers(2, max_num_gpu_blocks)),
        "block_size": draw(st.sampled_from([1, 2, 4, 16])),
        "enable_prefix_caching": draw(st.booleans()),
        "max_num_batched_tokens": draw(st.integers(lowest_budget, lowest_budget + 150)),
        "max_num_seqs": max_num_seqs,
        "max_model_len": max_model_len,
        "enable_chunked_prefill": chunked,
        "release": draw(st.sampled_from(list(RELEASES.values()))),
        "scheduling": draw(st.sampled_from(get_args(Scheduling))),
    }
