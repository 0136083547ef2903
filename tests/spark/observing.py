"""Shared by the observe() tests: the window they observe, a sink that keeps what it is given, a
collector of the Spark jobs a block starts, DataFrames of given keys, and the check of a snapshot
against exact counts of its batch."""

from __future__ import annotations

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
    """Every property of the observed snapshot against exact counts of ``keys``, and that its
    document parses back to it."""
    snapshot = observation.snapshot
    present = [key for key in keys if key is not None]
    truth = Counter(present)
    n = len(present)
    assert snapshot.tuples == n
    assert observation.null_keys == len(keys) - n
    bound = epsilon * n
    seen = set()
    for item in snapshot.items:
        assert item.key in truth, f"{item.key!r} is not a key of the batch (a hash instead of the key?)"
        assert truth[item.key] - bound <= item.count <= truth[item.key] <= item.count + item.delta
        assert item.delta <= bound
        seen.add(item.key)
    assert {key for key, true in truth.items() if true >= 2 * bound} <= seen
    assert {key for key, true in truth.items() if true > bound} <= seen  # the snapshot's guarantee
    offsets = {item.delta for item in snapshot.items}
    assert len(offsets) <= 1  # one sketch offset for every item
    offset = offsets.pop() if offsets else 0
    assert {key for key, true in truth.items() if true > offset} <= seen  # the sketch's own guarantee

    slot_bits = snapshot.slot_bits
    expected = np.bincount(slots_of_hashes(hash_keys(present), slot_bits), minlength=1 << slot_bits)
    dense = np.zeros(1 << slot_bits, dtype=np.int64)
    for slot, count in snapshot.slots or ():
        dense[slot] = count
    assert np.array_equal(dense, expected)
    assert len(snapshot.items) <= snapshot.distinct_estimate
    assert Snapshot.from_document(snapshot.to_document()) == snapshot
