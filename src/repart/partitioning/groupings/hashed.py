"""Key grouping, shuffle grouping and Partial Key Grouping (PKG paper §2.1 and §3)."""

from __future__ import annotations

import numba
import numpy as np

from repart.partitioning.groupings.base import Grouping, IntArray, UIntArray, check_count
from repart.partitioning.groupings.hashes import choice, function_seed, function_seeds, seed_base


@numba.njit(cache=True, inline="always")
def seed_of(seeds: UIntArray, base: np.uint64, j: int) -> np.uint64:
    """``seed_j``: kept for the first functions, computed for the rest."""
    return seeds[j] if j < seeds.size else function_seed(base, j)


@numba.njit(cache=True, inline="always")
def pkg_pair(key_hash: np.uint64, seeds: UIntArray, base: np.uint64, n: int) -> tuple[int, int]:
    """PKG's two candidates: the first two distinct workers among H_1(k), H_2(k), ….

    Storm 2.x also makes them distinct (it moves a colliding second to the next worker); with Storm
    1.x's collisions a key whose two hashes agree has one worker, which on its own breaks the
    p1/2 − 1/n bound for the hottest key. "The first d distinct" is also D-Choices' rule, so a head
    key's candidates extend its PKG pair.
    """
    first = choice(key_hash, seeds[0], n)
    second = choice(key_hash, seeds[1], n)
    j = 2
    while second == first and n > 1:
        second = choice(key_hash, seed_of(seeds, base, j), n)
        j += 1
    return first, second


@numba.njit(cache=True, inline="always")
def pkg_choice(
    loads: IntArray, s: int, key_hash: np.uint64, seeds: UIntArray, base: np.uint64, n: int
) -> int:
    """PKG's decision (§3): the candidate of ``pkg_pair`` source ``s`` sent fewer tuples to; ties to H_1."""
    first, second = pkg_pair(key_hash, seeds, base, n)
    return second if loads[s, second] < loads[s, first] else first


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
    base: np.uint64,
    n: int,
    choices: int,
    scratch: IntArray,
) -> None:
    for i in range(key_hashes.size):
        s = sources[i]
        k = key_hashes[i]
        if choices == 2:
            w = pkg_choice(loads, s, k, seeds, base, n)
        else:  # Greedy-d over the first d distinct workers among H_1(k), H_2(k), … (ties to the earliest)
            w = -1
            found = 0
            j = 0
            while found < min(choices, n):
                c = choice(k, seed_of(seeds, base, j), n)
                j += 1
                new = True
                for q in range(found):
                    if scratch[q] == c:
                        new = False
                        break
                if new:
                    scratch[found] = c
                    found += 1
                    if w < 0 or loads[s, c] < loads[s, w]:
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

    ``choices`` = d > 2 gives every key the Greedy-d process of §5 over its first d distinct workers
    among H_1(k), H_2(k), … (the PKG paper's Q4, Fig. 9).
    """

    scheme = "pkg"

    def __init__(self, workers: int, sources: int, *, choices: int = 2, seed: int = 0) -> None:
        super().__init__(workers, sources, seed=seed)
        self.choices = check_count("choices", choices, minimum=2)
        self._seeds = function_seeds(self.seed, 2 * self.choices)
        self._scratch = np.zeros(self.choices, dtype=np.int64)

    def _route(self, key_hashes: UIntArray, sources: IntArray, out: IntArray) -> None:
        _pkg_kernel(
            key_hashes,
            sources,
            out,
            self._loads,
            self._seeds,
            seed_base(self.seed),
            self.workers,
            self.choices,
            self._scratch,
        )

    def max_choices(self) -> int:
        return min(self.choices, self.workers)
