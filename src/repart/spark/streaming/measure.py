"""What a stateful streaming query's batch measured, read from Spark's own reports and state, as the
snapshot the controller takes from every job.

- **Progress** (``StreamingQueryProgress``): the batch's input rows, its rates, and the time it took
  (``durationMs.triggerExecution``) against the time it had (the trigger interval, or the time since
  the previous batch started).
- **Key frequencies** from the state's change feed (Spark's ``statestore`` source with
  ``readChangeFeed``; it needs changelog checkpointing): the feed has one row per key the batch
  changed, holding the key's new state. The region's ``count_column`` (a count the aggregation keeps,
  such as ``count(*)``) grows by the key's rows in the batch, so the batch's frequency of a key is its
  new count minus its count before the batch (0 for a new key). The keys with the largest frequencies
  become the snapshot's items, exactly (ε = 0); all of it runs in Spark, nothing per row in Python.
- **Per-partition state**: each state partition's rows (a scan of the state, grouped by
  ``partition_id``) and stored bytes (the size of its directory under ``state/``), as the snapshot's
  channels. A partition's busy seconds are the batch's stateful time in proportion to the rows it
  took: the partition that took the most rows decides, as the busiest channel does.

A query without a count column (a deduplication, whose state never changes for a duplicate) reports
no key frequencies: its partitions are balanced by their state rows only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import functions as F
from pyspark.sql.types import LongType, StringType

from repart.errors import InvalidInput
from repart.partitioning.domain import KeyType
from repart.protocol.snapshot import BatchProgress, ChannelMeasurement, CounterEntry, Snapshot
from repart.spark.streaming.checkpoint import (
    DEFAULT_PROVIDER,
    PROVIDER_SETTING,
    ROCKSDB_PROVIDER,
    checkpoint_batches,
    fs_path,
    logged_conf,
)

HOT_KEYS = 1000
"""How many of a batch's most frequent keys a snapshot names (the rest is its tail)."""


@dataclass(frozen=True)
class PartitionState:
    """One state partition: its rows and the bytes its directory holds."""

    partition: int
    rows: int
    stored_bytes: int


@dataclass(frozen=True)
class KeyFrequencies:
    """A batch's key frequencies from the change feed: the hottest keys with their counts, the total
    over all keys, the number of keys changed, and the rows each partition took."""

    hot: tuple[tuple[Any, int], ...]
    total: int
    changed_keys: int
    partition_rows: Mapping[int, int]


def partition_state(spark: SparkSession, checkpoint: str, n_partitions: int) -> list[PartitionState]:
    """Every state partition's rows at the newest batch and its stored bytes (module docstring)."""
    counted = spark.read.format("statestore").load(checkpoint).groupBy("partition_id").count().collect()
    rows = {int(row["partition_id"]): int(row["count"]) for row in counted}
    return [
        PartitionState(partition, rows.get(partition, 0), _stored_bytes(spark, checkpoint, partition))
        for partition in range(n_partitions)
    ]


def _stored_bytes(spark: SparkSession, checkpoint: str, partition: int) -> int:
    """The bytes under ``state/<operator>/<partition>`` of every stateful operator."""
    fs, root = fs_path(spark, f"{checkpoint}/state")
    if not fs.exists(root):
        return 0
    jvm: Any = spark.sparkContext._jvm
    total = 0
    for operator in fs.listStatus(root):
        directory = jvm.org.apache.hadoop.fs.Path(operator.getPath(), str(partition))
        if fs.exists(directory):
            total += int(fs.getContentSummary(directory).getLength())
    return total


CHANGELOG_SETTING = "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled"


def check_change_feed(spark: SparkSession, checkpoint: str) -> None:
    """InvalidInput naming ``checkpoint`` unless its query runs with what Spark's state change feed
    needs: the RocksDB state store provider (as the query logged it with its newest committed batch)
    with changelog checkpointing (as the session the query runs in sets it: Spark does not log it)."""
    conf = logged_conf(spark, checkpoint, checkpoint_batches(spark, checkpoint).committed)
    provider = conf.get(PROVIDER_SETTING, DEFAULT_PROVIDER)
    changelog = str(spark.conf.get(CHANGELOG_SETTING, "false")).lower()
    if provider != ROCKSDB_PROVIDER or changelog != "true":
        raise InvalidInput(
            "checkpoint",
            "must be a query's with a readable state change feed (key frequencies come from it): run it "
            f"with {PROVIDER_SETTING}={ROCKSDB_PROVIDER} and "
            f"{CHANGELOG_SETTING}=true, got provider {provider} and changelog checkpointing "
            f"{changelog}",
        )


def check_state_key(spark: SparkSession, checkpoint: str, key_type: KeyType) -> None:
    """InvalidInput naming ``key`` unless the state's key is one column whose Spark hash repart computes
    as Spark does: ``string`` for key type ``str``, ``bigint`` for ``int`` (an ``int`` column hashes
    its 4 bytes, not 8)."""
    key = spark.read.format("statestore").load(checkpoint).schema["key"].dataType
    fields = getattr(key, "fields", [])
    wanted = StringType() if key_type == "str" else LongType()
    if len(fields) != 1 or fields[0].dataType != wanted:
        shown = ", ".join(f"{f.name} {f.dataType.simpleString()}" for f in fields)
        raise InvalidInput(
            "key",
            f"must be one {wanted.simpleString()} column (the region's key type {key_type!r}), "
            f"got ({shown}); group by one such column, or cast it",
        )


def key_frequencies(
    spark: SparkSession, checkpoint: str, batch_id: int, count_column: str, *, top: int = HOT_KEYS
) -> KeyFrequencies:
    """Batch ``batch_id``'s key frequencies from the change feed of ``count_column`` (module
    docstring). InvalidInput naming ``count_column`` when the state holds no such value column, and
    ``checkpoint`` when its change feed cannot be read (changelog checkpointing off)."""
    feed = (
        spark.read.format("statestore")
        .option("readChangeFeed", "true")
        .option("changeStartBatchId", batch_id)
        .option("changeEndBatchId", batch_id)
        .load(checkpoint)
    )
    value_fields = feed.schema["value"].dataType.fieldNames()  # type: ignore[attr-defined]
    if count_column not in value_fields:
        raise InvalidInput(
            "count_column",
            f"must be a value column of the state, one of {value_fields}, got {count_column!r}",
        )
    changed = feed.where(F.col("change_type") == "update").select(
        "key", "partition_id", F.col(f"value.{count_column}").alias("new_count")
    )
    # Two jobs over one computation of the deltas (kept in memory between them): the hottest keys,
    # and per partition the rows and keys, which sum to the batch's totals.
    deltas = _deltas(spark, checkpoint, batch_id, changed, count_column).persist()
    try:
        hot = deltas.orderBy(F.col("delta").desc()).limit(top).select("key", "delta").collect()
        partitions = (
            deltas.groupBy("partition_id")
            .agg(F.sum("delta").alias("rows"), F.count("*").alias("keys"))
            .collect()
        )
    finally:
        deltas.unpersist()
    return KeyFrequencies(
        hot=tuple((row["key"][0], int(row["delta"])) for row in hot if row["delta"] > 0),
        total=sum(int(row["rows"]) for row in partitions),
        changed_keys=sum(int(row["keys"]) for row in partitions),
        partition_rows={int(row["partition_id"]): int(row["rows"]) for row in partitions},
    )


def _deltas(
    spark: SparkSession, checkpoint: str, batch_id: int, changed: DataFrame, count_column: str
) -> DataFrame:
    """Each changed key's new count minus its count at the end of the previous batch (0 if new)."""
    if batch_id == 0:
        return changed.withColumn("delta", F.col("new_count"))
    before = (
        spark.read.format("statestore")
        .option("batchId", batch_id - 1)
        .load(checkpoint)
        .select("key", F.col(f"value.{count_column}").alias("old_count"))
    )
    joined = changed.join(before, "key", "left")
    return joined.withColumn("delta", F.col("new_count") - F.coalesce(F.col("old_count"), F.lit(0)))


def progress_of(progress: Mapping[str, Any] | str) -> Mapping[str, Any]:
    """A ``StreamingQueryProgress`` as its JSON object (its ``json`` text, or the object itself)."""
    return json.loads(progress) if isinstance(progress, str) else progress


def batch_snapshot(
    *,
    region: str,
    key_type: KeyType,
    slot_bits: int,
    seq: int,
    progress: Mapping[str, Any],
    interval_seconds: float | None,
    window_start: datetime,
    window_end: datetime,
    partitions: list[PartitionState],
    frequencies: KeyFrequencies | None,
    version: int | None,
) -> Snapshot:
    """The snapshot of one micro-batch (module docstring): its items the batch's hot keys (exact), its
    channels the state partitions, its progress the batch's rates against its budget."""
    input_rows = int(progress.get("numInputRows") or 0)
    seconds = float((progress.get("durationMs") or {}).get("triggerExecution", 0)) / 1000.0
    if frequencies is None:
        taken = {state.partition: state.rows for state in partitions}
        items: list[CounterEntry] = []
        tuples, distinct = input_rows, sum(taken.values())
    else:
        taken = dict(frequencies.partition_rows)
        items = [CounterEntry(key, count, 0) for key, count in frequencies.hot]
        tuples, distinct = max(frequencies.total, input_rows), frequencies.changed_keys
    busiest = max(taken.values(), default=0)
    channels = tuple(
        ChannelMeasurement(
            state.partition,
            taken.get(state.partition, 0),
            seconds * taken.get(state.partition, 0) / busiest if busiest else 0.0,
            state.stored_bytes,
        )
        for state in partitions
    )
    return Snapshot(
        region=region,
        seq=seq,
        window_start=window_start,
        window_end=window_end,
        tuples=tuples,
        distinct_estimate=max(distinct, len(items)),
        epsilon=0.0,
        key_type=key_type,
        items=items,
        slot_bits=slot_bits,
        version=version,
        channels=channels,
        batch=int(progress["batchId"]),
        progress=BatchProgress(
            interval_seconds=interval_seconds,
            input_rows_per_second=_rate(progress.get("inputRowsPerSecond")),
            processed_rows_per_second=_rate(progress.get("processedRowsPerSecond")),
        ),
    ).checked()


def _rate(value: object) -> float | None:
    return float(value) if isinstance(value, int | float) and value == value else None
