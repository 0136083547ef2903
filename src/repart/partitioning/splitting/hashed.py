"""Key grouping, shuffle grouping and Partial Key Grouping (PKG paper §2.1 and §3)."""

from __future__ import annotations

import numba
import numpy as np

from repart.partitioning.splitting.base import Grouping, IntArray, UIntArray, check_count
from repart.partitioning.splitting.hashes import choice, function_seeds


@numba.njit(cache=True, inline="always")
def pkg_pair(key_hash: np.uint64, seeds: UIntArray, n: int) -> tuple[int, int]:
    """PKG's two candidates H_1(k) ≠ H_2(k): a collision moves the second to the next worker.

    Storm 2.x's rule; with the Storm 1.x rule (collisions allowed) a key whose two hashes agree has
    one worker, which on its own breaks the p1/2 − 1/n bound for the hottest key.
    """
    first = choice(key_hash, seeds[0], n)
    second = choice(key_hash, seeds[1], n)
    if second == first and n > 1:
        second = (first + 1) % n
    return first, second


@numba.njit(cache=True)
def _kg_kernel(
    key_hashes: UIntArray, sources: IntArray, out: IntArray, loads: IntArray, seeds: UIntArray, n: int
) -> None:
    for i in range(key_hashes.size):
        w = choice(key_hashes[i], seeds[0], n)
        loads[sources[i], w] += 1
        out[i] = w


@numba.njit(cache=True)
def _sg_kernel(sources: IntArray, out: IntArray, loads: IntArray, sent: IntArray, n: int) -> None:
    for i in range(sources.size):
        s = sources[i]
        w = (s + sent[s]) % n
        sent[s] += 1
        loads[s, w] += 1
        out[i] = w


@numba.njit(cache=True)
def _pkg_kernel(
    key_hashes: UIntArray,
    sources: IntArray,
    out: IntArray,
    loads: IntArray,
    seeds: UIntArray,
    n: int,
    choices: int,
) -> None:
    for i in range(key_hashes.size):
        s = sources[i]
        k = key_hashes[i]
        first, second = pkg_pair(k, seeds, n)
        w = second if loads[s, second] < loads[s, first] else first
        for j in range(2, choices):
            c = choice(k, seeds[j], n)
            if loads[s, c] < loads[s, w]:
                w = c
        loads[s, w] += 1
        out[i] = w


class KeyGrouping(Grouping):
    """KG: every tuple of a key to ``H_1(k) mod n`` (hashing, the single-choice paradigm)."""

    scheme = "kg"

    def _route(self, key_hashes: UIntArray, sources: IntArray, out: IntArray) -> None:
        _kg_kernel(key_hashes, sources, out, self._loads, self._seeds, self.workers)

    def max_choices(self) -> int:
        return 1


class ShuffleGrouping(Grouping):
    """SG: per-source round robin; source s sends its j-th tuple to worker (s + j) mod n."""

    scheme = "sg"

    def __init__(self, workers: int, sources: int, *, seed: int = 0) -> None:
        super().__init__(workers, sources, seed=seed)
        self._sent = np.zeros(self.sources, dtype=np.int64)

    def _route(self, key_hashes: UIntArray, sources: IntArray, out: IntArray) -> None:
        _sg_kernel(sources, out, self._loads, self._sent, self.workers)

    def max_choices(self) -> int:
        return self.workers


class PartialKeyGrouping(Grouping):
    """PKG: the candidate of ``pkg_pair`` this source has sent fewer tuples to; ties to H_1 (§3).

    ``choices`` = d > 2 gives every key the Greedy-d process of §5 with candidates H_1 … H_d (the first
    two as ``pkg_pair``, the rest independent, collisions allowed): the PKG paper's Q4 / Fig. 9.
    """

    scheme = "pkg"

    def __init__(self, workers: int, sources: int, *, choices: int = 2, seed: int = 0) -> None:
        super().__init__(workers, sources, seed=seed)
        self.choices = check_count("choices (d)", choices, minimum=2)
        self._seeds = function_seeds(self.seed, max(2, self.choices))

    def _route(self, key_hashes: UIntArray, sources: IntArray, out: IntArray) -> None:
        _pkg_kernel(key_hashes, sources, out, self._loads, self._seeds, self.workers, self.choices)

    def max_choices(self) -> int:
        return min(self.choices, self.workers)
