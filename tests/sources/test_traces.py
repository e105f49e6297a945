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
