"""Water-filling: the shares of one key, and weights that balance the channels against hand-computed
loads."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest

from repart.partitioning.split.weights import pour, water_fill


def test_pour_lifts_the_lowest_channels_to_one_level() -> None:
    # levels 1, 2, 4 and mass 2: the first two rise to 2.5, the third stays above
    assert pour(np.array([2.0, 4.0, 1.0]), 2.0).tolist() == [0.5, 0.0, 1.5]
    # enough mass lifts all three: level (9 + 7)/3
    assert pour(np.array([2.0, 4.0, 1.0]), 9.0) == pytest.approx([16 / 3 - 2, 16 / 3 - 4, 16 / 3 - 1])


def loads_after(
    base: Sequence[float], masses: Sequence[float], candidates: list[tuple[int, ...]]
) -> npt.NDArray[np.float64]:
    weights = water_fill(np.array(base), np.array(masses), candidates)
    loads = np.array(base, dtype=float)
    for mass, channels, shares in zip(masses, candidates, weights, strict=True):
        assert sum(shares) == pytest.approx(1.0, abs=1e-12)
        assert all(w >= 0 for w in shares) and len(shares) == len(channels)
        loads[list(channels)] += mass * np.array(shares)
    return loads


def test_two_overlapping_keys_balance_exactly_where_one_greedy_pass_does_not() -> None:
    # A = 3 on (0, 1), B = 3 on (1, 2): hottest first gives 1.5, 2.25, 2.25 (max/mean 1.125); the
    # optimum is 2, 2, 2 (A: 2/3 and 1/3, B: 1/3 and 2/3), which the refinement passes reach.
    weights = water_fill(np.zeros(3), np.array([3.0, 3.0]), [(0, 1), (1, 2)])
    assert weights[0] == pytest.approx((2 / 3, 1 / 3), abs=1e-9)
    assert weights[1] == pytest.approx((1 / 3, 2 / 3), abs=1e-9)
    loads = loads_after([0, 0, 0], [3, 3], [(0, 1), (1, 2)])
    assert loads.max() / loads.mean() == pytest.approx(1.0, abs=1e-9)


def test_a_channel_loaded_above_the_level_gets_nothing() -> None:
    # base 0, 0, 0, 6; A = 6 on (0, 1), B = 3 on (1, 2, 3): 3, 3, 3 and channel 3 keeps its 6,
    # max/mean = 6/3.75 = 1.6
    loads = loads_after([0, 0, 0, 6], [6, 3], [(0, 1), (1, 2, 3)])
    assert loads.tolist() == pytest.approx([3, 3, 3, 6])
    assert loads.max() / loads.mean() == pytest.approx(1.6)
    assert water_fill(np.array([0.0, 10.0]), np.array([1.0]), [(0, 1)]) == [(1.0, 0.0)]


def test_uneven_base_under_three_keys() -> None:
    # base 4, 1, 0, 2, 3 (total 10) and 10 more over overlapping candidates: level 4 everywhere
    # is reachable (deficits 0, 3, 4, 2, 1 = 10) only by sharing key A between channels 1 and 2.
    base, masses = [4, 1, 0, 2, 3], [5, 3, 2]
    candidates = [(1, 2), (2, 3, 0), (4, 3)]
    loads = loads_after(base, masses, candidates)
    assert loads == pytest.approx([4, 4, 4, 4, 4], abs=1e-9)
