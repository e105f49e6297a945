"""Trace validation: every mistake is one clear KvplanError (the CLI turns it into exit code 2)."""

from __future__ import annotations

from typing import Any

import pytest

from kvplan.errors import KvplanError
from kvplan.semantics.engine.trace import OUTPUT_TOKEN_BASE, parse_trace
from kvplan.semantics.releases import NEWEST_RELEASE, VLLM_0_17_1, VLLM_0_33_0

CONFIG = {"num_gpu_blocks": 14, "max_num_batched_tokens": 64, "max_num_seqs": 4, "max_model_len": 512}


def doc(*requests: dict[str, Any], **config: Any) -> dict[str, Any]:
    return {"config": {**CONFIG, **config}, "requests": list(requests)}


def req(request_id: str = "r0", **fields: Any) -> dict[str, Any]:
    return {"request_id": request_id, "arrival_step": 0, "prefix_len": 16, "unique_len": 8,
            "max_tokens": 4, **fields}


def test_defaults_and_token_id_rules() -> None:
    trace = parse_trace({"config": {"num_gpu_blocks": 100}, "requests": [
        {"request_id": "a", "prefix_id": 2, "prefix_len": 2, "unique_len": 2, "max_tokens": 3},
        {"request_id": "b", "prompt_token_ids": [7, 8], "max_tokens": 2,
         "output_token_ids": [5, 6, 9]},
    ]})
    config = trace.config
    # the block size is the release's default (16 until 0.33.0, 64 in 0.34.0: docs/vllm/changes-0.34.md §2.1)
    assert (config.block_size, config.max_num_batched_tokens, config.max_num_seqs, config.max_model_len) == (
        NEWEST_RELEASE.default_block_size, 2048, 128, 4096)
    assert config.enable_prefix_caching and config.enable_chunked_prefill and config.hash_seed == "0"
    a, b = trace.requests
    assert list(a.prompt()) == [1_002_000_000, 1_002_000_001, 2_000_000_000, 2_000_000_001]
    assert list(a.outputs()) == [OUTPUT_TOKEN_BASE, OUTPUT_TOKEN_BASE + 1, OUTPUT_TOKEN_BASE + 2]
    assert list(b.prompt()) == [7, 8] and list(b.outputs()) == [5, 6, 9] and b.arrival_step == 0
    assert list(trace.requests[0].to_request().output_token_ids) == list(a.outputs())


def test_overrides_replace_the_trace_config() -> None:
    overrides = {"num_gpu_blocks": 99, "enable_prefix_caching": False, "block_size": None}
    trace = parse_trace(doc(req()), overrides)
    assert trace.config.num_gpu_blocks == 99 and not trace.config.enable_prefix_caching
    assert trace.config.block_size == NEWEST_RELEASE.default_block_size



def test_the_release_given_applies_where_neither_the_trace_nor_the_overrides_name_one() -> None:
    assert parse_trace(doc(req())).config.release is NEWEST_RELEASE
    assert parse_trace(doc(req()), release=VLLM_0_17_1).config.release is VLLM_0_17_1
    assert parse_trace(doc(req(), vllm_version="0.33.0"), release=VLLM_0_17_1).config.release is VLLM_0_33_0
    assert parse_trace(doc(req()), {"vllm_version": "0.33.0"}, release=VLLM_0_17_1).config.release is VLLM_0_33_0

@pytest.mark.parametrize(("document", "message"), [
    (doc(req(max_token=4)), "requests[0].max_token: unknown key; did you mean max_tokens?"),
    ({"config": {**CONFIG, "max_num_seq": 4}, "requests": []},
     "config.max_num_seq: unknown key; did you mean max_num_seqs?"),
    ({"config": CONFIG, "request": []}, "request: unknown key; did you mean requests?"),
    (doc(req(unique_len=-5)), "requests[0].unique_len: -5 is out of range: expected an integer from 0 to 10**6"),
    (doc(req(arrival_step=-1)), "requests[0].arrival_step: -1 is out of range: expected an integer from 0 to 10**9"),
    (doc(req(max_tokens=0)), "requests[0].max_tokens: 0 is out of range: expected an integer from 1 to 10**8"),
    (doc(req(prefix_len=500, unique_len=12)),
     "the prompt (512 tokens) must be shorter than max_model_len (512)"),
    (doc(req(prefix_len=0, unique_len=0)), "the prompt is empty"),
    (doc(req("a"), req("a")), "request id 'a' appears twice"),
    (doc(req(), max_num_batched_tokens=2, max_num_seqs=4), "must be greater than or equal to max_num_seqs"),
    (doc(req(), enable_chunked_prefill=False), "with chunked prefill off"),
    (doc({"request_id": "p", "prompt_token_ids": [1, 2], "prefix_len": 4, "max_tokens": 1}),
     "either prompt_token_ids or prefix_id/prefix_len/unique_len, not both"),
    ({"config": {"block_size": 16}, "requests": []}, "config needs num_gpu_blocks"),
    (doc(req(), num_gpu_blocks=True), "config.num_gpu_blocks: expected an integer from 2 to 10**8, got true"),
    (doc(req(), block_size=12),
     "config.block_size: 12 is not a block size vLLM accepts: expected one of 1, 8, 16, 32, 64, 128, 256"),
    (doc(req(), hash_algo="md5"),
     "config.hash_algo: expected one of: sha256, sha256_cbor, xxhash, xxhash_cbor, got 'md5'"),
    (doc(req(), num_gpu_blocks=1), "config.num_gpu_blocks: 1 is out of range: expected an integer from 2 to 10**8"),
    (doc(req(output_token_ids=[1, 2])), "output_token_ids holds 2 ids but max_tokens is 4"),
    (doc({"request_id": "p", "prompt_token_ids": [1, -2], "max_tokens": 1}),
     "prompt_token_ids[1]: -2 is out of range: expected an integer from 0 to 2**63 - 1"),
    (doc(req(request_id=5)), "requests[0].request_id: expected a non-empty string of at most 1,024 characters, got 5"),
    ([1, 2], "expected an object (a kvplan trace: config and requests), got a list of 2 items"),
])
def test_invalid_traces_are_one_clear_error(document: Any, message: str) -> None:
    with pytest.raises(KvplanError) as error:
        parse_trace(document, source="t.json")
    text = str(error.value)
    assert message in text and "\n" not in text and text.startswith("t.json")

