"""FISH's least-wait choice without a scan: each worker's release index and each hot key's ranks.

A source estimates worker i busy until F_i (``fish.py``); tuple t arrives at now = t/λ, and the
candidate with the least wait max(0, F_i − now) is the first *idle* one (F_i ≤ now) when there is
one. Scanning a hot key's candidates for it cost a branch misprediction per tuple (which candidate is
idle is random), and with it the overlap of consecutive tuples: half of FISH's time.

Instead each source keeps, per worker, a lower bound of its *release index*: the first tuple number
r with F_i ≤ r/λ as the kernel divides (t ↦ t/λ never decreases, so F_i ≤ now ⟺ r ≤ t). The bound,
⌈F_i·λ⌉ − 1, is at most r and at least r − 2 (:func:`earliest_release`; r − 2 when F_i lies an ulp
above a tuple boundary): a worker whose bound is above the current tuple is busy, one at or below it
is idle or released within the next two tuples, and the kernel checks
F_i ≤ now for the one worker it picks. The bound is stored relative to a per-source base as int16,
saturated (a value clamped up is still above any tuple before the next rebase, one clamped down is
below the base), and the base moves up to the current tuple every ``REBASE_AFTER`` tuples
(:func:`rebase`).
A key keeps the rank (position) of each worker walked on its ring order, n for the others; the
first idle candidate is the least rank among the workers not known busy, when it is below the key's
worker count and that worker is idle indeed: one branch-free pass over n int16 bounds and n ranks,
which compiles to vector compares and a vector minimum. It reads about 3 bytes per worker, so its
cost grows with n (a key's ring order takes n per key as well). When every candidate is busy, or
(rarely: 0.007 % of the speed stream's tuples) the worker picked is released only at the next tuple,
:func:`waiting_choice` scans the candidates; :func:`least_wait` is the whole choice.
"""

from __future__ import annotations

import math
from typing import Any

import numba
import numpy as np
import numpy.typing as npt

from repart.partitioning.groupings.base import FloatArray, IntArray

I16Array = npt.NDArray[np.int16]
I32Array = npt.NDArray[np.int32]
RankArray = npt.NDArray[np.unsignedinteger[Any]]  # uint8/16/32 by n
#: An index a kernel holds as an int or, to skip numba's negative-index fix-up, as an unsigned int.
Index = int | np.uint64

#: Tuples after which a source's base moves up (a power of two below int16's range).
REBASE_AFTER = 1 << 14
#: Release indices are at most this (2^62 tuples: no stream reaches it).
LATEST = 1 << 62
#: Below this finish·λ, ⌈finish·λ⌉ − 1 bounds the release index from below (earliest_release).
BOUNDED = float(1 << 50)
_LOW, _HIGH = -(1 << 15), (1 << 15) - 1
#: A padding worker's relative release index: busy at every tuple before a rebase.
BUSY = _HIGH


def padded(n: int) -> int:
    """Workers rounded up to a multiple of 64: whole vectors, no remainder loop."""
    return -(-n // 64) * 64


def rank_dtype(n: int) -> np.dtype[Any]:
    """The smallest unsigned integer type holding ranks 0 … n − 1 and n, the "no idle candidate"."""
    return np.min_scalar_type(n)


@numba.njit(cache=True, inline="always")
def release_index(finish: float, rate: float) -> int:
    """The first tuple number r with ``finish ≤ r / rate`` as the kernel computes it (a worker busy
    until ``finish`` is idle from tuple r on); ``LATEST`` if that is beyond 2^62 tuples."""
    guess = finish * rate
    if not guess < LATEST:
        return LATEST
    r = math.ceil(guess)
    while r > 0 and finish <= (r - 1) / rate:
        r -= 1
    while finish > r / rate:
        r += 1
    return r


@numba.njit(cache=True, inline="always")
def earliest_release(finish: float, rate: float) -> int:
    """⌈finish·λ⌉ − 1, at most :func:`release_index` and at most two below it while finish·λ stays
    below 2^50 (both roundings are then far below a tuple; :func:`release_index` itself beyond). A
    kernel stores this bound and checks the one worker it picks (``finish ≤ now``), which spares two
    divisions per tuple."""
    guess = finish * rate
    if not guess < BOUNDED:
        return release_index(finish, rate)
    return math.ceil(guess) - 1


@numba.njit(cache=True, inline="always")
def relative(index: int, base: int) -> np.int16:
    """``index − base`` saturated to int16."""
    return np.int16(min(max(index - base, _LOW), _HIGH))


@numba.njit(cache=True)
def rebase(release: I16Array, finish: FloatArray, base: IntArray, s: int, t: int, rate: float) -> None:
    """Move source ``s``'s base up to tuple ``t``: each worker's relative bound moves down by the shift
    (one clamped down stays clamped), but one clamped up is recomputed from its F_i (exactly, which
    is a bound too)."""
    shift = t - base[s]
    base[s] = t
    for w in range(finish.shape[1]):
        if release[s, w] == _HIGH:
            release[s, w] = relative(release_index(finish[s, w], rate), t)
        else:
            release[s, w] = np.int16(max(release[s, w] - shift, _LOW))


@numba.njit(cache=True, inline="always")
def least_idle_rank(
    release: I16Array, s: Index, elapsed: np.int16, ranks: RankArray, m: Index, none: np.unsignedinteger[Any]
) -> int:
    """The least ``ranks[m, w]`` over source ``s``'s workers not known busy ``elapsed`` tuples after
    its base (relative bound ≤ elapsed), or ``none`` when there is none. Branch-free, so that numba's
    LLVM vectorises it."""
    best = none
    for w in range(release.shape[1]):
        r = ranks[m, w] if release[s, w] <= elapsed else none
        best = min(best, r)
    return int(best)


@numba.njit(cache=True, inline="always")
def waiting_choice(
    candidates: I32Array, row: Index, length: int, finish: FloatArray, s: Index, now: float
) -> int:
    """The candidate of ``candidates[row, :length]`` with the least estimated wait max(0, F_i − now)
    at source ``s``; ties to the earliest. A wait is never below 0, so the first idle candidate
    (F_i ≤ now) ends the scan."""
    best = candidates[row, 0]
    best_wait = finish[s, best] - now
    q = 1
    while best_wait > 0.0 and q < length:
        c = candidates[row, q]
        wait = finish[s, c] - now
        if wait < best_wait:
            best, best_wait = c, wait
        q += 1
    return int(best)


@numba.njit(cache=True, inline="always")
def least_wait(
    release: I16Array,
    s: Index,
    elapsed: np.int16,
    ranks: RankArray,
    none: np.unsignedinteger[Any],
    order: I32Array,
    m: Index,
    width: int,
    finish: FloatArray,
    now: float,
) -> int:
    """A hot key's candidate (the first ``width`` of ``order[m]``) with the least estimated wait at
    source ``s``, ties to the earliest: the first not known busy (:func:`least_idle_rank`) when it is
    idle indeed (F ≤ now), else the scan of :func:`waiting_choice`. FISH's general path calls it; its
    inner loop has the same lines written out (with this call there, the kernel ran 12 % slower)."""
    q = least_idle_rank(release, s, elapsed, ranks, m, none)
    if q < width:
        w = np.uint64(order[m, np.uint64(q)])  # unsigned: no negative-index fix-up
        if finish[s, w] > now:  # released within the next two tuples only
            w = np.uint64(waiting_choice(order, m, width, finish, s, now))
    else:  # every candidate is busy
        w = np.uint64(waiting_choice(order, m, width, finish, s, now))
    return int(np.int64(w))  # signed, as the kernel's other choices (numba unifies int64 and uint64 to float)
