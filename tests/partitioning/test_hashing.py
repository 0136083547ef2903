"""Key hashing (DESIGN §2) against the ``xxhash`` package as the oracle."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from repart.errors import InvalidInput
from repart.partitioning.domain import INT64_MAX, INT64_MIN, check_slot_bits, common_key_type, key_type_of
from repart.partitioning.hashing import (
    MAX_GATHERED_LENGTH,
    hash_bytes_array,
    hash_int64_array,
    hash_key,
    hash_keys,
    hash_str_keys,
    key_bytes,
    slot_of_hash,
    slots_of_hashes,
)

int64s = st.integers(INT64_MIN, INT64_MAX)
EXTREME_INTS = [0, 1, -1, INT64_MIN, INT64_MAX, INT64_MIN + 1, INT64_MAX - 1, 2**32, -(2**32)]
EDGE_STRS = ["", "a", "é", "日本語", "\x00", "x" * 31, "x" * 32, "🙂" * 9, "tab\tnew\nline"]


def xxh64_int(value: int) -> int:
    return xxhash.xxh64_intdigest(value.to_bytes(8, "little", signed=True), 42)


def xxh64_str(text: str) -> int:
    return xxhash.xxh64_intdigest(text.encode("utf-8"), 42)


@settings(max_examples=200)
@given(st.lists(int64s, max_size=40))
def test_hash_int64_array_equals_xxhash(values: list[int]) -> None:
    hashes = hash_int64_array(np.array(values + EXTREME_INTS, dtype=np.int64))
    assert hashes.dtype == np.uint64
    assert hashes.tolist() == [xxh64_int(v) for v in values + EXTREME_INTS]


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.one_of(st.none(), st.binary(max_size=MAX_GATHERED_LENGTH + 40)), max_size=60),
    st.sampled_from([pa.binary(), pa.large_binary()]),
    st.integers(0, 5),
)
def test_hash_bytes_array_equals_xxhash_of_each_value(
    values: list[bytes | None], data_type: pa.DataType, skipped: int
) -> None:
    """Every length (below and above a stripe, a lane, a word; beyond the gathered lengths), nulls
    (hashed as the empty value), large offsets, a sliced array and a chunked one."""
    array = pa.array([b"skipped"] * skipped + values, data_type).slice(skipped)
    expected = [xxhash.xxh64_intdigest(value or b"", 42) for value in values]
    assert hash_bytes_array(array).tolist() == expected
    chunked = pa.chunked_array([array.slice(0, len(values) // 2), array.slice(len(values) // 2)], data_type)
    assert hash_bytes_array(chunked).tolist() == expected


@settings(max_examples=100, deadline=None)
@given(st.lists(st.text(max_size=40), max_size=300), st.sampled_from([pa.string(), pa.large_string()]))
def test_hash_bytes_array_of_strings_is_the_routing_hash(texts: list[str], data_type: pa.DataType) -> None:
    """Many values of few lengths (the gathered path) hash as ``hash_key`` of each string."""
    assert hash_bytes_array(pa.array(texts, data_type)).tolist() == [xxh64_str(t) for t in texts]


@given(int64s)
def test_hash_key_of_int_equals_xxhash(value: int) -> None:
    assert hash_key(value) == xxh64_int(value)
    assert hash_key(np.int64(value)) == xxh64_int(value)  # type: ignore[arg-type]


@settings(max_examples=200)
@given(st.lists(st.text(), max_size=30))
def test_hash_keys_of_str_equals_xxhash_on_utf8(texts: list[str]) -> None:
    keys = texts + EDGE_STRS
    expected = [xxh64_str(t) for t in keys]
    assert hash_keys(keys).tolist() == expected
    assert hash_keys(keys, "str").tolist() == expected
    assert hash_str_keys(keys).tolist() == expected
    assert [hash_key(t) for t in keys] == expected


@given(st.lists(int64s, min_size=1, max_size=30))
def test_hash_keys_of_ints_in_any_container(values: list[int]) -> None:
    expected = [xxh64_int(v) for v in values]
    assert hash_keys(values).tolist() == expected
    assert hash_keys(tuple(values), "int").tolist() == expected
    assert hash_keys(np.array(values, dtype=np.int64)).tolist() == expected


def test_hash_keys_of_narrow_integer_arrays_hashes_their_int64_value() -> None:
    for dtype in (np.int8, np.int32, np.uint16, np.uint32):
        values = np.array([0, 1, 7, 100], dtype=dtype)
        assert hash_keys(values).tolist() == [xxh64_int(int(v)) for v in values]


def test_hash_keys_of_nothing_is_empty() -> None:
    assert hash_keys([]).shape == (0,)
    assert hash_str_keys([]).shape == (0,)


@pytest.mark.parametrize("keys", [[1, 2], ["a", 1], ["a", None], [b"bytes"]])
def test_hash_str_keys_rejects_non_str_keys(keys: list[object]) -> None:
    with pytest.raises(InvalidInput, match=r"must be 'str' keys|all be 'str' keys or all|of type") as excinfo:
        hash_str_keys(keys)  # type: ignore[arg-type]
    assert excinfo.value.field == "keys"


def test_key_bytes_are_canonical() -> None:
    assert key_bytes(1) == b"\x01" + bytes(7)
    assert key_bytes(-1) == b"\xff" * 8
    assert key_bytes("é") == b"\xc3\xa9"


@pytest.mark.parametrize("key", ["", "abc", 0, INT64_MIN, INT64_MAX, np.int64(5), np.uint8(3)])
def test_key_type_of_accepts_str_and_int64(key: object) -> None:
    assert key_type_of(key) == ("str" if isinstance(key, str) else "int")


@pytest.mark.parametrize(
    ("key", "message"),
    [
        (True, "of type bool"),
        (np.bool_(True), "of type"),
        (1.5, "of type float"),
        (None, "of type NoneType"),
        (b"x", "of type bytes"),
        (INT64_MAX + 1, "signed 64-bit"),
        (INT64_MIN - 1, "signed 64-bit"),
    ],
)
def test_key_type_of_rejects(key: object, message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as excinfo:
        key_type_of(key)
    assert excinfo.value.field == "key"
    with pytest.raises(InvalidInput) as excinfo:
        key_type_of(key, "explicit")
    assert excinfo.value.field == "explicit"


def test_common_key_type() -> None:
    assert common_key_type([]) is None
    assert common_key_type(["a", "b"]) == "str"
    assert common_key_type([1, np.int64(2)]) == "int"
    with pytest.raises(InvalidInput, match="all be 'str' keys or all 'int' keys") as excinfo:
        common_key_type(["a", 1])
    assert excinfo.value.field == "keys"
    with pytest.raises(InvalidInput, match="of type float") as excinfo:
        common_key_type([1, 2.0], "pinned_keys")
    assert excinfo.value.field == "pinned_keys"


@given(st.lists(st.integers(0, 2**64 - 1), max_size=30), st.integers(10, 20))
def test_slot_of_hash_matches_slots_of_hashes(hashes: list[int], slot_bits: int) -> None:
    slots = slots_of_hashes(np.array(hashes, dtype=np.uint64), slot_bits)
    assert slots.dtype == np.int64
    assert slots.tolist() == [slot_of_hash(h, slot_bits) for h in hashes]
    assert all(0 <= s < 2**slot_bits for s in slots.tolist())


def test_slot_is_the_top_bits() -> None:
    assert slot_of_hash(2**64 - 1, 16) == 2**16 - 1
    assert slot_of_hash(2**63, 10) == 2**9
    assert slot_of_hash(2**48 - 1, 16) == 0


@pytest.mark.parametrize("bits", [10, 16, 20])
def test_check_slot_bits_accepts_the_range(bits: int) -> None:
    assert check_slot_bits(bits) == bits


@pytest.mark.parametrize("bits", [9, 21, 0, -16, True, 16.0, "16", None])
def test_check_slot_bits_rejects(bits: object) -> None:
    with pytest.raises(InvalidInput, match=r"slot_bits .*\[10, 20\]") as excinfo:
        check_slot_bits(bits)  # type: ignore[arg-type]
    assert excinfo.value.field == "slot_bits"
