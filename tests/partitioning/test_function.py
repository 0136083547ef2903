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

from repart.partitioning.consistent import ConsistentSpec, slot_table
from repart.partitioning.function import PartitionFunction
from repart.partitioning.hashing import INT64_MAX, INT64_MIN, Key, KeyType

int_keys = st.integers(INT64_MIN, INT64_MAX)
str_keys = st.text(max_size=12)
EDGE_KEYS: dict[KeyType, list[Key]] = {
    "int": [0, 1, -1, INT64_MIN, INT64_MAX],
    "str": ["", "a", "é", "日本語", "🙂", "\x00"],
}
SPECS = [ConsistentSpec("jump"), ConsistentSpec("mod"), ConsistentSpec("ring", replicas=20, seed=3)]


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
        consistent=draw(st.sampled_from(SPECS)),
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
    ("kwargs", "message"),
    [
        ({"n_channels": 0}, r"n_channels must be in \[1, 65536\]"),
        ({"n_channels": -2}, r"n_channels must be in \[1, 65536\]"),
        ({"n_channels": 65_537}, r"n_channels must be in \[1, 65536\]"),
        ({"n_channels": True}, "n_channels must be an integer"),
        ({"n_channels": 2.0}, "n_channels must be an integer"),
        ({"slot_bits": 9}, r"slot_bits must be in \[10, 20\]"),
        ({"slot_bits": 21}, r"slot_bits must be in \[10, 20\]"),
        ({"explicit": {"a": 4}}, r"explicit: channel of key 'a' must be in \[0, 3\], got 4"),
        ({"explicit": {"a": -1}}, r"explicit: channel of key 'a' must be in \[0, 3\]"),
        ({"explicit": {"a": 1.0}}, "explicit: channel of key 'a' must be an integer"),
        ({"explicit": {"a": 0, 1: 0}}, "explicit: keys mix types"),
        ({"explicit": {1.5: 0}}, "explicit: key 1.5 has unsupported type float"),
        ({"explicit": {True: 0}}, "explicit: key True has unsupported type bool"),
        ({"explicit": {2**63: 0}}, "explicit: key .* signed 64-bit range"),
        ({"explicit": {"\ud800": 0}}, "explicit: key .* lone surrogate"),
        ({"key_type": "float"}, "key_type must be one of 'str', 'int' or None"),
        ({"key_type": "int", "explicit": {"a": 0}}, "key_type is 'int' but the explicit keys are 'str'"),
        ({"slot_overrides": {2**16: 0}}, r"slot_overrides: slot must be in \[0, 65535\]"),
        ({"slot_overrides": {-1: 0}}, r"slot_overrides: slot must be in \[0, 65535\]"),
        ({"slot_overrides": {5: 4}}, r"slot_overrides: channel of slot 5 must be in \[0, 3\]"),
        ({"consistent": "jump"}, "consistent must be a ConsistentSpec"),
    ],
)
def test_constructor_validation(kwargs: dict[str, Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PartitionFunction(**{"n_channels": 4, **kwargs})


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
    ("text", "message"),
    [
        (document(format=2), r"format must be 1 \(accepted format versions: 1\), got 2"),
        (document(format=True), "format must be 1"),
        (document(format=1.0), "format must be 1"),
        (document(hash__seed=42.0), "hash.seed must be 42"),
        (document(N=0), r"N must be in \[1, 65536\]"),
        (document(N="4"), "N must be an integer"),
        (document(hash__algorithm="murmur3"), "hash.algorithm must be 'xxh64'"),
        (document(hash__seed=0), "hash.seed must be 42"),
        (document(hash__slot_bits=9), r"slot_bits must be in \[10, 20\]"),
        (document(hash__extra=1), r"unknown field\(s\) \['extra'\] in hash"),
        (document(consistent__method="maglev"), "method must be one of"),
        (document(consistent__replicas=0), "replicas must be in"),
        (document(consistent__seed=DELETE), r"missing field\(s\) \['seed'\] in consistent"),
        (document(explicit=[["a", 1], ["a", 2]]), "explicit: duplicate key 'a'"),
        (document(explicit=[["a", 1], [5, 2]]), "explicit: keys mix types"),
        (document(explicit=[["a", 9]]), r"explicit: channel of key 'a' must be in \[0, 3\]"),
        (document(explicit=[["a"]]), r"explicit\[0\] must be a \[key, channel\] pair"),
        (document(explicit=[[["a"], 1]]), r"explicit\[0\] must be a \[key, channel\] pair"),
        (document(explicit={"a": 1}), "explicit must be a list"),
        (document(explicit=[[1.5, 1]]), r"explicit\[0\] must be a \[key, channel\] pair"),
        (document(slot_overrides=[[3, 0], [3, 1]]), "slot_overrides: duplicate slot 3"),
        (document(slot_overrides=[[70_000, 0]]), r"slot_overrides: slot must be in \[0, 65535\]"),
        (document(key_type="int"), "key_type is 'int' but the explicit keys are 'str'"),
        (document(key_type="bytes"), "key_type must be one of"),
        (document(owner="me"), r"unknown field\(s\) \['owner'\] in the document"),
        (document(N=DELETE), r"missing field\(s\) \['N'\] in the document"),
        ('{"N": 4, "N": 5}', "duplicate field 'N'"),
        ("[1, 2]", "the document must be a JSON object"),
        (document(hash="xxh64"), "hash must be a JSON object"),
        ("{not json", "Expecting property name"),
    ],
)
def test_from_json_validation(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PartitionFunction.from_json(text)


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
            "key_type of this function is 'str', got 'int' keys",
        ),
        (PartitionFunction(4, explicit={"a": 1}), np.array([1, 2]), "key_type of this function is 'str'"),
        (PartitionFunction(4, explicit={1: 1}), ["a"], "key_type of this function is 'int', got 'str' keys"),
        (PartitionFunction(4), ["a", 1], "mix types"),
        (PartitionFunction(4), [1, "a"], "mix types"),
        (PartitionFunction(4), [1, 2.5], "unsupported type float"),
        (PartitionFunction(4), [None], "unsupported type NoneType"),
        (PartitionFunction(4), [True], "unsupported type bool"),
        (PartitionFunction(4), np.array([2**63], dtype=np.uint64), "signed 64-bit range"),
        (PartitionFunction(4), np.array([True]), "unsupported type"),
    ],
)
def test_lookup_many_rejects_bad_keys(function: PartitionFunction, keys: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        function.lookup_many(keys)


@pytest.mark.parametrize(
    ("keys", "slots", "message"),
    [
        (["a", "b"], np.array([1]), r"one slot per key \(2\)"),
        (["a", "b"], np.array([1.0, 2.0]), "integer array"),
        (["a", "b"], [1, 2], "integer array"),
        (["a", "b"], np.array([1, 2**16]), r"slots must be in \[0, 65536\)"),
        (np.array([1, 2]), np.array([-1, 0]), r"slots must be in \[0, 65536\)"),
        (["a", 1], np.array([1, 2]), "mix types"),
    ],
)
def test_lookup_many_rejects_bad_slots(keys: Any, slots: npt.NDArray[Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PartitionFunction(4).lookup_many(keys, slots=slots)


@pytest.mark.parametrize(
    ("function", "key", "message"),
    [
        (PartitionFunction(4), 1.5, "unsupported type float"),
        (PartitionFunction(4), 2**64, "signed 64-bit range"),
        (PartitionFunction(4, explicit={"a": 1}), 3, "key_type of this function is 'str', got 'int' keys"),
    ],
)
def test_lookup_rejects_bad_keys(function: PartitionFunction, key: Any, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        function.lookup(key)
