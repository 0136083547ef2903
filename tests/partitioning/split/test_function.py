"""``SplitFunction`` (DESIGN §11.3): validation naming the field, canonical JSON, and lookup against a
direct reading of the threshold rule."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repart.errors import InvalidInput
from repart.partitioning import initial_function
from repart.partitioning.function import PartitionFunction
from repart.partitioning.split.function import (
    ROW_HASH_SPAN,
    SplitEntry,
    SplitFunction,
    cumulative_thresholds,
    load_function,
)

HOME = initial_function(8, "str", 10)


def split_of(key: str, *others: int, weights: tuple[float, ...] | None = None) -> SplitFunction:
    candidates = (HOME.lookup(key), *others)
    shares = weights or tuple(1 / len(candidates) for _ in candidates)
    return SplitFunction(HOME, {key: SplitEntry(candidates, shares)})


def other_channels(key: str, count: int) -> tuple[int, ...]:
    return tuple(c for c in range(8) if c != HOME.lookup(key))[:count]


def test_an_unsplit_key_routes_home_and_a_split_key_by_the_row_hash_s_top_bits() -> None:
    f = split_of("hot", *other_channels("hot", 2), weights=(0.5, 0.25, 0.25))
    home, second, third = f.candidates("hot")
    assert f.thresholds("hot") == (2**31, 3 * 2**30, 2**32)
    assert [f.lookup("hot", r << 32) for r in (0, 2**31 - 1, 2**31, 3 * 2**30 - 1, 3 * 2**30, 2**32 - 1)] == [
        home,
        home,
        second,
        second,
        third,
        third,
    ]
    assert f.lookup("hot", -1) == third  # signed: -1 is 2^64 - 1
    assert f.lookup("cold", 12345) == HOME.lookup("cold")
    assert f.candidates("cold") == (HOME.lookup("cold"),)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(min_value=0, max_value=1000), min_size=2, max_size=8).filter(lambda w: sum(w) > 0)
)
def test_each_candidate_gets_exactly_its_threshold_interval(raw: list[int]) -> None:
    weights = tuple(w / sum(raw) for w in raw)
    if abs(math.fsum(weights) - 1) > 1e-9:
        return
    f = split_of("hot", *other_channels("hot", len(raw) - 1), weights=weights)
    thresholds = f.thresholds("hot")
    assert thresholds[-1] == ROW_HASH_SPAN and list(thresholds) == sorted(thresholds)
    start = 0
    for candidate, end in zip(f.candidates("hot"), thresholds, strict=True):
        assert abs((end - start) / ROW_HASH_SPAN - weights[f.candidates("hot").index(candidate)]) <= 2**-31
        if end > start:  # the interval's first and last row hash go to this candidate
            assert f.lookup("hot", start << 32) == candidate
            assert f.lookup("hot", ((end - 1) << 32) | (2**32 - 1)) == candidate
        start = end


def test_json_round_trip_digest_and_load_function() -> None:
    f = split_of("hot", *other_channels("hot", 1), weights=(0.3, 0.7))
    again = SplitFunction.from_json(f.to_json())
    assert again == f and again.digest == f.digest and hash(again) == hash(f)
    assert load_function(f.to_json()) == f
    assert isinstance(load_function(HOME.to_json()), PartitionFunction)
    assert f.to_json().startswith('{"format":1,"home":{')
    assert f.digest != SplitFunction(HOME).digest


@pytest.mark.parametrize(
    ("entry", "field"),
    [
        ((((HOME.lookup("hot") + 1) % 8, HOME.lookup("hot")), (0.5, 0.5)), "split[0].candidates"),
        (((HOME.lookup("hot"), 8), (0.5, 0.5)), "split[0].candidates[1]"),
        (((HOME.lookup("hot"), HOME.lookup("hot")), (0.5, 0.5)), "split[0].candidates"),
        (((HOME.lookup("hot"),), (1.0,)), "split[0].candidates"),
        (((HOME.lookup("hot"), (HOME.lookup("hot") + 1) % 8), (1.5, -0.5)), "split[0].weights[0]"),
        (((HOME.lookup("hot"), (HOME.lookup("hot") + 1) % 8), (0.5, 0.4)), "split[0].weights"),
        (((HOME.lookup("hot"), (HOME.lookup("hot") + 1) % 8), (1.0,)), "split[0].weights"),
    ],
)
def test_a_bad_entry_names_its_field(entry: tuple[tuple[int, ...], tuple[float, ...]], field: str) -> None:
    with pytest.raises(InvalidInput) as raised:
        SplitFunction(HOME, {"hot": SplitEntry(*entry)})
    assert raised.value.field == field


def test_bad_documents_name_their_field() -> None:
    f = split_of("hot", *other_channels("hot", 1))
    text = f.to_json()
    cases = {
        text.replace('"kind":"split"', '"kind":"merge"'): "kind",
        text.replace('"N":8', '"N":0'): "home.N",
        text.replace('"split":[', '"split":[["hot",[0,1],[0.5,0.5]],'): "split[1].key",
    }
    for bad, field in cases.items():
        with pytest.raises(InvalidInput) as raised:
            load_function(bad)
        assert raised.value.field == field, bad
    with pytest.raises(InvalidInput) as raised:
        SplitFunction(initial_function(8, "int", 10), {"hot": SplitEntry((0, 1), (0.5, 0.5))})
    assert raised.value.field == "split[0].key"
    with pytest.raises(InvalidInput) as raised:
        f.lookup("hot", 2**64)
    assert raised.value.field == "row_hash"


def test_thresholds_of_tiny_weights_never_pass_two_to_the_32() -> None:
    assert cumulative_thresholds((1 - 1e-12, 1e-12)) == (ROW_HASH_SPAN, ROW_HASH_SPAN)


def test_a_bad_row_is_named_by_its_position_in_the_document() -> None:
    hot, cold = HOME.lookup("z"), HOME.lookup("a")
    document = {
        "format": 1,
        "kind": "split",
        "home": json.loads(HOME.to_json()),
        "split": [["z", [(hot + 1) % 8, hot], [0.5, 0.5]], ["a", [cold, (cold + 1) % 8], [0.5, 0.5]]],
    }
    with pytest.raises(InvalidInput) as raised:
        load_function(json.dumps(document))
    assert raised.value.field == "split[0].candidates"
