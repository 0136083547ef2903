"""FISH's least-wait choice (``idle.py``): release indices, the idle-rank pass and the fallback scan,
against plain definitions (the candidate with the least wait max(0, F − now), ties to the earliest)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from repart.partitioning.groupings import Fish
from repart.partitioning.groupings.idle import (
    BUSY,
    LATEST,
    REBASE_AFTER,
    earliest_release,
    least_idle_rank,
    least_wait,
    padded,
    rank_dtype,
    rebase,
    relative,
    release_index,
    waiting_choice,
)
from tests.partitioning.groupings import reference as ref
from tests.partitioning.groupings.reference import first_tuple


def oracle(order: list[int], width: int, finish: list[float], now: float) -> int:
    """The candidate with the least wait max(0, F − now), ties to the earliest (FISH §4.2)."""
    return order[min(range(width), key=lambda q: (max(0.0, finish[order[q]] - now), q))]


@settings(max_examples=200, deadline=None)
@given(
    st.floats(0.01, 1000.0),
    st.integers(0, 10**9),
    st.floats(0.0, 1.0),
    st.sampled_from([0.0, 1e-12, -1e-12, 0.5]),
)
def test_release_index_is_the_first_tuple_at_or_after_the_finish(
    rate: float, whole: int, part: float, nudge: float
) -> None:
    finish = max(0.0, (whole + part + nudge) / rate)  # near a tuple's arrival time, where rounding decides
    exact = first_tuple(finish, rate)
    assert release_index(finish, rate) == exact
    assert exact - 2 <= earliest_release(finish, rate) <= exact  # the bound the kernel stores


def test_release_index_of_aligned_finishes_and_of_the_far_future() -> None:
    """With λ = 90 and a cost of 5 every finish is t/λ + 450 up to rounding, on either side of a tuple."""
    rate = 90.0
    for t in range(1000, 1400):
        finish = t / rate + 5.0
        assert release_index(finish, rate) == first_tuple(finish, rate)
        assert first_tuple(finish, rate) - 2 <= earliest_release(finish, rate) <= first_tuple(finish, rate)
    assert release_index(1e300, rate) == earliest_release(1e300, rate) == LATEST
    # F an ulp above a tuple boundary: the bound is two below (a second reader's example)
    assert earliest_release(30708.86666666667, rate) == release_index(30708.86666666667, rate) - 2


def test_relative_indices_saturate_on_the_safe_side() -> None:
    assert relative(5, 3) == 2
    assert relative(10**9, 0) == BUSY  # released after any tuple before the next rebase
    assert relative(0, 10**9) == -(2**15)  # released before the base


def test_a_worker_released_at_the_next_tuple_only_is_checked_and_passed_over() -> None:
    """Worker 0 is busy until just after tuple t arrives: its bound says t, one early. The pass
    offers it (rank 0), the check F ≤ now refuses it, and the scan finds worker 1, idle."""
    rate, t = 90.0, 1000
    finish = np.array([[(t + 0.5) / rate, 0.0]])
    release = np.full((1, padded(2)), BUSY, dtype=np.int16)
    release[0, :2] = [relative(earliest_release(f, rate), 0) for f in finish[0]]
    assert release[0, 0] == t == release_index(finish[0, 0], rate) - 1
    order = np.array([[0, 1]], dtype=np.int32)
    ranks = np.full((1, padded(2)), 2, dtype=rank_dtype(2))
    ranks[0, :2] = [0, 1]
    q = least_idle_rank(release, 0, np.int16(t), ranks, 0, ranks.dtype.type(2))
    assert q == 0 and finish[0, order[0, q]] > t / rate
    assert (
        waiting_choice(order, 0, 2, finish, 0, t / rate)
        == 1
        == oracle([0, 1], 2, finish[0].tolist(), t / rate)
    )


@settings(max_examples=60, deadline=None)
@given(
    st.integers(1, 130),
    st.integers(0, 2**32),
    st.sampled_from([0.5, 3.0, 40.0]),
    st.sampled_from([0.9, 5.0]),
)
def test_idle_ranks_with_rebases_pick_the_least_wait(n: int, seed: int, cost: float, rate: float) -> None:
    """Random hot keys' orders and widths over a source's workers, sent to by the kernel's choice
    (``least_wait``), with the relative bounds kept as the kernel keeps them (rebasing every
    ``REBASE_AFTER``): always the oracle's least wait."""
    rng = np.random.default_rng(seed)
    keys = 3
    order = np.zeros((keys, n), dtype=np.int32)
    ranks = np.full((keys, padded(n)), n, dtype=rank_dtype(n))
    for m in range(keys):
        order[m] = rng.permutation(n)
        ranks[m, order[m]] = np.arange(n)
    widths = rng.integers(1, n + 1, keys)
    finish = np.zeros((1, n))
    release = np.full((1, padded(n)), BUSY, dtype=np.int16)
    release[0, :n] = 0
    base = np.zeros(1, dtype=np.int64)
    t = 0
    for _ in range(400):
        t += int(rng.integers(1, REBASE_AFTER // 3))  # other sources' tuples in between
        now = t / rate
        if t - base[0] >= REBASE_AFTER:
            rebase(release, finish, base, 0, t, rate)
        m = int(rng.integers(keys))
        width = int(widths[m])
        expected = oracle(order[m].tolist(), width, finish[0].tolist(), now)
        elapsed = np.int16(t - base[0])
        chosen = least_wait(release, 0, elapsed, ranks, ranks.dtype.type(n), order, m, width, finish, now)
        assert chosen == expected
        finish[0, chosen] = max(finish[0, chosen], now) + cost * float(rng.random()) * REBASE_AFTER / rate
        release[0, chosen] = relative(earliest_release(finish[0, chosen], rate), int(base[0]))


def test_fish_with_two_byte_ranks_and_full_summaries_equals_its_reference() -> None:
    """n = 300 (ranks of two bytes) and a summary of 16 entries (it fills, evicts and decays its
    errors), fed in chunks: as the reference. (Rebases: the test above, and the 30,000-tuple FISH
    test in test_groupings.py.)"""
    rng = np.random.default_rng(7)
    keys = rng.zipf(1.3, 2_500).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    sources = rng.integers(0, 2, keys.size)
    params = dict(
        rates=[1.0, 3.0] * 150, arrival_rate=500.0, theta=0.05, epoch=40, capacity=16, virtual_nodes=3
    )
    grouping = Fish(300, 2, seed=4, **params)  # type: ignore[arg-type]
    parts = [grouping.route(keys[a:b], sources[a:b]) for a, b in [(0, 17), (17, 1_000), (1_000, keys.size)]]
    reference = ref.FISH(300, 2, 4, decay=0.8, spread=4.0, tail_choices=1, **params)  # type: ignore[arg-type]
    assert np.concatenate(parts).tolist() == reference.route([int(k) for k in keys], sources.tolist())
    assert grouping.loads.tolist() == reference.loads
    for s in range(2):
        assert grouping.summary(s) == sorted(
            ((int(k), c, e) for k, c, e in reference.ss[s].slots),
            key=lambda entry: (-entry[1], reference.ss[s].where[entry[0]]),
        )


def test_a_key_is_walked_on_the_ring_as_far_as_its_count_grows() -> None:
    """A key hot with M[k] = 7 that becomes dominant (M[k] = n = 20): its ring order, walked only as
    far as its count at first, is walked further, and the routing stays the reference's."""
    hot = np.uint64(0x1234567)
    others = np.arange(1, 9, dtype=np.uint64) * np.uint64(0x9E3779B97F4A7C15)
    rng = np.random.default_rng(0)
    first = np.where(rng.random(200) < 0.25, hot, others[rng.integers(0, 8, 200)])
    then = np.where(rng.random(400) < 0.9, hot, others[rng.integers(0, 8, 400)])
    keys = np.concatenate([first, then]).astype(np.uint64)
    sources = np.zeros(keys.size, dtype=np.int64)
    params = dict(
        rates=[1.0] * 20, arrival_rate=18.0, theta=0.1, epoch=10, spread=1.0, capacity=8, virtual_nodes=5
    )
    grouping = Fish(20, 1, seed=3, **params)  # type: ignore[arg-type]
    table = grouping._table
    before = grouping.route(keys[:200], sources[:200])
    entry = int(table.entries(0)[table.keys[table.entries(0)] == hot][0])
    assert grouping.widths(0)[int(hot)] == 7
    assert table.columns["ordered"][entry] == 7  # walked as far as its count
    after = grouping.route(keys[200:], sources[200:])
    assert grouping.widths(0)[int(hot)] == 20
    assert table.columns["ordered"][entry] == 20
    reference = ref.FISH(20, 1, 3, decay=0.8, tail_choices=1, **params)  # type: ignore[arg-type]
    assert np.concatenate([before, after]).tolist() == reference.route(
        [int(k) for k in keys], sources.tolist()
    )
