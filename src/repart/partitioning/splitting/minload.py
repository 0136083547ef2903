"""A source's least loaded worker, and the least loaded of a candidate set, from bitsets of load levels.

Loads only ever grow by one. A source keeps its minimum load and, for each of the ``LEVELS`` loads
minimum, minimum + 1, …, the bitset of its workers at that load (row ``load mod LEVELS``); workers
further above the minimum sit in one more row, the overflow. The least loaded worker with the lowest
id is the lowest set bit of the minimum's row; the least loaded of a candidate set, ties to the
lowest id, is the lowest bit of (row AND the set's mask) in the first row that meets the mask,
scanning up from a load the caller knows no candidate is below (the caller scans its candidates when
no row meets the mask: all of them are in the overflow). D-Choices' hottest key's candidates are
rarely at the minimum (68 % of the tuples at n = 100, z = 2, fell back to scanning its 62 candidates
with a bitset of the minimum alone) but sit up to ~150 loads above it, and within a load of where
they were at the key's previous tuple.

An increment moves one bit to the next row (or to the overflow). When it empties the minimum's row the
caller raises the minimum by one (the incremented worker is at the new minimum): the emptied row then
stands for the highest level and takes the overflow's workers at that load.
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
UIntArray = npt.NDArray[np.uint64]

_DEBRUIJN = np.uint64(0x03F79D71B4CB0A89)
_SHIFT = np.uint64(58)
_ONE = np.uint64(1)
#: Load levels a row each; a power of two, so that a row is ``load & (LEVELS - 1)``.
LEVELS = 1024
_TABLE = np.zeros(64, dtype=np.int64)
for _bit in range(64):
    _TABLE[(((1 << _bit) * 0x03F79D71B4CB0A89) % 2**64) >> 58] = _bit


def words(workers: int) -> int:
    """uint64 words of a bitset over ``workers`` workers."""
    return (workers + 63) // 64


def level_sets(sources: int, workers: int) -> UIntArray:
    """Each source's rows (``LEVELS`` levels, then the overflow): every worker at load 0, the minimum."""
    bits = np.zeros((sources, LEVELS + 1, words(workers)), dtype=np.uint64)
    for w in range(workers):
        bits[:, 0, w // 64] |= np.uint64(1) << np.uint64(w % 64)
    return bits


@numba.njit(cache=True, inline="always")
def lowest_bit(x: np.uint64) -> int:
    """Index of the lowest set bit of a non-zero word (De Bruijn multiplication)."""
    with_lowest = x & (~x + _ONE)
    return int(_TABLE[(with_lowest * _DEBRUIJN) >> _SHIFT])


@numba.njit(cache=True, inline="always")
def least_loaded(levels: UIntArray, minimum: IntArray, s: int) -> int:
    """The lowest-id worker at source ``s``'s minimum load."""
    row = minimum[s] & (LEVELS - 1)
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
    for level in range(max(0, floor - minimum[s]), LEVELS):
        row = (minimum[s] + level) & (LEVELS - 1)
        for j in range(levels.shape[2]):
            both = levels[s, row, j] & masks[s, line, j]
            if both != 0:
                return 64 * j + lowest_bit(both)
    return -1


@numba.njit(cache=True, inline="always")
def add_tuple(loads: IntArray, minimum: IntArray, levels: UIntArray, s: int, w: int) -> bool:
    """One more tuple from source ``s`` to worker ``w``, moving its bit up a row; True when that emptied
    the minimum's row and the caller must :func:`raise_minimum` (inlined helpers call no compiled
    function, see ``spacesaving``)."""
    load = loads[s, w]
    loads[s, w] = load + 1
    above = load - minimum[s]
    if above >= LEVELS:
        return False
    bit = _ONE << np.uint64(w & 63)
    levels[s, load & (LEVELS - 1), w >> 6] &= ~bit
    levels[s, (load + 1) & (LEVELS - 1) if above + 1 < LEVELS else LEVELS, w >> 6] |= bit
    if above != 0:
        return False
    row = load & (LEVELS - 1)
    for j in range(levels.shape[2]):
        if levels[s, row, j] != 0:
            return False
    return True


@numba.njit(cache=True)
def raise_minimum(loads: IntArray, minimum: IntArray, levels: UIntArray, s: int) -> None:
    """Source ``s``'s minimum grows by one; its emptied row becomes the highest level, taking the
    overflow's workers at that load."""
    row = minimum[s] & (LEVELS - 1)
    minimum[s] += 1
    top = minimum[s] + LEVELS - 1
    for j in range(levels.shape[2]):
        spill = levels[s, LEVELS, j]
        while spill != 0:
            bit = spill & (~spill + _ONE)
            spill ^= bit
            w = 64 * j + lowest_bit(bit)
            if loads[s, w] == top:
                levels[s, LEVELS, j] &= ~bit
                levels[s, row, j] |= bit
