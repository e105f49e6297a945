"""A set of 64-bit fingerprints that only grows, held in 8 bytes an entry (kvplan's bookkeeping).

The block pool remembers the fingerprint of every hash it evicts until the run is known to have
been short of blocks (`BlockPool.evicted`): a long run that never is evicts one hash per block it
hands out, millions of them, and looks up far fewer (one first miss per prefix lookup). A Python
set costs about 70 bytes an entry (an int object and its slot). Here the fingerprints are spread
over buckets by their low bits (they are SHA-256 bytes, so the buckets fill evenly), each bucket an
unsorted `array("Q")`: an add is one append (the pool's hot loop appends to `buckets` directly), a
lookup scans one short bucket in C. Nothing is ever sorted or merged; when the buckets hold
`GROW_AT` entries each on average, their number grows `GROW_FACTOR`-fold (each entry moved once a
growth) up to `MAX_BUCKETS` (then 13 million entries, a day of traffic, make buckets of about 200).
"""

from __future__ import annotations

from array import array

# Buckets of a new set (a small run never grows them: a pool is made for every simulated cell).
INITIAL_BUCKETS = 1 << 8
# The mean bucket length at which the buckets grow, and by how much.
GROW_AT = 128
GROW_FACTOR = 16
# The most buckets (about 5 MB of array headers).
MAX_BUCKETS = 1 << 16


class FingerprintSet:
    """Membership of the fingerprints added (ints in [0, 2**64)); nothing is removed. Its length
    counts a fingerprint added twice twice (only emptiness is read)."""

    __slots__ = ("_count", "_grow_at", "buckets", "mask")

    def __init__(self) -> None:
        self.buckets: list[array[int]] = [array("Q") for _ in range(INITIAL_BUCKETS)]
        # a fingerprint's bucket is buckets[fingerprint & mask]
        self.mask = INITIAL_BUCKETS - 1
        self._count = 0
        self._grow_at = GROW_AT * INITIAL_BUCKETS

    def __len__(self) -> int:
        return self._count

    def __contains__(self, fingerprint: int) -> bool:
        return fingerprint in self.buckets[fingerprint & self.mask]

    def add(self, fingerprint: int) -> None:
        self.buckets[fingerprint & self.mask].append(fingerprint)
        self.added(1)

    def added(self, count: int) -> None:
        """Callers that append to `buckets` directly (binding `buckets` and `mask` before a batch
        of appends) report how many after the batch; the buckets may grow then."""
        self._count += count
        if self._count >= self._grow_at and len(self.buckets) < MAX_BUCKETS:
            self._grow()

    def _grow(self) -> None:
        size = min(len(self.buckets) * GROW_FACTOR, MAX_BUCKETS)
        mask = size - 1
        buckets: list[array[int]] = [array("Q") for _ in range(size)]
        for bucket in self.buckets:
            for fingerprint in bucket:
                buckets[fingerprint & mask].append(fingerprint)
        self.buckets = buckets
        self.mask = mask
        self._grow_at = GROW_AT * size
