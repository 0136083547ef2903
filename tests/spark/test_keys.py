"""Key columns: accepted types, errors naming the column, and hashes equal to repart's XXH64."""

from __future__ import annotations

import pytest
from pyspark.sql import SparkSession

from repart.errors import InvalidInput
from repart.partitioning.domain import INT64_MAX, INT64_MIN
from repart.partitioning.hashing import hash_key, slot_of_hash
from repart.spark.keys import key_column


def signed(value: int) -> int:
    return value - (1 << 64) if value >= 1 << 63 else value


def test_string_and_integer_columns_hash_like_repart(spark: SparkSession) -> None:
    strs = ["", "a", "héllo", "日本語", "emoji 🎉", "x" * 300]
    df = spark.createDataFrame([(s,) for s in strs], "k string")
    key = key_column(df, "k")
    assert key.key_type == "str"
    rows = df.select("k", key.hash.alias("h"), key.slot(16).alias("s")).collect()
    assert [(r.h, r.s) for r in rows] == [(signed(hash_key(s)), slot_of_hash(hash_key(s), 16)) for s in strs]

    ints = [0, 1, -1, 127, -128, INT64_MAX, INT64_MIN]
    for spark_type, values in (("tinyint", ints[:5]), ("int", ints[:5]), ("bigint", ints)):
        df = spark.createDataFrame([(v,) for v in values], f"k {spark_type}")
        key = key_column(df, "k")
        assert key.key_type == "int" and key.spark_type == spark_type
        got = [(r.h, r.s) for r in df.select(key.hash.alias("h"), key.slot(10).alias("s")).collect()]
        assert got == [(signed(hash_key(v)), slot_of_hash(hash_key(v), 10)) for v in values]


def test_bad_key_columns_are_named(spark: SparkSession) -> None:
    df = spark.createDataFrame([(1.5, "a")], "price double, `odd.name` string")
    with pytest.raises(InvalidInput, match=r"no column 'ticker'.*price, odd.name"):
        key_column(df, "ticker")
    with pytest.raises(InvalidInput, match=r"'price' has type double; accepted key types: string, tinyint"):
        key_column(df, "price")
    with pytest.raises(InvalidInput, match="holds 'str' keys"):
        key_column(df, "odd.name", expected="int")
    assert df.select(key_column(df, "odd.name").hash).count() == 1
