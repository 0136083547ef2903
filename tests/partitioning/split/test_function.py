"""``SplitFunction`` (DESIGN §11.3): validation naming the field, canonical JSON, and lookup through
each split key's alias table (whose shares tests/partitioning/split/test_alias.py checks)."""

from __future__ import annotations

import json

import pytest

from repart.errors import InvalidInput
from repart.partitioning import initial_function
from repart.partitioning.function import PartitionFunction
from repart.partitioning.split import function as split_function
from repart.partitioning.split.alias import BUCKET_SPAN, AliasTable
from repart.partitioning.split.function import SplitEntry, SplitFunction, load_function

HOME = initial_function(8, "str", 10)


def split_of(key: str, *others: int, weights: tuple[float, ...] | None = None) -> SplitFunction:
    candidates = (HOME.lookup(key), *others)
    shares = weights or tuple(1 / len(candidates) for _ in candidates)
    return SplitFunction(HOME, {key: SplitEntry(candidates, shares)})


def other_channels(key: str, count: int) -> tuple[int, ...]:
    return tuple(c for c in range(8) if c != HOME.lookup(key))[:count]


def test_an_unsplit_key_routes_home_and_a_split_key_by_its_alias_table() -> None:
    f = split_of("hot", *other_channels("hot", 2), weights=(0.5, 0.25, 0.25))
    home, second, third = f.candidates("hot")
    assert f.alias_table("hot") == AliasTable.from_weights(
        (0.5, 0.25, 0.25)
    )  # four buckets: home, home, second, third
    tops = [0, (1 << 62) - 1, 1 << 62, 2 << 62, (3 << 62) - 1, 3 << 62]
    assert [f.lookup("hot", top) for top in tops] == [home, home, home, second, second, third]
    assert f.lookup("hot", -1) == third  # signed: -1 is 2^64 - 1
    assert f.lookup("cold", 12345) == HOME.lookup("cold")
    assert f.candidates("cold") == (HOME.lookup("cold"),)


def test_the_low_bits_choose_between_a_bucket_s_candidate_and_its_alias() -> None:
    f = split_of("hot", *other_channels("hot", 1), weights=(0.7, 0.3))
    home, second = f.candidates("hot")
    cut = 2 * BUCKET_SPAN - round(1.4 * BUCKET_SPAN)  # the second bucket: 0.3 of 2 buckets is 0.6 of it
    top = 1 << 63
    picks = [f.lookup("hot", top | u) for u in (0, cut - 1, cut, BUCKET_SPAN - 1)]
    assert picks == [second, second, home, home]
    assert f.lookup("hot", BUCKET_SPAN - 1) == home  # the first bucket is the home's alone


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


def test_alias_tables_past_one_routing_constant_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    entries = {
        key: SplitEntry((HOME.lookup(key), *other_channels(key, 2)), (0.5, 0.25, 0.25)) for key in "abc"
    }
    monkeypatch.setattr(split_function, "MAX_ALIAS_BUCKETS", 12)
    assert len(SplitFunction(HOME, entries).split) == 3  # 3 keys of 4 buckets each: at the bound
    monkeypatch.setattr(split_function, "MAX_ALIAS_BUCKETS", 11)
    with pytest.raises(
        InvalidInput, match=r"split must have at most 11 alias buckets in all .*, got 12"
    ) as raised:
        SplitFunction(HOME, entries)
    assert raised.value.field == "split"


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
