"""A set of 64-bit fingerprints that only grows, held in 8 bytes an entry (kvplan's bookkeeping).

The block pool remembers the fingerprint of every hash it evicts until the run is known to have
been short of blocks (`BlockPool.evicted`): a long run that never is evicts one hash per block it
hands out, millions of them. A Python set costs about 70 bytes an entry (an int object and its
slot); here only the newest entries are a set (`recent`, which the pool's hot loops add to
directly), and each time it fills it is frozen into a sorted array, searched by bisection.
Arrays of equal length merge, as a binary counter does, up to `MAX_RUN` entries: a search probes
a few arrays, and a merge's temporary list stays small.
"""

from __future__ import annotations

from array import array
from bisect import bisect_left

# Entries of the set before it is frozen into a sorted array (about 9 MB as a set).
RECENT_LIMIT = 1 << 17
# The longest sorted array a merge makes (8 MB; the merge's temporary list of ints, about 50 MB).
MAX_RUN = 1 << 20


class FingerprintSet:
    """Membership of the fingerprints added (ints in [0, 2**64)); nothing is removed. Its length
    counts a fingerprint added again after it was frozen twice (only emptiness is read)."""

    __slots__ = ("_runs", "_sorted_len", "recent")

    def __init__(self) -> None:
        self.recent: set[int] = set()
        self._runs: list[array[int]] = []  # each sorted
        self._sorted_len = 0

    def __len__(self) -> int:
        return len(self.recent) + self._sorted_len

    def __contains__(self, fingerprint: int) -> bool:
        if fingerprint in self.recent:
            return True
        for run in self._runs:
            index = bisect_left(run, fingerprint)
            if index < len(run) and run[index] == fingerprint:
                return True
        return False

    def add(self, fingerprint: int) -> None:
        self.recent.add(fingerprint)
        self.freeze_if_full()

    def freeze_if_full(self) -> None:
        """Callers that add to `recent` directly call this after a batch of adds."""
        if len(self.recent) >= RECENT_LIMIT:
            self._freeze()

    def _freeze(self) -> None:
        run = array("Q", sorted(self.recent))
        self.recent = set()
        runs = self._runs
        while runs and len(runs[-1]) <= len(run) and len(runs[-1]) + len(run) <= MAX_RUN:
            # sorting the concatenation of two sorted runs merges them (Timsort finds the two runs)
            # in time linear in their length
            run = array("Q", sorted(runs.pop() + run))
        runs.append(run)
        self._sorted_len = sum(len(r) for r in runs)
