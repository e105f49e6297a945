"""The block pool's compact set of evicted-hash fingerprints answers membership as a set does,
across its buckets and their growth."""

from __future__ import annotations

import random

import pytest

from kvplan.semantics.engine import fingerprints
from kvplan.semantics.engine.fingerprints import FingerprintSet


@pytest.mark.parametrize("initial, grow_at, max_buckets", [(1, 1, 1 << 16), (2, 3, 8), (4, 2, 4), (256, 128, 1 << 16)])
def test_membership_matches_a_set(monkeypatch: pytest.MonkeyPatch, initial: int, grow_at: int,
                                  max_buckets: int) -> None:
    monkeypatch.setattr(fingerprints, "INITIAL_BUCKETS", initial)
    monkeypatch.setattr(fingerprints, "GROW_AT", grow_at)
    monkeypatch.setattr(fingerprints, "MAX_BUCKETS", max_buckets)
    rng = random.Random(initial + grow_at)
    compact, reference = FingerprintSet(), set()
    for _ in range(400):
        # small values repeat (a hash evicted again); large ones reach 2**64 - 1
        value = rng.randrange(50) if rng.random() < 0.3 else rng.randrange(1 << 64)
        compact.add(value)
        reference.add(value)
        probe = rng.randrange(50) if rng.random() < 0.5 else rng.choice(sorted(reference))
        assert (probe in compact) == (probe in reference)
    assert all(value in compact for value in reference)
    assert len(compact) == 400 and len(compact.buckets) <= max_buckets
    if grow_at < 400 // initial and max_buckets > initial:
        assert len(compact.buckets) > initial


def test_appends_to_buckets_grow_when_reported(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool's hot loop appends to `buckets` directly, then reports how many it added once."""
    monkeypatch.setattr(fingerprints, "INITIAL_BUCKETS", 2)
    monkeypatch.setattr(fingerprints, "GROW_AT", 1)
    compact = FingerprintSet()
    buckets, mask = compact.buckets, compact.mask
    for value in (5, 1, 9, 7):
        buckets[value & mask].append(value)
    compact.added(4)
    assert len(compact.buckets) == 32 and len(compact) == 4
    assert all(value in compact for value in (1, 5, 7, 9)) and 6 not in compact
    assert not FingerprintSet()
