"""``RoutingFunction``: both kinds of stored function implement it, a ``PartitionFunction`` as its own
home with no split keys, a ``SplitFunction`` through its home and split table."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repart.partitioning import initial_function
from repart.partitioning.function import PartitionFunction
from repart.partitioning.routing import RoutingFunction
from repart.partitioning.split.function import SplitEntry, SplitFunction, load_function

HOME = initial_function(6, "str", 10)


@st.composite
def partition_functions(draw: st.DrawFn) -> PartitionFunction:
    n = draw(st.integers(1, 12))
    keys = draw(st.sampled_from([st.text(max_size=4), st.integers(-(2**63), 2**63 - 1)]))
    return PartitionFunction(
        n,
        slot_bits=draw(st.integers(10, 12)),
        explicit=draw(st.dictionaries(keys, st.integers(0, n - 1), max_size=8)),
        slot_overrides=draw(st.dictionaries(st.integers(0, 1023), st.integers(0, n - 1), max_size=8)),
    )


def split_of(*keys: str) -> SplitFunction:
    return SplitFunction(
        HOME, {key: SplitEntry((HOME.lookup(key), (HOME.lookup(key) + 1) % 6), (0.5, 0.5)) for key in keys}
    )


@settings(max_examples=40, deadline=None)
@given(partition_functions())
def test_a_partition_function_is_a_routing_function_that_is_its_own_home(function: PartitionFunction) -> None:
    assert isinstance(function, RoutingFunction)
    assert function.home is function
    assert dict(function.split) == {}
    assert function.kind == "preserve"
    loaded = load_function(function.to_json())
    assert type(loaded) is PartitionFunction and loaded.kind == "preserve" and dict(loaded.split) == {}
    assert loaded.digest == function.digest


@pytest.mark.parametrize("keys", [(), ("hot",), ("hot", "warm", "x")])
def test_a_split_function_is_a_routing_function_through_its_home_and_table(keys: tuple[str, ...]) -> None:
    function = split_of(*keys)
    assert isinstance(function, RoutingFunction)
    assert function.home is HOME
    assert list(function.split) == sorted(keys)
    assert function.kind == "split"  # of the split kind even with no split key
    assert (function.n_channels, function.slot_bits, function.key_type) == (6, 10, "str")
    loaded = load_function(function.to_json())
    assert type(loaded) is SplitFunction and loaded.kind == "split" and loaded == function
    assert loaded.home == HOME and dict(loaded.split) == dict(function.split)


def test_a_partition_function_s_empty_split_table_cannot_be_written() -> None:
    split: Any = HOME.split
    with pytest.raises(TypeError):
        split["hot"] = SplitEntry((0, 1), (0.5, 0.5))
    assert dict(initial_function(3, "int").split) == {}


@pytest.mark.parametrize(
    "value", ["function", 3, {"home": HOME, "split": {}}, SplitEntry((0, 1), (0.5, 0.5)), HOME.consistent]
)
def test_other_values_are_not_routing_functions(value: object) -> None:
    assert not isinstance(value, RoutingFunction)
