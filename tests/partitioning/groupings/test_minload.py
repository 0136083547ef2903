"""The load-level bitsets of ``minload`` against loads kept in a plain list."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from repart.partitioning.groupings.minload import (
    MAX_LEVELS,
    add_tuple,
    least_loaded,
    least_loaded_of,
    level_sets,
    raise_minimum,
    words,
)


def oracle_least(loads: list[int], candidates: list[int]) -> int:
    """The candidate with the smallest load, ties to the lowest id."""
    return min(candidates, key=lambda w: (loads[w], w))


@st.composite
def increments(draw: st.DrawFn) -> tuple[int, int, list[tuple[int, int]], int]:
    """n, K, then (worker, how many tuples in a row) pairs: long runs push workers past the levels."""
    n = draw(st.sampled_from([1, 3, 64, 65, 130]))
    levels = draw(st.sampled_from([2, 4, MAX_LEVELS]))
    runs = draw(st.lists(st.tuples(st.integers(0, n - 1), st.integers(1, 1500)), min_size=1, max_size=12))
    return n, levels, runs, draw(st.integers(0, 2**32))


@settings(max_examples=60, deadline=None)
@given(increments())
def test_levels_find_the_least_loaded_worker_and_candidate(
    case: tuple[int, int, list[tuple[int, int]], int],
) -> None:
    n, count, runs, seed = case
    rng = np.random.default_rng(seed)
    loads = np.zeros((1, n), dtype=np.int64)
    minimum = np.zeros(1, dtype=np.int64)
    levels = level_sets(1, n, count)
    plain = [0] * n
    masks = np.zeros((1, 1, words(n)), dtype=np.uint64)
    for worker, repeat in runs:
        for _ in range(repeat):
            if add_tuple(loads, minimum, levels, 0, worker):
                raise_minimum(loads, minimum, levels, 0)
            plain[worker] += 1
        low = min(plain)
        assert loads[0].tolist() == plain
        assert minimum[0] == low
        for w in range(n):  # each worker sits in exactly one row: its level's, or the overflow
            row = plain[w] % count if plain[w] - low < count else count
            bit = np.uint64(1) << np.uint64(w % 64)
            holding = [r for r in range(count + 1) if levels[0, r, w // 64] & bit]
            assert holding == [row]
        assert least_loaded(levels, minimum, 0) == oracle_least(plain, list(range(n)))
        candidates = sorted(set(rng.integers(0, n, size=int(rng.integers(1, n + 1))).tolist()))
        masks[:] = 0
        for w in candidates:
            masks[0, 0, w // 64] |= np.uint64(1) << np.uint64(w % 64)
        best = oracle_least(plain, candidates)
        floor = int(rng.integers(low, plain[best] + 1))  # any load no candidate is below
        expected = best if plain[best] - low < count else -1
        assert least_loaded_of(levels, minimum, 0, masks, 0, floor) == expected


def test_the_levels_shrink_to_fit_many_sources_and_workers() -> None:
    assert level_sets(5, 100).shape == (5, MAX_LEVELS + 1, 2)
    assert level_sets(100, 100_000).shape == (100, 4 + 1, 1563)  # 4 rows of 1,563 words fit the budget
