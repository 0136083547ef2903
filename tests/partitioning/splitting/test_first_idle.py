"""FISH's least-wait choice: ``first_idle`` (then ``waiting_choice``) against a plain scan of every wait."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from repart.partitioning.splitting.fish import first_idle, waiting_choice


def oracle(order: list[int], width: int, finish: list[float], now: float) -> int:
    """The candidate with the least wait max(0, F − now), ties to the earliest (FISH §4.2)."""
    return order[min(range(width), key=lambda q: (max(0.0, finish[order[q]] - now), q))]


@settings(max_examples=80, deadline=None)
@given(
    st.integers(1, 40),
    st.integers(0, 2**32),
    st.sampled_from([0.01, 0.2, 1.0]),
    st.sampled_from([0.5, 3.0, 20.0]),
)
def test_first_idle_and_waiting_choice_pick_the_least_wait(
    n: int, seed: int, step: float, cost: float
) -> None:
    rng = np.random.default_rng(seed)
    order = rng.permutation(n).astype(np.int32).reshape(1, n)
    finish = np.zeros((1, n))
    resume = np.zeros(1, dtype=np.int64)
    bound = np.zeros(1, dtype=np.float64)
    width, now = 1, 0.0
    for _ in range(300):
        now += step * float(rng.random())
        if rng.random() < 0.05:
            width = min(n, width + int(rng.integers(1, 4)))  # M[k] only grows
        expected = oracle(order[0].tolist(), width, finish[0].tolist(), now)
        assert waiting_choice(order, 0, width, finish, 0, now) == expected
        chosen = first_idle(order, 0, width, finish, 0, now, resume, bound)
        assert chosen in (expected, -1)
        assert chosen == expected or all(finish[0, order[0, q]] > now for q in range(width))
        finish[0, expected] = max(finish[0, expected], now) + cost
