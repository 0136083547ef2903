"""repart's vectorized Spark hash equals Spark's ``F.hash`` and its state partition ``pmod(hash, n)``."""

from __future__ import annotations

import numpy as np
import pyarrow as pa
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from repart.partitioning.spark_hash import (
    spark_hash_ints,
    spark_hash_longs,
    spark_hash_strings,
    spark_partitions,
)


def _generated_strings(rng: np.random.Generator, count: int) -> list[str]:
    """Strings of 0-24 characters drawn from ASCII, NUL, Latin-1, CJK and non-BMP code points, so that
    every tail length of the UTF-8 bytes and every byte sign occurs."""
    pools = [(0, 0x7F), (0x80, 0x7FF), (0x800, 0xD7FF), (0x10000, 0x10FFFF)]
    texts = []
    for _ in range(count):
        characters = []
        for _ in range(int(rng.integers(0, 25))):
            low, high = pools[int(rng.integers(len(pools)))]
            characters.append(chr(int(rng.integers(low, high + 1))))
        texts.append("".join(characters))
    return [*texts, "", "\x00", "user-1-2"]


def test_hashes_and_partitions_equal_spark(spark: SparkSession) -> None:
    rng = np.random.default_rng(20261128)
    strings = _generated_strings(rng, 3000)
    longs = [
        *rng.integers(-(2**63), 2**63 - 1, 2000, dtype=np.int64, endpoint=True).tolist(),
        0,
        -1,
        2**63 - 1,
        -(2**63),
    ]
    ints = [*rng.integers(-(2**31), 2**31 - 1, 2000, endpoint=True).tolist(), 0, -1, 2**31 - 1, -(2**31)]
    n = 37
    for values, spark_type, ours in (
        (strings, "string", spark_hash_strings(pa.array(strings))),
        (longs, "bigint", spark_hash_longs(np.array(longs, dtype=np.int64))),
        (ints, "int", spark_hash_ints(np.array(ints, dtype=np.int32))),
    ):
        frame = spark.createDataFrame(
            [(index, value) for index, value in enumerate(values)], f"i int, k {spark_type}"
        )
        rows = (
            frame.select("i", F.hash("k").alias("h"), F.pmod(F.hash("k"), F.lit(n)).alias("p"))
            .orderBy("i")
            .collect()
        )
        assert [row.h for row in rows] == ours.tolist(), spark_type
        assert [row.p for row in rows] == spark_partitions(ours, n).tolist(), spark_type
