"""The consistent-hash ring FISH draws candidates from (FISH §5, Karger et al.).

Worker w owns V virtual nodes at positions ``mix64(seed_ring ⊕ (w·V + v))``; a key sits at
``mix64(h(k) ⊕ seed_key)`` and its candidates are the distinct workers met walking clockwise from
there. Adding or removing a worker only changes candidates next to its virtual nodes (§5).
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

from repart.partitioning.groupings.hashes import mix64, mix_array

IntArray = npt.NDArray[np.int64]
UIntArray = npt.NDArray[np.uint64]
I32Array = npt.NDArray[np.int32]

_RING_SEED = np.uint64(0x0F15F15F15F15F15)
_KEY_SEED = np.uint64(0x7E57AB1E5EED0001)


BUCKET_BITS = 16


def build_ring(workers: int, virtual_nodes: int, seed: int) -> tuple[UIntArray, IntArray, IntArray]:
    """Sorted virtual-node positions, the worker owning each, and a jump table into them.

    ``buckets[b]`` is the first virtual node at or after position b·2^48, so finding a key's successor
    scans only the nodes of its bucket instead of binary-searching the whole ring.
    """
    labels = np.arange(workers * virtual_nodes, dtype=np.uint64)
    salt = np.uint64(seed % 2**64) ^ _RING_SEED
    positions = mix_array(labels ^ salt)
    order = np.argsort(positions, kind="stable")
    owners = (np.arange(workers * virtual_nodes, dtype=np.int64) // virtual_nodes)[order]
    sorted_positions = positions[order]
    starts = np.arange(2**BUCKET_BITS, dtype=np.uint64) << np.uint64(64 - BUCKET_BITS)
    buckets = np.searchsorted(sorted_positions, starts).astype(np.int64)
    return sorted_positions, owners, buckets


@numba.njit(cache=True)
def walk(
    positions: UIntArray,
    owners: IntArray,
    buckets: IntArray,
    key: np.uint64,
    count: int,
    out: I32Array,
    row: int,
    stamps: IntArray,
) -> int:
    """The first ``count`` distinct workers clockwise from the key's position into ``out[row]``.

    ``stamps`` is per-worker scratch whose last cell counts calls: a worker is new in this walk when its
    cell differs from the call's number, so nothing needs clearing. Returns how many were written
    (min(count, n)).
    """
    n = stamps.size - 1
    stamps[n] += 1
    stamp = stamps[n]
    point = mix64(key ^ _KEY_SEED)
    size = positions.size
    p = buckets[point >> np.uint64(64 - BUCKET_BITS)]
    while p < size and positions[p] < point:
        p += 1
    found = 0
    limit = min(count, n)
    while found < limit:
        w = owners[p % size]
        if stamps[w] != stamp:
            stamps[w] = stamp
            out[row, found] = w
            found += 1
        p += 1
    return found
