"""The skew-aware state partition count against a brute-force oracle (a dict of loads per count)."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repart.controller.state_count import DominantKey, choose_state_count
from repart.errors import InvalidInput

HASHES = st.integers(-(2**31), 2**31 - 1)


def oracle(
    hashes: list[int], counts: list[int], tail: int, n: int, low: int, high: int, tolerance: float
) -> tuple[int, list[int], dict[int, float]]:
    """Every m in range, each hot key's load summed into a dict keyed by Java's pmod, plus tail / m;
    the lowest maximum, then the count closest to n, then the smaller."""
    candidates = [
        m for m in range(low, high + 1) if (1 - tolerance) * n - 1e-9 <= m <= (1 + tolerance) * n + 1e-9
    ]
    max_loads: dict[int, float] = {}
    for m in candidates:
        loads: dict[int, int] = {}
        for h, c in zip(hashes, counts, strict=True):
            partition = (h % m + m) % m
            loads[partition] = loads.get(partition, 0) + c
        max_loads[m] = max(loads.values(), default=0) + tail / m
    chosen = min(candidates, key=lambda m: (max_loads[m], abs(m - n), m))
    return chosen, candidates, max_loads


@settings(max_examples=150, deadline=None)
@given(
    data=st.data(),
    keys=st.integers(0, 40),
    tail=st.integers(0, 10_000),
    n=st.integers(1, 60),
    tolerance=st.sampled_from([0.0, 0.05, 0.1, 0.25, 0.5]),
)
def test_choice_equals_the_brute_force_oracle(
    data: st.DataObject, keys: int, tail: int, n: int, tolerance: float
) -> None:
    hashes = data.draw(st.lists(HASHES, min_size=keys, max_size=keys))
    counts = data.draw(st.lists(st.integers(0, 5_000), min_size=keys, max_size=keys))
    low = data.draw(st.integers(1, n))
    high = data.draw(st.integers(n, 80))
    choice = choose_state_count(np.array(hashes, dtype=np.int32), counts, tail, n, low, high, tolerance)
    chosen, candidates, max_loads = oracle(hashes, counts, tail, n, low, high, tolerance)
    assert choice.chosen == chosen
    assert choice.rule == n
    assert list(choice.candidates) == candidates
    assert n in choice.candidates
    assert list(choice.candidate_max_loads) == [max_loads[m] for m in candidates]
    total = sum(counts) + tail
    assert choice.total == total
    assert choice.chosen_max_load == max_loads[chosen]
    assert choice.rule_max_load == max_loads[n]
    assert choice.chosen_max_load <= choice.rule_max_load
    assert choice.chosen_b == (pytest.approx(max_loads[chosen] * chosen / total) if total else 1.0)
    assert choice.rule_b == (pytest.approx(max_loads[n] * n / total) if total else 1.0)
    largest = max(counts, default=0)
    if keys and largest > total / chosen:
        assert choice.dominant_key == DominantKey(counts.index(largest), largest, largest / total)
    else:
        assert choice.dominant_key is None


def test_two_hot_keys_on_one_partition_are_separated() -> None:
    """Hashes 0 and 10 share partition 0 at 10 (and 5) but not at 9 or 11: the skew-aware count moves
    off 10, to 9 (as low a maximum as 11 but the tie goes to the smaller)."""
    choice = choose_state_count([0, 10], [100, 100], 0, 10, 1, 100)
    assert choice.candidates == (9, 10, 11)
    assert choice.candidate_max_loads == (100.0, 200.0, 100.0)
    assert (choice.chosen, choice.chosen_max_load, choice.rule_max_load) == (9, 100.0, 200.0)
    assert choice.rule_b == pytest.approx(200 * 10 / 200) and choice.chosen_b == pytest.approx(100 * 9 / 200)


def test_ties_go_to_the_count_closest_to_the_rule_then_the_smaller() -> None:
    # No hot keys, no tail: every candidate predicts 0, so the rule's own count wins.
    assert choose_state_count([], [], 0, 20, 1, 100).chosen == 20
    # 0 and 420 = 20·21 share partition 0 at 20 and 21 only: 18, 19 and 22 tie, 19 is closest to 20.
    choice = choose_state_count([0, 420, 1], [5, 5, 5], 0, 20, 1, 100)
    assert dict(zip(choice.candidates, choice.candidate_max_loads, strict=True)) == {
        18: 5.0,
        19: 5.0,
        20: 10.0,
        21: 10.0,
        22: 5.0,
    }
    assert choice.chosen == 19
    # 0 and 20 share a partition at 20 only: 19 and 21 tie, one away each, and the smaller wins.
    choice = choose_state_count([0, 20], [5, 5], 0, 20, 19, 21)
    assert choice.candidate_max_loads == (5.0, 10.0, 5.0) and choice.chosen == 19
    # 380 = 19·20 shares at 19 and 20, 420 = 20·21 at 20 and 21: the one count left wins.
    assert choose_state_count([0, 380], [5, 5], 0, 20, 19, 21).chosen == 21
    assert choose_state_count([0, 420], [5, 5], 0, 20, 19, 21).chosen == 19


def test_the_tail_favours_more_partitions_when_hot_keys_do_not_decide() -> None:
    choice = choose_state_count([7], [1], 1000, 10, 1, 100)
    assert choice.chosen == 11 and choice.chosen_max_load == pytest.approx(1 + 1000 / 11)


def test_a_dominant_key_is_reported() -> None:
    """A key of 600 in a total of 1000 exceeds total / m at every count: no count helps."""
    choice = choose_state_count([3, 5, 8], [100, 600, 100], 200, 10, 1, 100)
    assert choice.dominant_key == DominantKey(index=1, count=600.0, share=0.6)
    document = choice.to_document()
    assert document["dominant_key"] == {"index": 1, "count": 600.0, "share": 0.6}
    # Just at the mean is not over it: 100 of 1000 at m = 10.
    assert choose_state_count([1], [100], 900, 10, 10, 10).dominant_key is None
    assert choose_state_count([1], [101], 899, 10, 10, 10).dominant_key == DominantKey(0, 101.0, 0.101)


def test_document_is_json_ready() -> None:
    """Hashes 0 and 10 share a partition at 10 only; the tail's share is smallest at 11. Each key's 100
    is over the mean 250 / 11, so the first is reported."""
    choice = choose_state_count(np.array([0, 10], dtype=np.int32), np.array([100, 100]), 50, 10, 1, 100)
    document = choice.to_document()
    assert json.loads(json.dumps(document)) == document
    assert document == {
        "chosen": 11,
        "rule": 10,
        "chosen_max_load": 100 + 50 / 11,
        "rule_max_load": 200 + 50 / 10,
        "chosen_b": (100 + 50 / 11) * 11 / 250,
        "rule_b": (200 + 50 / 10) * 10 / 250,
        "candidates": [9, 10, 11],
        "candidate_max_loads": [100 + 50 / 9, 205.0, 100 + 50 / 11],
        "total": 250.0,
        "dominant_key": {"index": 0, "count": 100.0, "share": 0.4},
    }


@pytest.mark.parametrize(
    ("n", "tolerance", "low", "high", "expected"),
    [
        (10, 0.1, 1, 100, [9, 10, 11]),
        (30, 0.1, 1, 100, list(range(27, 34))),
        (64, 0.1, 1, 100, list(range(58, 71))),
        (64, 0.1, 60, 66, list(range(60, 67))),
        (5, 0.1, 1, 100, [5]),
        (1, 0.0, 1, 1, [1]),
        (8, 0.1, 1, 100, [8]),
        (10, 0.7, 1, 100, list(range(3, 18))),
        (20, 0.35, 1, 100, list(range(13, 28))),
    ],
)
def test_candidates(n: int, tolerance: float, low: int, high: int, expected: list[int]) -> None:
    """The bounds are exact for the decimal tolerance: 0.7 of 10 admits 3 although (1 - 0.7) * 10 is
    3.0000000000000004 in floats, and 0.35 of 20 admits 13 and 27 (0.65 * 20 and 1.35 * 20 exactly)."""
    assert list(choose_state_count([], [], 0, n, low, high, tolerance).candidates) == expected


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (
            {"hot_counts": [1, -1]},
            r"^hot_counts must be finite numbers >= 0, got a negative, NaN or infinite one$",
        ),
        ({"hot_counts": [1, float("nan")]}, r"^hot_counts must be finite numbers >= 0"),
        ({"hot_counts": [1]}, r"^hot_counts must have one count per hot hash \(2\), got 1$"),
        ({"hot_counts": ["a", "b"]}, r"^hot_counts must be a 1-d array of numbers >= 0, got dtype <U1"),
        (
            {"hot_hashes": [2**31, 0]},
            r"^hot_hashes must be a 1-d array of Spark hashes \(integers in \[-2147483648, 2147483647\]\), "
            r"got values in \[0, 2147483648\]$",
        ),
        ({"hot_hashes": [0.5, 1.0]}, r"^hot_hashes must be a 1-d array of Spark hashes .*got dtype float64"),
        ({"hot_hashes": [[0, 1]]}, r"^hot_hashes must be a 1-d array of Spark hashes .*shape \(1, 2\)$"),
        ({"tail": -1}, r"^tail must be a number in \[0, inf\), got -1$"),
        ({"tail": float("inf")}, r"^tail must be a number in \[0, inf\), got inf$"),
        ({"min_n": 0}, r"^min_n must be an integer in \[1, inf\), got 0$"),
        ({"max_n": 3}, r"^max_n must be an integer in \[4, inf\), got 3$"),
        ({"rule_n": 3}, r"^rule_n must be an integer in \[4, 40\], got 3$"),
        ({"rule_n": 41}, r"^rule_n must be an integer in \[4, 40\], got 41$"),
        ({"rule_n": 10.0}, r"^rule_n must be an integer in \[4, 40\], got 10.0$"),
        ({"tolerance": 1.0}, r"^tolerance must be a number in \[0, 1\), got 1.0$"),
        ({"tolerance": -0.1}, r"^tolerance must be a number in \[0, 1\), got -0.1$"),
    ],
)
def test_bad_input_is_refused(arguments: dict[str, object], message: str) -> None:
    given_arguments: dict[str, object] = {
        "hot_hashes": [1, 2],
        "hot_counts": [3, 4],
        "tail": 10,
        "rule_n": 10,
        "min_n": 4,
        "max_n": 40,
        "tolerance": 0.1,
        **arguments,
    }
    with pytest.raises(InvalidInput, match=message) as raised:
        choose_state_count(**given_arguments)  # type: ignore[arg-type]
    assert raised.value.field == message[1:].split(" ")[0]
