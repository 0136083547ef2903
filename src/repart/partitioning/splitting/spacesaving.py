"""SpaceSaving (Metwally et al.), one summary per source, as arrays a kernel can update in O(log C).

A summary holds at most C (key, count, error) entries. Offering a tracked key adds 1 to its count; an
untracked key fills a free entry with count 1, or, when the summary is full, *replaces* the entry with
the smallest count: the new key takes count min + 1 and error min (the replacement rule that NOTES.md
and FISH §4.1.1 describe). ``count`` overestimates a key's true count by at most ``error``, and the
counts always sum to the tuples offered.

Ties between smallest counts go to the lowest entry number, so the evicted entry is a function of the
stream alone: a binary min-heap ordered by (count, entry) finds it, and a linear-probing index maps
keys to entries. Counts are float64 so that FISH can decay them (integers stay exact below 2^53).
"""

from __future__ import annotations

from dataclasses import dataclass

import numba
import numpy as np
import numpy.typing as npt

from repart.partitioning.splitting.hashes import mix64

IntArray = npt.NDArray[np.int64]
UIntArray = npt.NDArray[np.uint64]
FloatArray = npt.NDArray[np.float64]

_INDEX_SEED = np.uint64(0x51ACE5A71C0FFEE5)


@dataclass
class Summaries:
    """The per-source SpaceSaving summaries of one grouping (row s belongs to source s)."""

    keys: UIntArray  # (S, C)
    counts: FloatArray  # (S, C)
    errors: FloatArray  # (S, C)
    sizes: IntArray  # (S,)
    heap: IntArray  # (S, C) entry numbers, a min-heap by (count, entry)
    positions: IntArray  # (S, C) where each entry sits in the heap
    index: IntArray  # (S, 4C rounded up to a power of two) entry numbers or -1

    @classmethod
    def empty(cls, sources: int, capacity: int) -> Summaries:
        slots = 1 << max(2, (4 * capacity - 1).bit_length())
        return cls(
            keys=np.zeros((sources, capacity), dtype=np.uint64),
            counts=np.zeros((sources, capacity), dtype=np.float64),
            errors=np.zeros((sources, capacity), dtype=np.float64),
            sizes=np.zeros(sources, dtype=np.int64),
            heap=np.zeros((sources, capacity), dtype=np.int64),
            positions=np.zeros((sources, capacity), dtype=np.int64),
            index=np.full((sources, slots), -1, dtype=np.int64),
        )

    def entries(self, source: int) -> list[tuple[int, float, float]]:
        """(key hash, count, error) of one source's summary, by decreasing count then entry number."""
        used = int(self.sizes[source])
        order = sorted(range(used), key=lambda e: (-self.counts[source, e], e))
        return [
            (int(self.keys[source, e]), float(self.counts[source, e]), float(self.errors[source, e]))
            for e in order
        ]


@numba.njit(cache=True, inline="always")
def _before(counts: FloatArray, a: int, b: int) -> bool:
    return counts[a] < counts[b] or (counts[a] == counts[b] and a < b)


@numba.njit(cache=True)
def _sift_up(heap: IntArray, positions: IntArray, counts: FloatArray, p: int) -> None:
    e = heap[p]
    while p > 0:
        parent = (p - 1) >> 1
        other = heap[parent]
        if not _before(counts, e, other):
            break
        heap[p] = other
        positions[other] = p
        p = parent
    heap[p] = e
    positions[e] = p


@numba.njit(cache=True)
def _sift_down(heap: IntArray, positions: IntArray, counts: FloatArray, size: int, p: int) -> None:
    e = heap[p]
    while True:
        child = 2 * p + 1
        if child >= size:
            break
        right = child + 1
        if right < size and _before(counts, heap[right], heap[child]):
            child = right
        if not _before(counts, heap[child], e):
            break
        heap[p] = heap[child]
        positions[heap[p]] = p
        p = child
    heap[p] = e
    positions[e] = p


@numba.njit(cache=True, inline="always")
def _home(key: np.uint64, mask: int) -> int:
    return int(np.int64(mix64(key ^ _INDEX_SEED) & np.uint64(mask)))


@numba.njit(cache=True)
def _forget(index: IntArray, keys: UIntArray, key: np.uint64) -> None:
    """Remove ``key`` from a linear-probing index by backward-shift deletion."""
    mask = index.size - 1
    p = _home(key, mask)
    while keys[index[p]] != key:
        p = (p + 1) & mask
    index[p] = -1
    q = (p + 1) & mask
    while index[q] >= 0:
        home = _home(keys[index[q]], mask)
        if ((q - home) & mask) >= ((q - p) & mask):
            index[p] = index[q]
            index[q] = -1
            p = q
        q = (q + 1) & mask


@numba.njit(cache=True)
def offer(
    keys: UIntArray,
    counts: FloatArray,
    errors: FloatArray,
    sizes: IntArray,
    heap: IntArray,
    positions: IntArray,
    index: IntArray,
    s: int,
    key: np.uint64,
) -> tuple[int, bool]:
    """Offer one tuple of ``key`` to source ``s``'s summary; returns (its entry, whether it replaced one)."""
    row_keys, row_counts, row_index = keys[s], counts[s], index[s]
    mask = row_index.size - 1
    p = _home(key, mask)
    while row_index[p] >= 0:
        e = row_index[p]
        if row_keys[e] == key:
            row_counts[e] += 1.0
            _sift_down(heap[s], positions[s], row_counts, sizes[s], positions[s, e])
            return e, False
        p = (p + 1) & mask
    capacity = row_keys.size
    if sizes[s] < capacity:
        e = sizes[s]
        sizes[s] = e + 1
        row_keys[e] = key
        row_counts[e] = 1.0
        errors[s, e] = 0.0
        row_index[p] = e
        heap[s, e] = e
        positions[s, e] = e
        _sift_up(heap[s], positions[s], row_counts, e)
        return e, False
    e = heap[s, 0]
    _forget(row_index, row_keys, row_keys[e])
    p = _home(key, mask)
    while row_index[p] >= 0:
        p = (p + 1) & mask
    row_index[p] = e
    row_keys[e] = key
    errors[s, e] = row_counts[e]
    row_counts[e] += 1.0
    _sift_down(heap[s], positions[s], row_counts, capacity, 0)
    return e, True


@numba.njit(cache=True)
def decay(
    counts: FloatArray,
    errors: FloatArray,
    sizes: IntArray,
    heap: IntArray,
    positions: IntArray,
    s: int,
    factor: float,
) -> None:
    """Multiply every count and error of source ``s`` by ``factor`` and restore the heap order."""
    size = sizes[s]
    for e in range(size):
        counts[s, e] *= factor
        errors[s, e] *= factor
    for e in range(size):
        heap[s, e] = e
        positions[s, e] = e
    for p in range(size // 2 - 1, -1, -1):
        _sift_down(heap[s], positions[s], counts[s], size, p)
