"""Blocks no other request can hit are keyed by a unique key instead of their hash
(`Request.num_shareable_blocks`, set by the simulate driver on a conversation's last turn): the
same metrics and per-request records as hashing every block, on the example workloads and on
random ones (small pools: preemptions that resume from their own keyed blocks, evictions,
multi-turn conversations whose next turn hits the last one's blocks)."""

from __future__ import annotations

import json
from typing import Any

import pytest
from hypothesis import given

from kvplan.semantics.engine.hashing import RequestBlockHasher
from kvplan.semantics.engine.request import Request
from kvplan.usecases.simulate import driver
from kvplan.usecases.simulate.driver import EngineOverrides, RunOutcome, SimOptions, prepare, run
from kvplan.usecases.simulate.workload import load_workload, parse_workload
from tests.usecases.simulate.test_bulk_decode import EXAMPLES, REPO, SETTINGS, assert_same, workloads


def hashed_and_keyed(setup: Any, monkeypatch: pytest.MonkeyPatch) -> tuple[RunOutcome, RunOutcome]:
    with monkeypatch.context() as patch:
        patch.setattr(driver, "shareable_blocks", lambda conversation, config: None)
        hashed = run(setup)
    return hashed, run(setup)


@pytest.mark.parametrize("path", EXAMPLES, ids=[path.stem for path in EXAMPLES])
def test_example_workloads_give_the_same_figures(path, monkeypatch):
    setup = prepare(load_workload(path), SimOptions(EngineOverrides(scheduling="sync")))
    assert_same(*hashed_and_keyed(setup, monkeypatch))


@SETTINGS
@given(document=workloads())
def test_random_workloads_give_the_same_figures(document: dict[str, Any], monkeypatch: pytest.MonkeyPatch) -> None:
    setup = prepare(parse_workload(json.loads(json.dumps(document)), REPO), SimOptions())
    assert_same(*hashed_and_keyed(setup, monkeypatch))


def test_blocks_past_the_shareable_ones_get_unique_keys_and_the_rest_their_hashes():
    hasher = RequestBlockHasher(4, "0")
    plain = Request("a", list(range(12)), 8, range(100, 108))
    keyed = Request("b", list(range(12)), 8, range(100, 108))
    keyed.num_shareable_blocks = 2
    other = Request("c", list(range(12)), 8, range(200, 208))
    other.num_shareable_blocks = 2
    for request in (plain, keyed, other):
        request.install_block_hasher(hasher)
    assert keyed.block_hashes[:2] == plain.block_hashes[:2] == other.block_hashes[:2]
    assert keyed.block_hashes[2] != plain.block_hashes[2] and keyed.block_hashes[2] != other.block_hashes[2]
    for _ in range(4):                                   # a decode's block: a key of its own too
        keyed.append_output_token()
    keys = keyed.block_hashes[2:] + other.block_hashes[2:]
    assert len(keyed.block_hashes) == 4 and len(set(keys)) == len(keys)
