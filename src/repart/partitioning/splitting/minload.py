"""A source's least loaded worker in O(1): the bitset of the workers at its minimum load.

Loads only ever grow by one. A source keeps its minimum load and a bitset of the workers at it; the
least loaded worker with the lowest id is the lowest set bit, and the least loaded of a candidate set
is the lowest bit of (bitset AND the set's mask) when they meet (the caller scans its candidates when
they do not). When the last worker at the minimum is incremented, the minimum and its bitset are
rebuilt from the loads: after at least as many increments as the bitset had members, so O(1) per
tuple amortised in a balanced system — W-Choices sends every head tuple to a worker at the minimum.
An increment of any other worker costs one comparison.
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
_TABLE = np.zeros(64, dtype=np.int64)
for _bit in range(64):
    _TABLE[(((1 << _bit) * 0x03F79D71B4CB0A89) % 2**64) >> 58] = _bit


def words(workers: int) -> int:
    """uint64 words of a bitset over ``workers`` workers."""
    return (workers + 63) // 64


def full_sets(sources: int, workers: int) -> UIntArray:
    """Every worker at the minimum (all loads 0), for each source."""
    bits = np.zeros((sources, words(workers)), dtype=np.uint64)
    for w in range(workers):
        bits[:, w // 64] |= np.uint64(1) << np.uint64(w % 64)
    return bits


@numba.njit(cache=True, inline="always")
def lowest_bit(x: np.uint64) -> int:
    """Index of the lowest set bit of a non-zero word (De Bruijn multiplication)."""
    with_lowest = x & (~x + _ONE)
    return int(_TABLE[(with_lowest * _DEBRUIJN) >> _SHIFT])


@numba.njit(cache=True, inline="always")
def least_loaded(at_minimum: UIntArray, s: int) -> int:
    """The lowest-id worker at source ``s``'s minimum load."""
    for j in range(at_minimum.shape[1]):
        if at_minimum[s, j] != 0:
            return 64 * j + lowest_bit(at_minimum[s, j])
    return -1


@numba.njit(cache=True, inline="always")
def least_loaded_of(at_minimum: UIntArray, s: int, masks: UIntArray, line: int) -> int:
    """The lowest-id candidate of ``masks[s, line]`` at source ``s``'s minimum load, or −1 if none is."""
    for j in range(at_minimum.shape[1]):
        both = at_minimum[s, j] & masks[s, line, j]
        if both != 0:
            return 64 * j + lowest_bit(both)
    return -1


@numba.njit(cache=True)
def _rebuild(loads: IntArray, minimum: IntArray, at_minimum: UIntArray, s: int) -> None:
    low = loads[s, 0]
    for w in range(1, loads.shape[1]):
        if loads[s, w] < low:
            low = loads[s, w]
    minimum[s] = low
    for w in range(loads.shape[1]):
        if loads[s, w] == low:
            at_minimum[s, w >> 6] |= _ONE << np.uint64(w & 63)


@numba.njit(cache=True, inline="always")
def add_tuple(loads: IntArray, minimum: IntArray, at_minimum: UIntArray, s: int, w: int) -> None:
    """One more tuple from source ``s`` to worker ``w``, keeping the minimum's bitset."""
    loads[s, w] += 1
    if loads[s, w] == minimum[s] + 1:
        at_minimum[s, w >> 6] &= ~(_ONE << np.uint64(w & 63))
        for j in range(at_minimum.shape[1]):
            if at_minimum[s, j] != 0:
                return
        _rebuild(loads, minimum, at_minimum, s)
