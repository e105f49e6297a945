"""The block pool's compact set of evicted-hash fingerprints answers membership as a set does,
across its frozen sorted runs and their merges."""

from __future__ import annotations

import random

import pytest

from kvplan.semantics.engine import fingerprints
from kvplan.semantics.engine.fingerprints import FingerprintSet


@pytest.mark.parametrize("recent_limit, max_run", [(4, 16), (7, 1 << 20), (1, 3)])
def test_membership_matches_a_set(monkeypatch: pytest.MonkeyPatch, recent_limit: int, max_run: int) -> None:
    monkeypatch.setattr(fingerprints, "RECENT_LIMIT", recent_limit)
    monkeypatch.setattr(fingerprints, "MAX_RUN", max_run)
    rng = random.Random(recent_limit)
    compact, reference = FingerprintSet(), set()
    for _ in range(400):
        # small values repeat (a hash evicted again after it was frozen); large ones reach 2**64 - 1
        value = rng.randrange(50) if rng.random() < 0.3 else rng.randrange(1 << 64)
        compact.add(value)
        reference.add(value)
        probe = rng.randrange(50) if rng.random() < 0.5 else rng.choice(sorted(reference))
        assert (probe in compact) == (probe in reference)
    assert all(value in compact for value in reference)
    assert len(compact) >= len(reference)


def test_adds_through_recent_freeze_when_told(monkeypatch: pytest.MonkeyPatch) -> None:
    """The pool's hot loop adds to `recent` directly, then asks for a freeze once."""
    monkeypatch.setattr(fingerprints, "RECENT_LIMIT", 3)
    compact = FingerprintSet()
    compact.recent.update({5, 1, 9, 7})
    compact.freeze_if_full()
    assert not compact.recent and len(compact) == 4
    assert all(value in compact for value in (1, 5, 7, 9)) and 6 not in compact
    assert not FingerprintSet()
