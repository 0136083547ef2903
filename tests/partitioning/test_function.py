"""PartitionFunction (DESIGN §2): lookup against a plain-Python oracle, canonical JSON, validation."""

from __future__ import annotations

import hashlib
import json
import pickle
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from repart.errors import InvalidInput
from repart.partitioning.consistent import ConsistentSpec, slot_table
from repart.partitioning.domain import INT64_MAX, INT64_MIN, Key, KeyType
from repart.partitioning.function import PartitionFunction
from tests.factories import CONSISTENT_SPECS

int_keys = st.integers(INT64_MIN, INT64_MAX)
str_keys = st.text(max_size=12)
EDGE_KEYS: dict[KeyType, list[Key]] = {
    "int": [0, 1, -1, INT64_MIN, INT64_MAX],
    "str": ["", "a", "é", "日本語", "🙂", "\x00"],
}


def key_hash(key: Key) -> int:
    data = key.encode("utf-8") if isinstance(key, str) else key.to_bytes(8, "little", signed=True)
    return xxhash.xxh64_intdigest(data, 42)


def oracle(function: PartitionFunction, key: Key) -> int:
    """``E[key] if key in E else T'[h(key) >> (64 - S)]``, written out from DESIGN §2."""
    explicit = dict(function.explicit)
    if key in explicit:
        return explicit[key]
    table = slot_table(function.n_channels, function.consistent, function.slot_bits).tolist()
    for slot, channel in function.slot_overrides.items():
        table[slot] = channel
    return int(table[key_hash(key) >> (64 - function.slot_bits)])


@st.composite
def functions(draw: st.DrawFn, key_type: KeyType) -> PartitionFunction:
    n = draw(st.integers(1, 50))
    bits = draw(st.integers(10, 13))
    keys = str_keys if key_type == "str" else int_keys
    return PartitionFunction(
        n,
        key_type=draw(st.sampled_from([None, key_type])),
        slot_bits=bits,
        consistent=draw(st.sampled_from(CONSISTENT_SPECS)),
        explicit=draw(st.dictionaries(keys, st.integers(0, n - 1), max_size=20)),
        slot_overrides=draw(st.dictionaries(st.integers(0, 2**bits - 1), st.integers(0, n - 1), max_size=20)),
    )


any_function = st.one_of(functions("str"), functions("int"))


@settings(max_examples=60, deadline=None)
@given(st.data(), st.sampled_from(["str", "int"]))
def test_lookup_equals_oracle(data: st.DataObject, key_type: KeyType) -> None:
    function = data.draw(functions(key_type))
    other_keys: st.SearchStrategy[Key] = str_keys if key_type == "str" else int_keys
    others = data.draw(st.lists(other_keys, max_size=30))
    keys: list[Key] = [*function.explicit, *others, *EDGE_KEYS[key_type]]
    expected = [oracle(function, key) for key in keys]
    assert [function.lookup(key) for key in keys] == expected
    assert function.lookup_many(keys).tolist() == expected
    assert function.lookup_many(tuple(keys)).tolist() == expected
    slots = np.array([key_hash(key) >> (64 - function.slot_bits) for key in keys], dtype=np.int64)
    assert function.lookup_many(keys, slots=slots).tolist() == expected
    if key_type == "int":
        array = np.array(keys, dtype=np.int64)
        assert function.lookup_many(array).tolist() == expected
        assert function.lookup_many(array, slots=slots).tolist() == expected
    else:
        assert function.lookup_many(np.array(keys, dtype=object)).tolist() == expected


def test_lookup_many_of_a_numpy_str_array() -> None:
    function = PartitionFunction(7, explicit={"b": 6})
    keys = ["a", "b", "日本語", ""]
    assert function.lookup_many(np.array(keys)).tolist() == [oracle(function, key) for key in keys]


def test_lookup_many_returns_int64() -> None:
    function = PartitionFunction(4, explicit={1: 3})
    assert function.lookup_many(np.array([1, 2], dtype=np.int32)).dtype == np.int64
    assert function.lookup_many([]).tolist() == []
    assert function.lookup_many(np.array([], dtype=np.int64)).dtype == np.int64


def same_slot_keys(slot_bits: int) -> tuple[str, str]:
    """Two different str keys in the same slot."""
    first: dict[int, str] = {}
    for i in range(10_000):
        key = f"k{i}"
        slot = key_hash(key) >> (64 - slot_bits)
        if slot in first:
            return first[slot], key
        first[slot] = key
    raise AssertionError("no two keys share a slot")


@pytest.mark.parametrize("key_type", ["str", "int"])
def test_a_key_sharing_an_explicit_keys_slot_follows_the_table(key_type: KeyType) -> None:
    explicit_key: Key
    other: Key
    if key_type == "str":
        explicit_key, other = same_slot_keys(10)
    else:
        explicit_key, other = 7, next(k for k in range(8, 100_000) if key_hash(k) >> 54 == key_hash(7) >> 54)
    table_channel = oracle(PartitionFunction(5, slot_bits=10), other)
    function = PartitionFunction(5, slot_bits=10, explicit={explicit_key: (table_channel + 1) % 5})
    assert function.lookup_many([explicit_key, other]).tolist() == [(table_channel + 1) % 5, table_channel]
    assert function.lookup(other) == table_channel


def test_table_applies_overrides_and_is_read_only() -> None:
    plain = PartitionFunction(6, slot_bits=10)
    assert plain.table is plain.base_table is slot_table(6, ConsistentSpec(), 10)
    function = PartitionFunction(6, slot_bits=10, slot_overrides={0: 5, 1023: 4})
    expected = plain.base_table.copy()
    expected[[0, 1023]] = [5, 4]
    assert np.array_equal(function.table, expected)
    assert not function.table.flags.writeable
    assert not function.base_table.flags.writeable


def test_mappings_are_immutable_and_normalized() -> None:
    function = PartitionFunction(np.int64(3), explicit={np.int64(5): np.int32(2)})  # type: ignore[arg-type, dict-item]
    assert function.n_channels == 3 and type(function.n_channels) is int
    assert function.key_type == "int"
    assert [(type(k), type(c)) for k, c in function.explicit.items()] == [(int, int)]
    with pytest.raises(TypeError):
        function.explicit[6] = 1  # type: ignore[index]
    source: dict[Key, int] = {"a": 1}
    copied = PartitionFunction(3, explicit=source)
    source["b"] = 2
    assert dict(copied.explicit) == {"a": 1}


@settings(max_examples=60, deadline=None)
@given(any_function)
def test_json_round_trip(function: PartitionFunction) -> None:
    text = function.to_json()
    parsed = PartitionFunction.from_json(text)
    assert parsed == function
    assert parsed.to_json() == text
    assert parsed.digest == function.digest == hashlib.sha256(text.encode("utf-8")).hexdigest()
    assert np.array_equal(parsed.table, function.table)
    assert pickle.loads(pickle.dumps(function)) == function


def test_canonical_json_is_exactly_the_spec() -> None:
    function = PartitionFunction(
        4,
        slot_bits=12,
        consistent=ConsistentSpec("ring", replicas=100, seed=5),
        explicit={"é": 1, "b": 3, "a": 2},
        slot_overrides={7: 3, 2: 0},
    )
    assert function.to_json() == (
        '{"N":4,"consistent":{"method":"ring","replicas":100,"seed":5},'
        '"explicit":[["a",2],["b",3],["é",1]],"format":1,'
        '"hash":{"algorithm":"xxh64","seed":42,"slot_bits":12},"key_type":"str",'
        '"slot_overrides":[[2,0],[7,3]]}'
    )
    ints = PartitionFunction(2, explicit={10: 1, -3: 0, INT64_MIN: 1})
    assert json.loads(ints.to_json())["explicit"] == [[INT64_MIN, 1], [-3, 0], [10, 1]]
    assert json.loads(PartitionFunction(2).to_json())["key_type"] is None


def test_digest_depends_on_content_only() -> None:
    one = PartitionFunction(8, explicit={"a": 1, "b": 2}, slot_overrides={3: 4, 1: 0})
    same = PartitionFunction(8, explicit={"b": 2, "a": 1}, slot_overrides={1: 0, 3: 4})
    assert one.digest == same.digest
    assert one == same and hash(one) == hash(same) and len({one, same}) == 1
    for different in (
        PartitionFunction(8, explicit={"a": 1, "b": 3}, slot_overrides={3: 4, 1: 0}),
        PartitionFunction(8, explicit={"a": 1}, slot_overrides={3: 4, 1: 0}),
        PartitionFunction(8, explicit={"a": 1, "b": 2}, slot_overrides={3: 4}),
        PartitionFunction(9, explicit={"a": 1, "b": 2}, slot_overrides={3: 4, 1: 0}),
        PartitionFunction(8, explicit={"a": 1, "b": 2}, slot_overrides={3: 4, 1: 0}, slot_bits=12),
    ):
        assert different.digest != one.digest


@pytest.mark.parametrize(
    ("kwargs", "field", "message"),
    [
        ({"n_channels": 0}, "n_channels", r"n_channels must be an integer in \[1, 65536\]"),
        ({"n_channels": -2}, "n_channels", r"n_channels must be an integer in \[1, 65536\]"),
        ({"n_channels": 65_537}, "n_channels", r"n_channels must be an integer in \[1, 65536\]"),
        ({"n_channels": True}, "n_channels", "n_channels must be an integer"),
        ({"n_channels": 2.0}, "n_channels", "n_channels must be an integer"),
        ({"slot_bits": 9}, "slot_bits", r"slot_bits must be an integer in \[10, 20\]"),
        ({"slot_bits": 21}, "slot_bits", r"slot_bits must be an integer in \[10, 20\]"),
        ({"explicit": {"a": 4}}, "explicit['a']", r"explicit\['a'\] must be an integer in \[0, 3\], got 4"),
        ({"explicit": {"a": -1}}, "explicit['a']", r"explicit\['a'\] must be an integer in \[0, 3\]"),
        ({"explicit": {"a": 1.0}}, "explicit['a']", r"explicit\['a'\] must be an integer"),
        ({"explicit": {"a": 0, 1: 0}}, "explicit", "explicit must all be 'str' keys or all 'int' keys"),
        (
            {"explicit": {1.5: 0}},
            "explicit",
            "explicit must be a str or a signed 64-bit int .* of type float",
        ),
        (
            {"explicit": {True: 0}},
            "explicit",
            "explicit must be a str or a signed 64-bit int .* of type bool",
        ),
        ({"explicit": {2**63: 0}}, "explicit", "explicit must be a str or a signed 64-bit int"),
        (
            {"explicit": {"\ud800": 0}},
            "explicit",
            "explicit must be a key with a UTF-8 encoding.* lone surrogate",
        ),
        ({"key_type": "float"}, "key_type", "key_type must be one of 'str', 'int' or None"),
        (
            {"key_type": "int", "explicit": {"a": 0}},
            "key_type",
            "key_type must be 'str', the type of the explicit keys, got 'int'",
        ),
        (
            {"slot_overrides": {2**16: 0}},
            "slot_overrides",
            r"slot_overrides must have slots that are an integer in \[0, 65535\]",
        ),
        (
            {"slot_overrides": {-1: 0}},
            "slot_overrides",
            r"slot_overrides must have slots that are an integer in \[0, 65535\]",
        ),
        (
            {"slot_overrides": {5: 4}},
            "slot_overrides[5]",
            r"slot_overrides\[5\] must be an integer in \[0, 3\]",
        ),
        ({"consistent": "jump"}, "consistent", "consistent must be a ConsistentSpec"),
    ],
)
def test_constructor_validation(kwargs: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as excinfo:
        PartitionFunction(**{"n_channels": 4, **kwargs})
    assert excinfo.value.field == field


def document(**changes: Any) -> str:
    base = json.loads(PartitionFunction(4, explicit={"a": 1, "b": 2}, slot_overrides={3: 0}).to_json())
    for path, value in changes.items():
        *parents, name = path.split("__")
        target = base
        for parent in parents:
            target = target[parent]
        if value is DELETE:
            del target[name]
        else:
            target[name] = value
    return json.dumps(base)


DELETE = object()


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        (document(format=2), "format", r"format must be 1, got 2"),
        (document(format=True), "format", "format must be 1"),
        (document(format=1.0), "format", "format must be 1"),
        (document(hash__seed=42.0), "hash.seed", "hash.seed must be 42"),
        (document(N=0), "N", r"N must be an integer in \[1, 65536\]"),
        (document(N="4"), "N", "N must be an integer"),
        (document(hash__algorithm="murmur3"), "hash.algorithm", "hash.algorithm must be 'xxh64'"),
        (document(hash__seed=0), "hash.seed", "hash.seed must be 42"),
        (document(hash__slot_bits=9), "hash.slot_bits", r"hash.slot_bits must be an integer in \[10, 20\]"),
        (document(hash__extra=1), "hash", r"hash has unknown field\(s\) \['extra'\]"),
        (document(consistent__method="maglev"), "consistent.method", "consistent.method must be one of"),
        (
            document(consistent__replicas=0),
            "consistent.replicas",
            "consistent.replicas must be an integer in",
        ),
        (document(consistent__seed=DELETE), "consistent", r"consistent is missing field\(s\) \['seed'\]"),
        (
            document(explicit=[["a", 1], ["a", 2]]),
            "explicit[1]",
            r"explicit\[1\] must not repeat the key 'a'",
        ),
        (
            document(explicit=[["a", 1], [5, 2]]),
            "explicit",
            "explicit must all be 'str' keys or all 'int' keys",
        ),
        (
            document(explicit=[["a", 9]]),
            "explicit[0]",
            r"explicit\[0\] must be a \[key, channel\] pair .* and an integer in \[0, 3\]",
        ),
        (document(explicit=[["a"]]), "explicit[0]", r"explicit\[0\] must be a \[key, channel\] pair"),
        (document(explicit=[[["a"], 1]]), "explicit[0]", r"explicit\[0\] must be a \[key, channel\] pair"),
        (document(explicit={"a": 1}), "explicit", "explicit must be a list"),
        (document(explicit=[[1.5, 1]]), "explicit[0]", r"explicit\[0\] must be a \[key, channel\] pair"),
        (
            document(slot_overrides=[[3, 0], [3, 1]]),
            "slot_overrides[1]",
            r"slot_overrides\[1\] must not repeat the slot 3",
        ),
        (
            document(slot_overrides=[[70_000, 0]]),
            "slot_overrides[0]",
            r"slot_overrides\[0\] must be a \[slot, channel\] pair of an integer in \[0, 65535\]",
        ),
        (
            document(key_type="int"),
            "key_type",
            "key_type must be 'str', the type of the explicit keys, got 'int'",
        ),
        (document(key_type="bytes"), "key_type", "key_type must be one of"),
        (document(owner="me"), "function", r"function has unknown field\(s\) \['owner'\]"),
        (document(N=DELETE), "function", r"function is missing field\(s\) \['N'\]"),
        ('{"N": 4, "N": 5}', "function", "function must not repeat field 'N'"),
        ("[1, 2]", "function", "function must be a JSON object"),
        (document(hash="xxh64"), "hash", "hash must be a JSON object"),
        ("{not json", "function", "function must be JSON text: Expecting property name"),
    ],
)
def test_from_json_validation(text: str, field: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as excinfo:
        PartitionFunction.from_json(text)
    assert excinfo.value.field == field


def test_from_json_accepts_any_order_and_whitespace() -> None:
    function = PartitionFunction(4, explicit={"a": 1, "b": 2}, slot_overrides={3: 0, 1: 2})
    loose = json.loads(function.to_json())
    loose["explicit"].reverse()
    loose["slot_overrides"].reverse()
    assert PartitionFunction.from_json(json.dumps(loose, indent=2)) == function


@pytest.mark.parametrize(
    ("function", "keys", "message"),
    [
        (
            PartitionFunction(4, explicit={"a": 1}),
            [1, 2],
            "keys must be of this function's key_type 'str', got 'int'",
        ),
        (
            PartitionFunction(4, explicit={"a": 1}),
            np.array([1, 2]),
            "must be of this function's key_type 'str'",
        ),
        (
            PartitionFunction(4, explicit={1: 1}),
            ["a"],
            "must be of this function's key_type 'int', got 'str'",
        ),
        (PartitionFunction(4), ["a", 1], "must all be 'str' keys or all 'int' keys"),
        (PartitionFunction(4), [1, "a"], "must all be 'int' keys or all 'str' keys"),
        (PartitionFunction(4), [1, 2.5], "of type float"),
        (PartitionFunction(4), [None], "of type NoneType"),
        (PartitionFunction(4), [True], "of type bool"),
        (PartitionFunction(4), np.array([2**63], dtype=np.uint64), "signed 64-bit range"),
        (PartitionFunction(4), np.array([True]), "of type"),
    ],
)
def test_lookup_many_rejects_bad_keys(function: PartitionFunction, keys: Any, message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as excinfo:
        function.lookup_many(keys)
    assert excinfo.value.field == "keys"


@pytest.mark.parametrize(
    ("keys", "slots", "message"),
    [
        (["a", "b"], np.array([1]), r"one slot per key \(2\)"),
        (["a", "b"], np.array([1.0, 2.0]), "integer array"),
        (["a", "b"], [1, 2], "integer array"),
        (["a", "b"], np.array([1, 2**16]), r"slots must be in \[0, 65535\]"),
        (np.array([1, 2]), np.array([-1, 0]), r"slots must be in \[0, 65535\]"),
        (["a", 1], np.array([1, 2]), "keys must all be 'str' keys or all 'int' keys"),
    ],
)
def test_lookup_many_rejects_bad_slots(keys: Any, slots: npt.NDArray[Any], message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as excinfo:
        PartitionFunction(4).lookup_many(keys, slots=slots)
    assert excinfo.value.field == ("keys" if message.startswith("keys") else "slots")


@pytest.mark.parametrize(
    ("function", "key", "message"),
    [
        (PartitionFunction(4), 1.5, "of type float"),
        (PartitionFunction(4), 2**64, "signed 64-bit"),
        (
            PartitionFunction(4, explicit={"a": 1}),
            3,
            "key must be of this function's key_type 'str', got 'int'",
        ),
    ],
)
def test_lookup_rejects_bad_keys(function: PartitionFunction, key: Any, message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as excinfo:
        function.lookup(key)
    assert excinfo.value.field == "key"
