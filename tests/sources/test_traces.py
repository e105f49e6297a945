"""A trace file: what cannot be read is one clear KvplanError; what can is parsed by the semantics."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvplan.errors import KvplanError
from kvplan.sources.traces import load_trace

TRACE = {"config": {"num_gpu_blocks": 14, "max_num_batched_tokens": 64, "max_num_seqs": 4, "max_model_len": 512},
         "requests": [{"request_id": "r0", "prefix_len": 16, "unique_len": 8, "max_tokens": 4}]}


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(KvplanError, match=r"missing\.json: file not found"):
        load_trace(tmp_path / "missing.json")
    broken = tmp_path / "broken.json"
    broken.write_text('{"config": {"num_gpu_blocks": 4},')
    with pytest.raises(KvplanError, match=r"not valid JSON \(line 1"):
        load_trace(broken)
    good = tmp_path / "good.json"
    good.write_text(json.dumps(TRACE))
    assert load_trace(good).requests[0].request_id == "r0"


def test_a_trace_naming_no_release_follows_the_default_rule(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from kvplan.semantics.releases import VLLM_0_17_1, VLLM_0_33_0, VLLM_0_34_0
    from kvplan.sources import traces

    monkeypatch.setattr(traces, "default_release", lambda: VLLM_0_17_1)   # as if vllm 0.17.1 were installed
    plain, named = tmp_path / "plain.json", tmp_path / "named.json"
    plain.write_text(json.dumps(TRACE))
    named.write_text(json.dumps({**TRACE, "config": {**TRACE["config"], "vllm_version": "0.33.0"}}))
    assert load_trace(plain).config.release is VLLM_0_17_1
    assert load_trace(named).config.release is VLLM_0_33_0                               # the file's
    assert load_trace(named, {"vllm_version": "0.34.0"}).config.release is VLLM_0_34_0  # the command line's
    assert load_trace(named, {"vllm_version": None}).config.release is VLLM_0_33_0
