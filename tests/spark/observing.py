"""Shared by the observe() tests: the window they observe, a sink that keeps what it is given, a
collector of the Spark jobs a block starts, DataFrames of given keys, and the check of a snapshot
against exact counts of its batch."""

from __future__ import annotations

import math
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession

from repart.partitioning.hashing import hash_keys, slots_of_hashes
from repart.protocol.snapshot import Snapshot
from repart.spark.observe import Observation, Window

START = datetime(2026, 1, 1, tzinfo=UTC)
WINDOW = Window(7, START, START + timedelta(minutes=1))
PIECES = 3  # createDataFrame pieces, coalesced to 2 Spark partitions each, unioned without a shuffle


class MemorySink:
    """Keeps the snapshots it is given, each checked to be what its document parses back to (the
    snapshot a spool file of it is ingested as)."""

    def __init__(self) -> None:
        self.snapshots: list[Snapshot] = []

    def write(self, snapshot: Snapshot) -> str:
        assert Snapshot.from_document(snapshot.to_document()) == snapshot
        self.snapshots.append(snapshot)
        return "memory"


@contextmanager
def spark_jobs(spark: SparkSession, group: str) -> Iterator[list[list[int]]]:
    """Collects the stage ids of every Spark job started inside the block (one list per job).

    The status tracker learns of jobs from the listener bus, asynchronously but in order: once a
    sentinel job run after the block is visible, so is every job of the block.
    """
    context = spark.sparkContext
    tracker = context.statusTracker()
    stages: list[list[int]] = []
    context.setJobGroup(group, group)
    try:
        yield stages
    finally:
        context.setJobGroup(f"{group}-sentinel", "sentinel")
        context.parallelize([0], 1).count()
        context.setLocalProperty("spark.jobGroup.id", None)  # type: ignore[arg-type]
    deadline = time.monotonic() + 10
    while not tracker.getJobIdsForGroup(f"{group}-sentinel") and time.monotonic() < deadline:
        time.sleep(0.02)
    for job in tracker.getJobIdsForGroup(group):
        info = tracker.getJobInfo(job)
        assert info is not None
        stages.append(list(info.stageIds))


def stage_data(spark: SparkSession, stage: int) -> Any:
    """The status store's record of a stage (``org.apache.spark.status.api.v1.StageData``: tasks,
    status, shuffle records written), read through the JVM gateway: PySpark's status tracker does not
    report shuffle metrics."""
    store = spark.sparkContext._jsc.sc().statusStore()
    tasks, quantiles = getattr(store, "stageData$default$3")(), getattr(store, "stageData$default$5")()
    return store.stageData(stage, False, tasks, False, quantiles).apply(0)


def shuffling_stages(spark: SparkSession, jobs: list[list[int]]) -> list[Any]:
    """The completed stages of ``jobs`` that wrote shuffle records (the stages reading the batch), in
    the order they ran."""
    ran = [stage_data(spark, stage) for stage in sorted({stage for stages in jobs for stage in stages})]
    return [s for s in ran if str(s.status()) == "COMPLETE" and s.shuffleWriteRecords() > 0]


def zipf_keys(key_type: str, seed: int, *, exponent: float, ranks: int, rows: int = 200_000) -> list[Any]:
    """``rows`` keys of Zipf(``exponent``) ranks folded into ``ranks`` with about 1 % nulls; str keys are
    'k<rank>', int keys spread over the signed 64-bit range."""
    rng = np.random.default_rng(seed)
    drawn = rng.zipf(exponent, rows) % ranks
    nulls = rng.random(rows) < 0.01
    if key_type == "str":
        values: list[Any] = [f"k{rank}" for rank in drawn.tolist()]
    else:
        values = [(rank * 0x9E3779B97F4A7C15) % 2**64 - 2**63 for rank in drawn.tolist()]
    return [None if null else value for value, null in zip(values, nulls.tolist(), strict=True)]


def frame(spark: SparkSession, keys: list[Any], spark_type: str, pieces: int = PIECES) -> DataFrame:
    """A one-column DataFrame ``k`` holding ``keys`` in order, in ``2 * pieces`` partitions."""
    arrow_type = pa.string() if spark_type == "string" else pa.int64()
    size = max(1, -(-len(keys) // pieces))
    parts = [
        spark.createDataFrame(
            pa.table({"k": pa.array(keys[i : i + size], type=arrow_type)}), f"k {spark_type}"
        ).coalesce(2)  # Arrow data is RDD-backed (session.py); two partitions per piece, no shuffle
        for i in range(0, max(len(keys), 1), size)
    ]
    df = parts[0]
    for part in parts[1:]:
        df = df.union(part)
    return df


def check_counts(observation: Observation, keys: list[Any], epsilon: float) -> None:
    """Every property of the observed snapshot against exact counts of ``keys``: the items are exactly
    the keys counted more than ``floor(n / ceil(1/epsilon))`` times, at their exact counts with delta
    0, largest first; the slots are the exact histogram; the document parses back to the snapshot."""
    snapshot = observation.snapshot
    present = [key for key in keys if key is not None]
    truth = Counter(present)
    n = len(present)
    assert snapshot.tuples == n
    assert observation.null_keys == len(keys) - n
    bound = n // math.ceil(1 / epsilon)
    expected_items = {key: count for key, count in truth.items() if count > bound}
    assert {item.key: (item.count, item.delta) for item in snapshot.items} == {
        key: (count, 0) for key, count in expected_items.items()
    }
    assert {key for key, true in truth.items() if true > epsilon * n} <= expected_items.keys()
    counts = [item.count for item in snapshot.items]
    assert counts == sorted(counts, reverse=True)

    slot_bits = snapshot.slot_bits
    expected = np.bincount(slots_of_hashes(hash_keys(present), slot_bits), minlength=1 << slot_bits)
    dense = np.zeros(1 << slot_bits, dtype=np.int64)
    for slot, count in snapshot.slots or ():
        dense[slot] = count
    assert np.array_equal(dense, expected)
    assert len(snapshot.items) <= snapshot.distinct_estimate
    assert Snapshot.from_document(snapshot.to_document()) == snapshot
