"""The consistent-hash ring FISH draws candidates from (FISH §5, Karger et al.).

Worker w owns V virtual nodes at positions ``mix64(seed_ring ⊕ (w·V + v))``; a key sits at
``mix64(h(k) ⊕ seed_key)`` and its candidates are the distinct workers met walking clockwise from
there. Adding or removing a worker only changes candidates next to its virtual nodes (§5).
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

from repart.partitioning.splitting.hashes import mix64

IntArray = npt.NDArray[np.int64]
UIntArray = npt.NDArray[np.uint64]

_RING_SEED = np.uint64(0x0F15F15F15F15F15)
_KEY_SEED = np.uint64(0x7E57AB1E5EED0001)


def build_ring(workers: int, virtual_nodes: int, seed: int) -> tuple[UIntArray, IntArray]:
    """Sorted virtual-node positions and the worker owning each."""
    labels = np.arange(workers * virtual_nodes, dtype=np.uint64)
    salt = np.uint64(seed % 2**64) ^ _RING_SEED
    positions = _mix_all(labels ^ salt)
    order = np.argsort(positions, kind="stable")
    owners = (np.arange(workers * virtual_nodes, dtype=np.int64) // virtual_nodes)[order]
    return positions[order], owners


@numba.njit(cache=True)
def _mix_all(values: UIntArray) -> UIntArray:
    out = np.empty_like(values)
    for i in range(values.size):
        out[i] = mix64(values[i])
    return out


@numba.njit(cache=True)
def walk(
    positions: UIntArray,
    owners: IntArray,
    key: np.uint64,
    count: int,
    n: int,
    out: npt.NDArray[np.int32],
    seen: npt.NDArray[np.int64],
    stamp: int,
) -> int:
    """The first ``count`` distinct workers clockwise from the key's position into ``out``.

    ``seen`` is a per-worker scratch array compared against ``stamp`` (a fresh number per call), so
    no clearing is needed. Returns how many were written (min(count, n)).
    """
    point = mix64(key ^ _KEY_SEED)
    p = np.searchsorted(positions, point)
    found = 0
    size = positions.size
    limit = min(count, n)
    while found < limit:
        w = owners[p % size]
        if seen[w] != stamp:
            seen[w] = stamp
            out[found] = w
            found += 1
        p += 1
    return found
