"""The PKG paper's key-preserving baselines (§6.2, Q1): PoTC, On-Greedy and Off-Greedy.

Each keeps one routing table shared by all sources (the coordination PKG avoids) and balances the
*global* load, as the paper's baselines do.
"""

from __future__ import annotations

import numba
import numpy as np
import numpy.typing as npt

from repart.errors import InvalidInput
from repart.partitioning.groupings.base import Grouping, IntArray, UIntArray
from repart.partitioning.groupings.hashed import pkg_pair
from repart.partitioning.groupings.hashes import seed_base
from repart.partitioning.groupings.keytable import KeyTable, append, find_or_slot

_POTC = 0
_ON_GREEDY = 1


@numba.njit(cache=True)
def _least_loaded(total: IntArray) -> int:
    best = 0
    for w in range(1, total.size):
        if total[w] < total[best]:
            best = w
    return best


@numba.njit(cache=True)
def _sticky_kernel(
    key_hashes: UIntArray,
    sources: IntArray,
    out: IntArray,
    start: int,
    rule: int,
    index: IntArray,
    keys: UIntArray,
    owners: IntArray,
    size: IntArray,
    assigned: IntArray,
    loads: IntArray,
    total: IntArray,
    seeds: UIntArray,
    base: np.uint64,
    n: int,
) -> int:
    """Route from ``start``; a new key is placed once by ``rule`` and sticks. Returns where it stopped."""
    for i in range(start, key_hashes.size):
        k = key_hashes[i]
        e = find_or_slot(index, keys, owners, k, 0)
        if e < 0:
            if size[0] == keys.size:
                return i
            if rule == _POTC:
                first, second = pkg_pair(k, seeds, base, n)
                w = second if total[second] < total[first] else first
            else:
                w = _least_loaded(total)
            e = append(index, keys, owners, size, -e - 1, k, 0)
            assigned[e] = w
        w = assigned[e]
        loads[sources[i], w] += 1
        total[w] += 1
        out[i] = w
    return key_hashes.size


@numba.njit(cache=True)
def _table_kernel(
    key_hashes: UIntArray,
    sources: IntArray,
    out: IntArray,
    index: IntArray,
    keys: UIntArray,
    owners: IntArray,
    assigned: IntArray,
    loads: IntArray,
) -> int:
    """Route by a complete table; returns the position of the first unknown key, or the length."""
    for i in range(key_hashes.size):
        e = find_or_slot(index, keys, owners, key_hashes[i], 0)
        if e < 0:
            return i
        w = assigned[e]
        loads[sources[i], w] += 1
        out[i] = w
    return key_hashes.size


class _StickyGrouping(Grouping):
    _rule: int

    def __init__(self, workers: int, sources: int, *, seed: int = 0) -> None:
        super().__init__(workers, sources, seed=seed)
        self._table = KeyTable({"worker": ((), np.int64, -1)})
        self._total = np.zeros(self.workers, dtype=np.int64)

    def _route(self, key_hashes: UIntArray, sources: IntArray, out: IntArray) -> None:
        done, t = 0, self._table
        while done < key_hashes.size:
            if t.full:
                t.grow()
            done = _sticky_kernel(
                key_hashes,
                sources,
                out,
                done,
                self._rule,
                t.index,
                t.keys,
                t.owners,
                t.size,
                t.columns["worker"],
                self._loads,
                self._total,
                self._seeds,
                seed_base(self.seed),
                self.workers,
            )

    def assignment(self) -> dict[int, int]:
        """Key hash → the worker the key sticks to."""
        t = self._table
        return dict(zip(t.keys[: t.count].tolist(), t.columns["worker"][: t.count].tolist(), strict=True))

    def max_choices(self) -> int:
        return 1


class PowerOfTwoChoices(_StickyGrouping):
    """Static PoTC: a new key sticks to the globally less loaded of its two PKG candidates (ties to H_1)."""

    scheme = "potc"
    _rule = _POTC


class OnlineGreedy(_StickyGrouping):
    """On-Greedy: a new key sticks to the globally least loaded worker (ties to the lowest id)."""

    scheme = "on-greedy"
    _rule = _ON_GREEDY


class OfflineGreedy(Grouping):
    """Off-Greedy: knowing the whole stream, keys in decreasing frequency go to the least loaded worker.

    ``key_hashes``/``counts`` describe the whole stream (every key it will route, with its number of
    tuples); ties in frequency go to the smaller key hash, ties in load to the lowest worker id. Routing a
    key it was not given is an error.
    """

    scheme = "off-greedy"

    def __init__(
        self, workers: int, sources: int, *, key_hashes: UIntArray, counts: npt.ArrayLike, seed: int = 0
    ) -> None:
        super().__init__(workers, sources, seed=seed)
        hashes, weights = _check_frequencies(key_hashes, counts)
        order = np.lexsort((hashes, -weights))
        table = KeyTable({"worker": ((), np.int64, -1)}, capacity=max(1, hashes.size))
        placed = _longest_first(hashes[order], weights[order], self.workers)
        for key, worker in zip(hashes[order].tolist(), placed.tolist(), strict=True):
            e = find_or_slot(table.index, table.keys, table.owners, np.uint64(key), 0)
            e = append(table.index, table.keys, table.owners, table.size, -e - 1, np.uint64(key), 0)
            table.columns["worker"][e] = worker
        self._table = table

    def _route(self, key_hashes: UIntArray, sources: IntArray, out: IntArray) -> None:
        t = self._table
        known = np.isin(key_hashes, t.keys[: t.count])
        if not known.all():
            raise InvalidInput("key_hashes", "must hold only the keys off-greedy was built with, got another")
        _table_kernel(key_hashes, sources, out, t.index, t.keys, t.owners, t.columns["worker"], self._loads)

    def max_choices(self) -> int:
        return 1


@numba.njit(cache=True)
def _longest_first(keys: UIntArray, weights: IntArray, n: int) -> IntArray:
    total = np.zeros(n, dtype=np.int64)
    placed = np.empty(keys.size, dtype=np.int64)
    for i in range(keys.size):
        w = _least_loaded(total)
        total[w] += weights[i]
        placed[i] = w
    return placed


def _check_frequencies(key_hashes: object, counts: npt.ArrayLike) -> tuple[UIntArray, IntArray]:
    """Off-greedy's stream keys (distinct uint64 hashes) and their counts (integers >= 1)."""
    if not isinstance(key_hashes, np.ndarray) or key_hashes.dtype != np.uint64 or key_hashes.ndim != 1:
        raise InvalidInput("key_hashes", "must be a one-dimensional uint64 array (the stream's key hashes)")
    weights = np.asarray(counts)
    if weights.shape != key_hashes.shape or (weights.size and weights.dtype.kind not in "iu"):
        raise InvalidInput(
            "counts",
            f"must be integers, one per key hash ({key_hashes.size}), got dtype {weights.dtype}"
            f" and shape {weights.shape}",
        )
    weights = weights.astype(np.int64)
    if weights.size and weights.min() < 1:
        raise InvalidInput("counts", f"must be integers >= 1, got {weights.min()}")
    if np.unique(key_hashes).size != key_hashes.size:
        raise InvalidInput("key_hashes", "must be distinct, got a hash twice")
    return key_hashes, weights
