"""SpaceSaving (Metwally et al.), one summary per source, as arrays a kernel can update in O(log C).

A summary holds at most C (key, count, error) entries. A tuple of a tracked key adds 1 to its count; an
untracked key fills a free entry with count 1, or, when the summary is full, *replaces* the entry with
the smallest count: the new key takes count min + 1 and error min (the replacement rule that NOTES.md
and FISH §4.1.1 describe). ``count`` overestimates a key's true count by at most ``error``, and the
counts always sum to the tuples offered.

Ties between smallest counts go to the lowest entry number, so the evicted entry is a function of the
stream alone: a binary min-heap ordered by (count, entry) finds it, and a linear-probing index maps
keys to entries. The heap is built when the summary fills up: until then no entry is replaced, so
increments and decays leave it alone (a skewed stream over fewer than C distinct keys per source
never pays for it). Counts are float64 so that FISH can decay them (integers stay exact below 2^53).

Kernels inline the hot path — :func:`locate` then :func:`bump` — and call :func:`sink` only when
:func:`bump` asks for it and :func:`admit` only for an untracked key. Inlined helpers never call a
compiled function themselves: numba then keeps the arrays' reference counts inside the kernel's loop,
atomic operations that tripled the cost of a tuple. Some loop shapes in an inlined helper do the same
(seen: a second loop, an array read after the loop, a loop inside a loop with an early return), so a
new helper is checked for ``NRT_incref`` in the kernel's optimised IR (``inspect_llvm``, uncached).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numba
import numpy as np
import numpy.typing as npt
from numba.cpython.unsafe.numbers import leading_zeros

from repart.partitioning.groupings.hashes import GOLDEN

IntArray = npt.NDArray[np.int64]
UIntArray = npt.NDArray[np.uint64]
FloatArray = npt.NDArray[np.float64]


def default_capacity(theta: float) -> int:
    """⌈10/θ⌉ entries: a newcomer's count min + 1 then stays below θ·m_s, so it is not taken for a
    hot key (docs/DECISIONS.md)."""
    return math.ceil(10 / theta)


@dataclass
class Summaries:
    """The per-source SpaceSaving summaries of one grouping (row s belongs to source s)."""

    keys: UIntArray  # (S, C)
    counts: FloatArray  # (S, C)
    errors: FloatArray  # (S, C)
    sizes: IntArray  # (S,)
    heap: IntArray  # (S, C) entry numbers, a min-heap by (count, entry) once the row is full
    positions: IntArray  # (S, C) where each entry sits in the heap (C before the heap is built)
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
def _before(counts: FloatArray, s: int, a: int, b: int) -> bool:
    return counts[s, a] < counts[s, b] or (counts[s, a] == counts[s, b] and a < b)


@numba.njit(cache=True)
def _sift_down(heap: IntArray, positions: IntArray, counts: FloatArray, s: int, size: int, p: int) -> None:
    e = heap[s, p]
    while True:
        child = 2 * p + 1
        if child >= size:
            break
        right = child + 1
        if right < size and _before(counts, s, heap[s, right], heap[s, child]):
            child = right
        if not _before(counts, s, heap[s, child], e):
            break
        heap[s, p] = heap[s, child]
        positions[s, heap[s, p]] = p
        p = child
    heap[s, p] = e
    positions[s, e] = p


@numba.njit(cache=True)
def _heapify(heap: IntArray, positions: IntArray, counts: FloatArray, s: int, size: int) -> None:
    for p in range(size):
        heap[s, p] = p
        positions[s, p] = p
    for q in range(size // 2 - 1, -1, -1):
        _sift_down(heap, positions, counts, s, size, q)


@numba.njit(cache=True, inline="always")
def _home(key: np.uint64, mask: int) -> int:
    """A key's first index position: the top b bits of key·φ for ``mask`` = 2^b − 1 (Fibonacci
    hashing). Every bit of the key reaches them, and one multiplication is mixing enough for keys
    that are XXH64 hashes already; it starts every tuple's chain of dependent loads."""
    return int(np.int64((key * GOLDEN) >> np.uint64(leading_zeros(np.uint64(mask)))))  # type: ignore[call-arg]


@numba.njit(cache=True)
def _forget(index: IntArray, keys: UIntArray, s: int, key: np.uint64) -> None:
    """Remove ``key`` from source ``s``'s linear-probing index by backward-shift deletion."""
    mask = index.shape[1] - 1
    p = _home(key, mask)
    while keys[s, index[s, p]] != key:
        p = (p + 1) & mask
    index[s, p] = -1
    q = (p + 1) & mask
    while index[s, q] >= 0:
        home = _home(keys[s, index[s, q]], mask)
        if ((q - home) & mask) >= ((q - p) & mask):
            index[s, p] = index[s, q]
            index[s, q] = -1
            p = q
        q = (q + 1) & mask


@numba.njit(cache=True, inline="always")
def locate(keys: UIntArray, index: IntArray, s: int, key: np.uint64) -> int:
    """The entry of ``key`` in source ``s``'s summary (≥ 0), or −(p + 1) for the free index position p."""
    mask = index.shape[1] - 1
    p = _home(key, mask)
    while index[s, p] >= 0:
        e = index[s, p]
        if keys[s, e] == key:
            return int(e)
        p = (p + 1) & mask
    return -(p + 1)


@numba.njit(cache=True, inline="always")
def bump(counts: FloatArray, positions: IntArray, sizes: IntArray, s: int, e: int) -> bool:
    """One more tuple of a tracked entry; True when it must :func:`sink` (a heap leaf, where hot keys
    sit, never does, nor any entry before the heap is built)."""
    counts[s, e] += 1.0
    return bool(2 * positions[s, e] + 1 < sizes[s])


@numba.njit(cache=True)
def sink(heap: IntArray, positions: IntArray, counts: FloatArray, sizes: IntArray, s: int, e: int) -> None:
    """Restore the heap order below entry ``e`` after :func:`bump` raised its count."""
    _sift_down(heap, positions, counts, s, sizes[s], positions[s, e])


@numba.njit(cache=True)
def admit(
    keys: UIntArray,
    counts: FloatArray,
    errors: FloatArray,
    sizes: IntArray,
    heap: IntArray,
    positions: IntArray,
    index: IntArray,
    s: int,
    key: np.uint64,
    position: int,
) -> int:
    """Start tracking an untracked ``key`` (``position`` from :func:`locate`).

    Returns its entry, or −(entry + 1) when it replaced the entry with the smallest count.
    """
    capacity = keys.shape[1]
    if sizes[s] < capacity:
        e = sizes[s]
        sizes[s] = e + 1
        keys[s, e] = key
        counts[s, e] = 1.0
        errors[s, e] = 0.0
        index[s, position] = e
        positions[s, e] = capacity  # in no heap yet: bump never asks to sink it
        if e + 1 == capacity:
            _heapify(heap, positions, counts, s, capacity)
        return int(e)
    e = heap[s, 0]
    _forget(index, keys, s, keys[s, e])
    mask = index.shape[1] - 1
    p = _home(key, mask)
    while index[s, p] >= 0:
        p = (p + 1) & mask
    index[s, p] = e
    keys[s, e] = key
    errors[s, e] = counts[s, e]
    counts[s, e] += 1.0
    _sift_down(heap, positions, counts, s, capacity, 0)
    return int(-(e + 1))


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
    """Multiply every count and error of source ``s`` by ``factor`` and restore the heap order.

    Scaling by one factor keeps the order of distinct counts, so the heap (once there is one) stays
    valid unless rounding made two counts equal whose entries are in the wrong order for the tie
    rule: only then is it rebuilt.
    """
    size = sizes[s]
    for e in range(size):
        counts[s, e] *= factor
        errors[s, e] *= factor
    if size < counts.shape[1]:
        return
    for p in range(1, size):
        if _before(counts, s, heap[s, p], heap[s, (p - 1) >> 1]):
            for q in range(size // 2 - 1, -1, -1):
                _sift_down(heap, positions, counts, s, size, q)
            return
