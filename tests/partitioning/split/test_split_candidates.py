"""Each scheme's candidate rule: how many candidates, which ones (home first, distinct, in [0, N)), and
the rendezvous order's consistency when N grows."""

from __future__ import annotations

import math

import numpy as np
import pytest

from repart.partitioning.domain import SPLIT_SCHEMES
from repart.partitioning.groupings.ring import build_ring, walk
from repart.partitioning.hashing import hash_keys
from repart.partitioning.split.candidates import (
    candidate_lists,
    choice_counts,
    dkg_widths,
    fish_counts,
    rendezvous_order,
    split_choices,
)
from repart.partitioning.split.function import SplitEntry
from repart.partitioning.split.params import SplitParams

KEYS = [f"key-{i}" for i in range(12)]
HASHES = hash_keys(KEYS)
HEAD = np.array([0.3, 0.1, 0.05])


def holds(head: list[float], tail: float, n: int, d: int, epsilon: float) -> bool:
    """Proposition IV.1 with a key-preserving tail, written out term by term."""
    total = sum(head)
    for h in range(1, len(head) + 1):
        b = n - n * (1 - d / n) ** h
        prefix = sum(head[:h])
        left = prefix + (b / n) ** d * (total - prefix) + (b / n) * tail
        if left > b * (1 / n + epsilon):
            return False
    return True


@pytest.mark.parametrize(
    ("head", "n"),
    [([0.3, 0.1, 0.1], 10), ([0.0695, 0.0347, 0.0232, 0.0174], 24), ([0.2], 8), ([0.05, 0.05], 32)],
)
def test_split_choices_is_the_smallest_d_meeting_every_prefix(head: list[float], n: int) -> None:
    tail = 1 - sum(head)
    d = split_choices(np.array(head), tail, n, 1e-4)
    start = max(2, math.ceil(head[0] * n))
    assert start <= d <= n
    if d < n:
        assert holds(head, tail, n, d, 1e-4)
    assert not any(holds(head, tail, n, smaller, 1e-4) for smaller in range(start, d))


def test_one_head_key_over_a_key_preserving_tail_needs_every_channel() -> None:
    # p1 (1 − d/N) ≤ d·ε fails for every d < N: a lone hot key must cover all channels to balance.
    assert split_choices(np.array([0.2]), 0.8, 8, 1e-4) == 8


def test_counts_per_scheme() -> None:
    n = 8
    assert choice_counts(SplitParams("pkg"), HEAD, n)[0].tolist() == [2, 2, 2]
    assert choice_counts(SplitParams("wchoices"), HEAD, n)[0].tolist() == [8, 8, 8]
    assert choice_counts(SplitParams("rr"), HEAD, n)[0].tolist() == [8, 8, 8]
    counts, d = choice_counts(SplitParams("dchoices"), HEAD, n)
    assert d == split_choices(HEAD, 0.55, n, 1e-4) and counts.tolist() == [d] * 3
    assert choice_counts(SplitParams("pkg"), HEAD, n)[1] is None


def test_fish_counts_grow_with_frequency_above_the_hot_mass_floor() -> None:
    # floor = max(2, ⌈8·0.45/3⌉) = 2; ⌈4·8·f⌉ = 10 → 8 (N), 4, 2
    assert fish_counts(HEAD, 8, 4.0).tolist() == [8, 4, 2]
    # floor = max(2, ⌈8·0.9/3⌉) = 3 lifts the coldest key
    assert fish_counts(np.array([0.5, 0.3, 0.1]), 8, 1.0).tolist() == [4, 3, 3]


def test_dkg_widths_scale_out_until_below_l_s() -> None:
    # N = 4: L_s = 25 + 5 = 30 %; the rest spread evenly is 0.5/4 = 12.5 % per channel.
    # 0.4: w = 2 gives 32.5 % ≥ 30 %, w = 3 gives 25.8 %; 0.1: w = 2 gives 17.5 %.
    assert dkg_widths(np.array([0.4, 0.1]), 4).tolist() == [3, 2]
    # a key no width below N brings under L_s gets all N
    assert dkg_widths(np.array([0.9]), 4).tolist() == [4]


@pytest.mark.parametrize("scheme", SPLIT_SCHEMES)
def test_candidates_start_at_home_are_distinct_channels_and_as_many_as_counted(scheme: str) -> None:
    n = 8
    params = SplitParams(scheme)
    homes = np.array([i % n for i in range(len(KEYS))], dtype=np.int64)
    counts = np.array([2 + i % (n - 1) for i in range(len(KEYS))], dtype=np.int64)
    if scheme in ("pkg", "wchoices", "rr"):
        counts = np.full(len(KEYS), 2 if scheme == "pkg" else n, dtype=np.int64)
    lists = candidate_lists(params, homes, HASHES, counts, n)
    for home, count, candidates in zip(homes.tolist(), counts.tolist(), lists, strict=True):
        assert candidates[0] == home
        assert len(candidates) == count == len(set(candidates))
        assert all(0 <= c < n for c in candidates)
    if scheme == "dkg":
        rows = zip(homes.tolist(), counts.tolist(), lists, strict=True)
        assert all(c == tuple((h + j) % n for j in range(k)) for h, k, c in rows)
    if scheme in ("wchoices", "rr"):
        assert all(sorted(c) == list(range(n)) for c in lists)


def test_hash_choices_follow_the_rendezvous_order_and_nest() -> None:
    n = 16
    order = rendezvous_order(HASHES, n, seed=0)
    homes = order[:, 3]  # a home that is not the first choice
    params = SplitParams("dchoices")
    small = candidate_lists(params, homes, HASHES, np.full(len(KEYS), 3), n)
    large = candidate_lists(params, homes, HASHES, np.full(len(KEYS), 6), n)
    for row, home, few, many in zip(order.tolist(), homes.tolist(), small, large, strict=True):
        assert many[: len(few)] == few  # a larger d only adds channels
        assert list(many[1:]) == [c for c in row if c != home][:5]
    assert candidate_lists(SplitParams("pkg"), homes, HASHES, np.full(len(KEYS), 2), n) == [
        c[:2] for c in small
    ]


def test_the_rendezvous_order_is_consistent_when_n_grows() -> None:
    """Adding channel N only inserts N into each key's order: every other channel keeps its rank."""
    for n in (4, 9, 31):
        before = rendezvous_order(HASHES, n, seed=5)
        after = rendezvous_order(HASHES, n + 1, seed=5)
        for old, new in zip(before.tolist(), after.tolist(), strict=True):
            assert [c for c in new if c != n] == old
    assert not np.array_equal(rendezvous_order(HASHES, 8, seed=5), rendezvous_order(HASHES, 8, seed=6))


def test_fish_candidates_walk_the_ring_and_skip_the_home() -> None:
    n = 12
    params = SplitParams("fish", virtual_nodes=20, seed=4)
    positions, owners, buckets = build_ring(n, 20, 4)
    stamps = np.zeros(n + 1, dtype=np.int64)
    out = np.zeros((1, n), dtype=np.int32)
    homes = np.array([i % n for i in range(len(KEYS))], dtype=np.int64)
    lists = candidate_lists(params, homes, HASHES, np.full(len(KEYS), 4), n)
    for key, home, candidates in zip(HASHES.tolist(), homes.tolist(), lists, strict=True):
        walk(positions, owners, buckets, np.uint64(key), n, out, 0, stamps)  # every channel, clockwise
        assert candidates == (home, *[c for c in out[0].tolist() if c != home][:3])


def test_a_key_that_stays_split_keeps_the_candidates_that_hold_a_partial() -> None:
    n = 16
    one = HASHES[:1]
    order = rendezvous_order(one, n, 0)[0].tolist()
    home, far, farther, last = order[0], order[-1], order[-2], order[-3]
    params = SplitParams("dchoices")
    previous = SplitEntry((home, far, farther, last), (0.4, 0.3, 0.3, 0.0))
    (kept,) = candidate_lists(params, np.array([home]), one, np.array([4]), n, [previous])
    # the window's three fresh choices, plus the two that hold a partial; the empty one goes
    assert kept == (home, *(c for c in order if c in {*order[1:4], far, farther}))
    (narrow,) = candidate_lists(params, np.array([home]), one, np.array([2]), n, [previous])
    assert narrow == (home, *(c for c in order if c in {order[1], far, farther}))
    # a channel that is gone (N shrank) is not kept
    (shrunk,) = candidate_lists(params, np.array([order[0] % 4]), one, np.array([2]), 4, [previous])
    assert len(shrunk) >= 2 and all(c < 4 for c in shrunk)
    assert candidate_lists(params, np.array([home]), one, np.array([3]), n, [None]) == [tuple(order[:3])]
