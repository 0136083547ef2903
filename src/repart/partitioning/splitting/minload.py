"""A source's least loaded worker in O(1): bitsets of the workers at the lowest load levels.

Loads only ever grow by one. A source keeps its minimum load and, for each of the ``LEVELS`` load
values from the minimum up, a bitset of the workers at that load (workers further up are in none).
The least loaded worker with the lowest id is the lowest set bit of the minimum's level; the least
loaded of a candidate set is the lowest bit of the first level that meets the set's mask — when no
level does, the caller scans its candidates. An increment moves one bit up a level; when the minimum's
level empties the window slides up by one and the workers that enter it at the top are found by a scan
of the loads: after at least as many increments as that level had members, so O(1) per tuple
amortised in a balanced system (W-Choices sends every head tuple to a worker at the minimum).
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]
UIntArray = npt.NDArray[np.uint64]

LEVELS = 16
_DEBRUIJN = np.uint64(0x03F79D71B4CB0A89)
_SHIFT = np.uint64(58)
_ONE = np.uint64(1)
_TABLE = np.zeros(64, dtype=np.int64)
for _bit in range(64):
    _TABLE[(((1 << _bit) * 0x03F79D71B4CB0A89) % 2**64) >> 58] = _bit


def words(workers: int) -> int:
    """uint64 words of a bitset over ``workers`` workers."""
    return (workers + 63) // 64


def empty_levels(sources: int, workers: int) -> UIntArray:
    """Level bitsets with every worker at load 0, the minimum, for each source."""
    levels = np.zeros((sources, LEVELS, words(workers)), dtype=np.uint64)
    for w in range(workers):
        levels[:, 0, w // 64] |= np.uint64(1) << np.uint64(w % 64)
    return levels


@numba.njit(cache=True, inline="always")
def lowest_bit(x: np.uint64) -> int:
    """Index of the lowest set bit of a non-zero word (De Bruijn multiplication)."""
    with_lowest = x & (~x + _ONE)
    return int(_TABLE[(with_lowest * _DEBRUIJN) >> _SHIFT])


@numba.njit(cache=True, inline="always")
def least_loaded(levels: UIntArray, minimum: IntArray, s: int) -> int:
    """The lowest-id worker at source ``s``'s minimum load."""
    level = minimum[s] % LEVELS
    for j in range(levels.shape[2]):
        if levels[s, level, j] != 0:
            return 64 * j + lowest_bit(levels[s, level, j])
    return -1


@numba.njit(cache=True, inline="always")
def least_loaded_of(levels: UIntArray, minimum: IntArray, s: int, masks: UIntArray, line: int) -> int:
    """The lowest-id least loaded candidate of ``masks[s, line]``, or −1 if none is within the levels."""
    for up in range(LEVELS):
        level = (minimum[s] + up) % LEVELS
        for j in range(levels.shape[2]):
            both = levels[s, level, j] & masks[s, line, j]
            if both != 0:
                return 64 * j + lowest_bit(both)
    return -1


@numba.njit(cache=True)
def _slide(loads: IntArray, minimum: IntArray, levels: UIntArray, s: int) -> None:
    """The minimum's level is empty: move the window up one load and add the workers entering it."""
    minimum[s] += 1
    top = minimum[s] + LEVELS - 1
    level = top % LEVELS
    for w in range(loads.shape[1]):
        if loads[s, w] == top:
            levels[s, level, w >> 6] |= _ONE << np.uint64(w & 63)


@numba.njit(cache=True, inline="always")
def add_tuple(loads: IntArray, minimum: IntArray, levels: UIntArray, s: int, w: int) -> None:
    """One more tuple from source ``s`` to worker ``w``, keeping the level bitsets."""
    load = loads[s, w]
    loads[s, w] = load + 1
    bit = _ONE << np.uint64(w & 63)
    j = w >> 6
    if load - minimum[s] < LEVELS:
        levels[s, load % LEVELS, j] &= ~bit
    if load + 1 - minimum[s] < LEVELS:
        levels[s, (load + 1) % LEVELS, j] |= bit
    if load == minimum[s]:
        level = load % LEVELS
        for q in range(levels.shape[2]):
            if levels[s, level, q] != 0:
                return
        _slide(loads, minimum, levels, s)
