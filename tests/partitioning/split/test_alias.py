"""Walker's alias table of a split key (``repart.partitioning.split.alias``): hand-computed tables, and
each candidate's exact share of all 2^64 row hashes, found through ``pick`` alone, against the integer
masses read directly off the weights."""

from __future__ import annotations

import math
from itertools import accumulate

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repart.partitioning.split.alias import BUCKET_SPAN, AliasTable, integer_masses

C = BUCKET_SPAN


def reference_masses(weights: list[float]) -> list[int]:
    """The masses of the module docstring, written out: t_j = round(D·C·s_j) capped at D·C, s_j the
    left-to-right sums of the weights, the last t being D·C, and m_j = t_j − t_{j−1}."""
    total = 2 ** math.ceil(math.log2(len(weights))) * C
    ends = [min(total, round(total * prefix)) for prefix in list(accumulate(weights))[:-1]] + [total]
    return [end - start for start, end in zip([0, *ends[:-1]], ends, strict=True)]


def bucket_switch(table: AliasTable, bucket: int) -> int:
    """The first u at which bucket ``bucket`` picks what it picks at u = 2^32 − 1, found by bisection
    on ``pick`` (a bucket holds at most two candidates, below and from its cut)."""
    top = bucket << (64 - table.bucket_bits)
    last = table.pick(top | (C - 1))
    low, high = 0, C - 1  # pick(top | high) == last
    while low < high:
        middle = (low + high) // 2
        if table.pick(top | middle) == last:
            high = middle
        else:
            low = middle + 1
    return low


def shares_by_pick(table: AliasTable, candidates: int) -> list[int]:
    """Each candidate's count of (bucket, u) pairs, i.e. of row hashes in units of 2^(32 − 64 + B)…
    counted through ``pick``: per bucket, [0, switch) goes to pick(u = 0) and the rest to the last pick;
    a few u on each side are checked to pick the same."""
    counts = [0] * candidates
    for bucket in range(1 << table.bucket_bits):
        top = bucket << (64 - table.bucket_bits)
        switch = bucket_switch(table, bucket)
        first, last = table.pick(top), table.pick(top | (C - 1))
        for u in (0, switch // 3, switch - 1):
            if 0 <= u < switch:
                assert table.pick(top | u) == first
        for u in (switch, (switch + C) // 2, C - 1):
            assert table.pick(top | u) == last
        counts[last] += C - switch
        if switch:
            counts[first] += switch
    return counts


def test_quarters_fill_whole_buckets() -> None:
    table = AliasTable.from_weights((0.5, 0.25, 0.25))  # masses 2C, C, C and a padding bucket of 0
    assert table == AliasTable(2, (C, 0, 0, 0), (0, 0, 1, 2))
    assert [table.pick(b << 62) for b in range(4)] == [0, 0, 1, 2]
    assert table.pick(2**64 - 1) == 2


def test_a_cut_splits_a_bucket_between_its_candidate_and_its_alias() -> None:
    table = AliasTable.from_weights((0.7, 0.3))  # masses round(1.4 C) and 2C minus it
    second = 2 * C - round(1.4 * C)
    assert table == AliasTable(1, (C, second), (0, 0))
    top = 1 << 63
    assert [table.pick(top | (second - 1)), table.pick(top | second), table.pick(C - 1)] == [1, 0, 0]


@settings(max_examples=150, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=10**6), min_size=2, max_size=33).filter(
        lambda raw: sum(raw) > 0
    )
)
def test_each_candidate_gets_exactly_its_integer_mass(raw: list[int]) -> None:
    weights = [w / sum(raw) for w in raw]
    if abs(math.fsum(weights) - 1) > 1e-9:
        return
    table = AliasTable.from_weights(weights)
    masses = reference_masses(weights)
    assert integer_masses(weights, sum(masses)) == masses
    assert table.bucket_bits == math.ceil(math.log2(len(weights)))
    assert shares_by_pick(table, len(weights)) == masses
    total = sum(masses)
    assert all(abs(m - w * total) <= 2 for m, w in zip(masses, weights, strict=True))
    for bucket, (cut, alias) in enumerate(zip(table.cuts, table.aliases, strict=True)):
        assert 0 <= cut <= C and alias < len(weights)  # an alias is always a real candidate
        if cut == C:
            assert alias == bucket
        if bucket >= len(weights):  # padding: never picked on its own
            assert cut == 0


def test_zero_and_tiny_weights() -> None:
    table = AliasTable.from_weights((0.5, 0.0, 0.5, 0.0))
    assert shares_by_pick(table, 4) == [2 * C, 0, 2 * C, 0]
    assert integer_masses((1 - 1e-12, 1e-12), 2 * C) == [2 * C, 0]
    # prefix sums past 1 (weights may sum to 1 + 10^-9): t stops at the total, no mass is negative
    assert integer_masses((0.6 + 5e-10, 0.4 + 4e-10, 0.0), 4 * C) == [
        round(4 * C * (0.6 + 5e-10)),
        4 * C - round(4 * C * (0.6 + 5e-10)),
        0,
    ]
    assert shares_by_pick(AliasTable.from_weights((1 - 1e-12, 1e-12)), 2) == [2 * C, 0]


@pytest.mark.parametrize("candidates", [2, 3, 4, 5, 8, 9, 32])
def test_equal_weights_give_every_candidate_an_equal_share(candidates: int) -> None:
    table = AliasTable.from_weights([1 / candidates] * candidates)
    shares = shares_by_pick(table, candidates)
    assert max(shares) - min(shares) <= 1 and sum(shares) == (1 << table.bucket_bits) * C
