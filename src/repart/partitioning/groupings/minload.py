"""A source's least loaded worker, and the least loaded of a candidate set, from bitsets of load levels.

Loads only ever grow by one. A source keeps its minimum load and, for each of K loads minimum,
minimum + 1, …, the bitset of its workers at that load (row ``load mod K``); workers further above
the minimum sit in one more row, the overflow. K is a power of two, ``MAX_LEVELS`` unless that would
take more than ``LEVEL_BUDGET`` words for all sources (many sources and thousands of workers).

The least loaded worker with the lowest id is the lowest set bit of the minimum's row; the least
loaded of a candidate set, ties to the lowest id, is the lowest bit of (row AND the set's mask) in
the first row that meets the mask, scanning up from a load the caller knows no candidate is below
(the caller scans its candidates when no row meets the mask: all of them are in the overflow).
D-Choices' hottest key's candidates are rarely at the minimum (68 % of the tuples at n = 100, z = 2,
fell back to scanning its 62 candidates with a bitset of the minimum alone) but sit up to ~150 loads
above it, and within a load of where they were at the key's previous tuple.

An increment moves one bit to the next row (or to the overflow). When it empties the minimum's row the
caller raises the minimum by one (the incremented worker is at the new minimum): the emptied row then
stands for the highest level and takes the overflow's workers at that load.
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt
from numba.cpython.unsafe.numbers import trailing_zeros

IntArray = npt.NDArray[np.int64]
UIntArray = npt.NDArray[np.uint64]

_ONE = np.uint64(1)
#: Load levels with a row each (K); a power of two, so that a row is ``load & (K - 1)``.
MAX_LEVELS = 1024
LEVEL_BUDGET = 2**20  # uint64 words (8 MiB) the rows of all sources may take before K shrinks


def words(workers: int) -> int:
    """uint64 words of a bitset over ``workers`` workers."""
    return (workers + 63) // 64


def level_sets(sources: int, workers: int, levels: int | None = None) -> UIntArray:
    """Each source's rows (K ``levels``, a power of two ≥ 2, then the overflow): every worker at load 0,
    the minimum. Kernels read K from the shape."""
    if levels is None:
        fit = LEVEL_BUDGET // (sources * words(workers))
        levels = max(2, min(MAX_LEVELS, 1 << max(1, fit.bit_length() - 1)))
    bits = np.zeros((sources, levels + 1, words(workers)), dtype=np.uint64)
    for w in range(workers):
        bits[:, 0, w // 64] |= np.uint64(1) << np.uint64(w % 64)
    return bits


@numba.njit(cache=True, inline="always")
def lowest_bit(x: np.uint64) -> int:
    """Index of the lowest set bit of a non-zero word (one ``tzcnt`` instruction: numba's cttz intrinsic)."""
    return int(trailing_zeros(x))  # type: ignore[call-arg]  # an intrinsic: numba supplies the context


@numba.njit(cache=True, inline="always")
def least_loaded(levels: UIntArray, minimum: IntArray, s: int) -> int:
    """The lowest-id worker at source ``s``'s minimum load."""
    row = minimum[s] & (levels.shape[1] - 2)
    for j in range(levels.shape[2]):
        if levels[s, row, j] != 0:
            return 64 * j + lowest_bit(levels[s, row, j])
    return -1


@numba.njit(cache=True, inline="always")
def least_loaded_of(
    levels: UIntArray, minimum: IntArray, s: int, masks: UIntArray, line: int, floor: int
) -> int:
    """The least loaded candidate of ``masks[s, line]`` at source ``s``, ties to the lowest id, or −1
    when every candidate is in the overflow. ``floor`` is a load no candidate is below (loads only
    grow, so any load a candidate once had as the least loaded of the set): the scan starts there."""
    top = levels.shape[1] - 1
    low = minimum[s]
    for level in range(max(0, floor - low), top):
        row = (low + level) & (top - 1)
        found = -1
        for j in range(levels.shape[2] - 1, -1, -1):  # the lowest word that meets the mask, without a branch
            both = levels[s, row, j] & masks[s, line, j]
            found = 64 * j + lowest_bit(both) if both != 0 else found
        if found >= 0:
            return found
    return -1


@numba.njit(cache=True, inline="always")
def add_tuple(loads: IntArray, minimum: IntArray, levels: UIntArray, s: int, w: int) -> bool:
    """One more tuple from source ``s`` to worker ``w``, moving its bit up a row; True when that emptied
    the minimum's row and the caller must :func:`raise_minimum` (inlined helpers call no compiled
    function, see ``spacesaving``)."""
    load = loads[s, w]
    loads[s, w] = load + 1
    above = load - minimum[s]
    top = levels.shape[1] - 1  # K, the overflow's row
    if above >= top:
        return False
    bit = _ONE << np.uint64(w & 63)
    levels[s, load & (top - 1), w >> 6] &= ~bit
    levels[s, (load + 1) & (top - 1) if above + 1 < top else top, w >> 6] |= bit
    if above != 0:
        return False
    row = load & (top - 1)
    occupied = np.uint64(0)
    for j in range(levels.shape[2]):
        occupied |= levels[s, row, j]
    return bool(occupied == 0)


@numba.njit(cache=True)
def raise_minimum(loads: IntArray, minimum: IntArray, levels: UIntArray, s: int) -> None:
    """Source ``s``'s minimum grows by one; its emptied row becomes the highest level, taking the
    overflow's workers at that load."""
    overflow = levels.shape[1] - 1
    row = minimum[s] & (overflow - 1)
    minimum[s] += 1
    highest = minimum[s] + overflow - 1
    for j in range(levels.shape[2]):
        spill = levels[s, overflow, j]
        while spill != 0:
            bit = spill & (~spill + _ONE)
            spill ^= bit
            w = 64 * j + lowest_bit(bit)
            if loads[s, w] == highest:
                levels[s, overflow, j] &= ~bit
                levels[s, row, j] |= bit
