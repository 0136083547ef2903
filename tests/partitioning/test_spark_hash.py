"""Spark's Murmur3 ``hash``, vectorized, against a plain-Python reference of ``Murmur3_x86_32`` written
here from its definition, and against values Spark's ``F.hash`` gave (pyspark 4.3)."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repart.errors import InvalidInput
from repart.partitioning.spark_hash import (
    spark_hash_ints,
    spark_hash_longs,
    spark_hash_strings,
    spark_partitions,
)

MASK = 0xFFFFFFFF
INT64 = st.integers(-(2**63), 2**63 - 1)
INT32 = st.integers(-(2**31), 2**31 - 1)


def _signed(value: int) -> int:
    return value - 2**32 if value >= 2**31 else value


def _rotate_left(value: int, bits: int) -> int:
    return ((value << bits) | (value >> (32 - bits))) & MASK


def _round(h1: int, k1: int) -> int:
    """Murmur3_x86_32.mixK1 then mixH1 on one 32-bit input word."""
    k1 = (k1 * 0xCC9E2D51) & MASK
    k1 = _rotate_left(k1, 15)
    k1 = (k1 * 0x1B873593) & MASK
    h1 ^= k1
    h1 = _rotate_left(h1, 13)
    return (h1 * 5 + 0xE6546B64) & MASK


def _fmix(h1: int, length: int) -> int:
    h1 ^= length
    h1 ^= h1 >> 16
    h1 = (h1 * 0x85EBCA6B) & MASK
    h1 ^= h1 >> 13
    h1 = (h1 * 0xC2B2AE35) & MASK
    return h1 ^ (h1 >> 16)


def reference_int(value: int, seed: int = 42) -> int:
    """Murmur3_x86_32.hashInt."""
    return _signed(_fmix(_round(seed, value & MASK), 4))


def reference_long(value: int, seed: int = 42) -> int:
    """Murmur3_x86_32.hashLong: the low word, then the high word."""
    bits = value & 0xFFFFFFFFFFFFFFFF
    h1 = _round(_round(seed, bits & MASK), bits >> 32)
    return _signed(_fmix(h1, 8))


def reference_string(text: str, seed: int = 42) -> int:
    """Murmur3_x86_32.hashUnsafeBytes over the UTF-8 bytes: whole little-endian words, then each tail
    byte sign-extended in a round of its own."""
    data = text.encode("utf-8")
    whole = len(data) - len(data) % 4
    h1 = seed
    for start in range(0, whole, 4):
        h1 = _round(h1, int.from_bytes(data[start : start + 4], "little"))
    for byte in data[whole:]:
        h1 = _round(h1, (byte - 256 if byte >= 128 else byte) & MASK)
    return _signed(_fmix(h1, len(data)))


# Spark's own outputs: SELECT hash(x) in pyspark 4.3 (strings as StringType, longs as LongType, ints as
# IntegerType).
SPARK_STRINGS = {
    "": 142593372,
    "a": 1485273170,
    "ab": -97053317,
    "abc": 1322437556,
    "abcd": -396302900,
    "abcde": 814637928,
    "user-0-0": 611792738,
    "user-7-12345": 349126607,
    "\x00": -783713497,
    "a\x00b": -1008589700,
    "é": 2119106806,
    "日本語": -1143049834,
    "😀": 1877935379,
    "\U0010ffff": 1132366802,
    "\xff\xfe": 1468979952,
    "hello world!": -294328854,
}
SPARK_LONGS = {
    0: -1670924195,
    1: -1712319331,
    -1: -939490007,
    42: 1316951768,
    2**31: 238268309,
    -(2**31) - 1: -1945244161,
    2**63 - 1: -1604625029,
    -(2**63): -853646085,
    123456789012345: 1130168193,
}
SPARK_INTS = {
    0: 933211791,
    1: -559580957,
    -1: -1604776387,
    42: 29417773,
    2**31 - 1: 133916647,
    -(2**31): 723455942,
    123456: 1905992991,
}


def test_known_values_from_spark() -> None:
    strings, longs, ints = list(SPARK_STRINGS), list(SPARK_LONGS), list(SPARK_INTS)
    assert spark_hash_strings(pa.array(strings)).tolist() == list(SPARK_STRINGS.values())
    assert spark_hash_longs(np.array(longs, dtype=np.int64)).tolist() == list(SPARK_LONGS.values())
    assert spark_hash_ints(np.array(ints, dtype=np.int32)).tolist() == list(SPARK_INTS.values())


def test_reference_agrees_with_spark() -> None:
    """The reference itself is checked against Spark's outputs, so the properties below compare the
    vectorized code with a reference known to be Spark's function."""
    assert {text: reference_string(text) for text in SPARK_STRINGS} == SPARK_STRINGS
    assert {value: reference_long(value) for value in SPARK_LONGS} == SPARK_LONGS
    assert {value: reference_int(value) for value in SPARK_INTS} == SPARK_INTS


@settings(max_examples=200, deadline=None)
@given(
    texts=st.lists(st.text(alphabet=st.characters(codec="utf-8"), max_size=40), max_size=60),
    large=st.booleans(),
    cut=st.data(),
)
def test_strings_equal_the_reference(texts: list[str], large: bool, cut: st.DataObject) -> None:
    """Any text (NUL, non-BMP characters, every tail length), as string or large_string, sliced at an
    offset, and chunked at arbitrary points."""
    kind = pa.large_string() if large else pa.string()
    expected = [reference_string(text) for text in texts]
    start = cut.draw(st.integers(0, len(texts)))
    stop = cut.draw(st.integers(start, len(texts)))
    sliced = pa.array(texts, kind).slice(start, stop - start)
    assert spark_hash_strings(sliced).tolist() == expected[start:stop]
    bounds = sorted(cut.draw(st.lists(st.integers(0, len(texts)), max_size=4)))
    edges = [0, *bounds, len(texts)]
    chunks = [pa.array(texts, kind).slice(low, high - low) for low, high in pairwise(edges)]
    assert spark_hash_strings(pa.chunked_array(chunks, kind)).tolist() == expected


@settings(max_examples=200, deadline=None)
@given(values=st.lists(INT64, max_size=80))
def test_longs_equal_the_reference(values: list[int]) -> None:
    expected = [reference_long(value) for value in values]
    assert spark_hash_longs(np.array(values, dtype=np.int64)).tolist() == expected
    assert spark_hash_longs(pa.array(values, pa.int64())).tolist() == expected


@settings(max_examples=200, deadline=None)
@given(values=st.lists(INT32, max_size=80))
def test_ints_equal_the_reference(values: list[int]) -> None:
    expected = [reference_int(value) for value in values]
    assert spark_hash_ints(np.array(values, dtype=np.int32)).tolist() == expected
    assert spark_hash_ints(values).tolist() == expected


@given(hashes=st.lists(INT32, max_size=50), n=st.integers(1, 5000))
def test_partitions_are_pmod(hashes: list[int], n: int) -> None:
    """pmod(h, n) = ((h % n) + n) % n in Java's truncating arithmetic: always in [0, n)."""
    java = [((h - int(h / n) * n) + n) % n for h in hashes]
    assert spark_partitions(np.array(hashes, dtype=np.int32), n).tolist() == java


def test_empty_inputs() -> None:
    assert spark_hash_strings(pa.array([], pa.string())).tolist() == []
    assert spark_hash_strings(pa.chunked_array([], pa.large_string())).tolist() == []
    assert spark_hash_longs(np.empty(0, dtype=np.int64)).tolist() == []
    assert spark_hash_ints([]).tolist() == []


def test_nulls_are_refused() -> None:
    with pytest.raises(InvalidInput, match=r"^values must hold no nulls .*got 1$") as raised:
        spark_hash_strings(pa.array(["a", None, "b"]))
    assert raised.value.field == "values"
    with pytest.raises(InvalidInput, match=r"^values must hold no nulls"):
        spark_hash_strings(pa.chunked_array([pa.array(["a"]), pa.array([None], pa.string())]))
    with pytest.raises(InvalidInput, match=r"^values must hold no nulls"):
        spark_hash_longs(pa.array([1, None], pa.int64()))
    with pytest.raises(InvalidInput, match=r"^values must hold no nulls"):
        spark_hash_ints(pa.array([None], pa.int32()))


def test_other_input_is_refused() -> None:
    with pytest.raises(InvalidInput, match=r"^values must be a pyarrow string or large_string array"):
        spark_hash_strings(pa.array([b"a"]))
    with pytest.raises(InvalidInput, match=r"^values must be a pyarrow string or large_string array"):
        spark_hash_strings(["a"])
    with pytest.raises(InvalidInput, match=r"^values must be a 1-d array of integers .*got dtype float64"):
        spark_hash_longs([1.5])
    with pytest.raises(
        InvalidInput, match=r"^values must be a 1-d array of integers in \[-2147483648, 2147483647\]"
    ):
        spark_hash_ints([2**31])
    with pytest.raises(InvalidInput, match=r"^values must be a 1-d array of integers"):
        spark_hash_longs(np.array([2**64 - 1], dtype=np.uint64))
    with pytest.raises(InvalidInput, match=r"^values must be a 1-d array of integers .*shape \(1, 1\)"):
        spark_hash_longs([[1]])
    with pytest.raises(InvalidInput, match=r"^n_partitions must be an integer in \[1, inf\), got 0$"):
        spark_partitions(np.zeros(1, dtype=np.int32), 0)
