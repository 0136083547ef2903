"""A real Structured Streaming aggregation under ``ManagedQuery``: a skewed file-source stream whose
load grows, its state measured from Spark's own state and change feed, its state partition count
changed by the controller during the run through Spark's offline repartition, and its totals equal to
a batch ``groupBy`` of all its input after every step."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pytest
from pyspark.sql import functions as F
from sqlalchemy import Engine

from repart.controller import service
from repart.controller.tick import tick
from repart.errors import Conflict, InvalidInput
from repart.spark.streaming import ManagedQuery
from repart.spark.streaming import checkpoint as checkpoint_module
from repart.spark.streaming.checkpoint import batch_ids, repartition_checkpoint, state_partition_count
from repart.storage import RegionConfig, make_engine, run_in_transaction
from repart.storage.schema import upgrade
from tests.factories import plans, row_counts

ROCKSDB = {
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
}


@pytest.fixture
def rocksdb(spark_settings_restored: Any) -> Any:
    """The session with the RocksDB provider and changelog checkpointing (put back after the test)."""
    for key, value in ROCKSDB.items():
        spark_settings_restored.conf.set(key, value)
    return spark_settings_restored


def write_batch(
    directory: Path, index: int, rows: int, rng: np.random.Generator, *, timestamps: bool = False
) -> None:
    """A file of ``rows`` rows of Zipf(1.3) keys over 300 (with an event time when ``timestamps``),
    renamed into ``directory`` whole, as a file source wants it."""
    keys = rng.zipf(1.3, rows) % 300
    frame = pd.DataFrame({"k": [f"k{key}" for key in keys], "v": np.ones(rows, dtype=np.int64)})
    if timestamps:
        frame["ts"] = "2026-01-01T00:00:00Z"
    temporary = directory / f".part-{index}"
    frame.to_json(temporary, orient="records", lines=True)
    os.rename(temporary, directory / f"part-{index:03d}.json")


def state_region(root: Path, name: str) -> tuple[str, Engine]:
    """A database in ``root`` with ``spark-state`` region ``name`` at its initial count (2, at most 8)
    under a 0.2 s batch budget, so that the test's load scales it."""
    db = f"sqlite:///{root}/repart.db"
    engine = make_engine(db)
    upgrade(engine)
    region = RegionConfig(
        key_type="str",
        n_channels_initial=2,
        policy="target-utilization",
        max_channels=8,
        engine="spark-state",
        settings={"batch_interval_seconds": 0.2, "stabilization_batches": 1},
    )
    run_in_transaction(engine, lambda s: service.create_region(s, name, region))
    tick(engine, name)
    return db, engine


def _assert_state_matches_the_input_read(spark: Any, checkpoint: str, source: Path) -> None:
    """Every key's count in the newest committed state equals its count in the files the query read
    (the source's log names them), after every step."""
    committed = batch_ids(spark, f"{checkpoint}/commits")
    if not committed:
        return
    batch = committed[-1]
    log = spark.read.text(f"{checkpoint}/sources/0").where(F.col("value").startswith("{")).collect()
    entries = [json.loads(row["value"]) for row in log]
    files = sorted({entry["path"] for entry in entries if entry["batchId"] <= batch})
    state = spark.read.format("statestore").option("batchId", batch).load(checkpoint)
    got = state.select(F.col("key.k").alias("k"), F.col("value.count").alias("n"))
    expected = spark.read.schema("k string, v long").json(files).groupBy("k").agg(F.count("*").alias("n"))
    assert expected.exceptAll(got).count() == 0 and got.exceptAll(expected).count() == 0, batch


def test_the_controller_changes_the_state_partition_count_of_a_running_aggregation_exactly(
    rocksdb: Any, tmp_path: Path
) -> None:
    spark = rocksdb
    source, checkpoint = tmp_path / "in", str(tmp_path / "ck")
    source.mkdir()
    db, engine = state_region(tmp_path, "agg")

    def start(location: str) -> Any:
        stream = spark.readStream.schema("k string, v long").option("maxFilesPerTrigger", 1).json(str(source))
        totals = stream.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s"))
        return (
            totals.writeStream.format("memory")
            .queryName("agg_totals")
            .outputMode("complete")
            .option("checkpointLocation", location)
            .trigger(processingTime="0.5 seconds")
            .start()
        )

    rng = np.random.default_rng(7)
    managed = ManagedQuery(start, checkpoint=checkpoint, region="agg", controller=db, tick=True, spark=spark)
    write_batch(source, 0, 500, rng)
    managed.start()
    # A second driver may not run the region's query, nor repartition its checkpoint, meanwhile.
    second = ManagedQuery(start, checkpoint=checkpoint, region="agg", controller=db, spark=spark)
    with pytest.raises(Conflict, match="running query"):
        second.start()
    assert second.query is None and len(spark.streams.active) == 1
    files, deadline = 1, time.monotonic() + 120
    while time.monotonic() < deadline and (files < 4 or len(managed.applied) < 1):
        managed.poll()
        _assert_state_matches_the_input_read(spark, checkpoint, source)
        if files < 12:  # more input while the count has not changed yet
            write_batch(source, files, 2000 * files, rng)
            files += 1
        time.sleep(0.3)
    assert managed.query is not None
    managed.query.processAllAvailable()  # every file written is read before the query stops
    managed.stop()

    assert managed.applied, "the controller changed the count during the run"
    for applied in managed.applied:
        assert applied.from_partitions != applied.to_partitions
    applied_plans = plans(engine, "applied", region="agg")
    assert [p.id for p in applied_plans] == [a.plan_id for a in managed.applied]
    assert state_partition_count(spark, checkpoint) == managed.applied[-1].to_partitions
    everything = spark.read.schema("k string, v long").json(str(source))
    expected = everything.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s"))
    # The state itself, read back with Spark's state data source: the query's totals per key.
    state = spark.read.format("statestore").load(checkpoint)
    got = state.select(
        F.col("key.k").alias("k"), F.col("value.count").alias("n"), F.col("value.sum").alias("s")
    )
    assert expected.exceptAll(got).count() == 0 and got.exceptAll(expected).count() == 0
    # Nothing holds the checkpoint once the query stopped; a count that matches is already done.
    done = repartition_checkpoint(spark, checkpoint, managed.applied[-1].to_partitions)
    assert done.seconds == 0.0
    before = row_counts(engine)
    with pytest.raises(InvalidInput, match=r"^checkpoint must be a stateful streaming query's checkpoint"):
        state_partition_count(spark, str(tmp_path / "in"))
    assert row_counts(engine) == before


def test_a_deduplication_is_rescaled_by_its_state_rows_and_emits_each_key_once(
    rocksdb: Any, tmp_path: Path
) -> None:
    spark = rocksdb
    source, checkpoint, output = tmp_path / "in", str(tmp_path / "ck"), str(tmp_path / "out")
    source.mkdir()
    db, _ = state_region(tmp_path, "dedup")

    def start(location: str) -> Any:
        stream = (
            spark.readStream.schema("k string, v long, ts timestamp")
            .option("maxFilesPerTrigger", 1)
            .json(str(source))
        )
        unique = stream.withWatermark("ts", "1 hour").dropDuplicatesWithinWatermark(["k"])
        # Each batch's rows under its batch id, overwritten if the batch runs again. (Spark's file sink
        # does not restart after an offline repartition: its log has no entry for the repartition's
        # batch, BATCH_METADATA_NOT_FOUND.)
        return (
            unique.writeStream.foreachBatch(
                lambda rows, batch: rows.write.mode("overwrite").parquet(f"{output}/batch={batch}")
            )
            .option("checkpointLocation", location)
            .trigger(processingTime="0.5 seconds")
            .start()
        )

    rng = np.random.default_rng(3)
    managed = ManagedQuery(
        start, checkpoint=checkpoint, region="dedup", controller=db, count_column=None, tick=True, spark=spark
    )
    write_batch(source, 0, 300, rng, timestamps=True)
    managed.start()
    files, deadline = 1, time.monotonic() + 120
    while time.monotonic() < deadline and (files < 4 or not managed.applied):
        managed.poll()
        if files < 12:  # more input while the count has not changed yet
            write_batch(source, files, 1500 * files, rng, timestamps=True)
            files += 1
        time.sleep(0.3)
    managed.query.processAllAvailable()  # type: ignore[union-attr]
    managed.stop()

    assert managed.applied and not managed.failed
    assert state_partition_count(spark, checkpoint) == managed.applied[-1].to_partitions
    emitted = spark.read.parquet(output)
    keys = spark.read.schema("k string, v long, ts timestamp").json(str(source)).select("k").distinct()
    assert emitted.count() == emitted.select("k").distinct().count()  # each key once
    assert (
        emitted.select("k").exceptAll(keys).count() == 0 and keys.exceptAll(emitted.select("k")).count() == 0
    )


def _files(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` with its bytes."""
    return {
        str(path.relative_to(root)): path.read_bytes() for path in sorted(root.rglob("*")) if path.is_file()
    }


def test_a_refused_repartition_leaves_the_checkpoint_as_it_was(
    spark_settings_restored: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    spark = spark_settings_restored
    spark.conf.set(checkpoint_module.PROVIDER_SETTING, checkpoint_module.DEFAULT_PROVIDER)
    source, checkpoint = tmp_path / "in", str(tmp_path / "ck")
    source.mkdir()
    rng = np.random.default_rng(5)

    def run_once() -> None:
        stream = spark.readStream.schema("k string, v long").json(str(source))
        totals = stream.groupBy("k").agg(F.count("*").alias("n"))
        query = (
            totals.writeStream.format("noop")
            .outputMode("complete")
            .option("checkpointLocation", checkpoint)
            .trigger(availableNow=True)
            .start()
        )
        query.awaitTermination()

    write_batch(source, 0, 400, rng)
    run_once()  # the default provider, which Spark does not repartition
    logged = _files(Path(checkpoint))
    with pytest.raises(InvalidInput, match=r"^checkpoint must keep its state with .*RocksDB"):
        repartition_checkpoint(spark, checkpoint, 8)
    assert _files(Path(checkpoint)) == logged
    # Past repart's own check, Spark refuses only after logging the repartition's batch: it is removed.
    monkeypatch.setattr(checkpoint_module, "check_provider", lambda *_: None)
    with pytest.raises(InvalidInput, match="UNSUPPORTED_PROVIDER"):
        repartition_checkpoint(spark, checkpoint, 8)
    assert _files(Path(checkpoint)) == logged
    write_batch(source, 1, 400, rng)
    run_once()  # the query starts on the checkpoint and goes on exactly
    state = spark.read.format("statestore").load(checkpoint)
    got = state.select(F.col("key.k").alias("k"), F.col("value.count").alias("n"))
    expected = (
        spark.read.schema("k string, v long").json(str(source)).groupBy("k").agg(F.count("*").alias("n"))
    )
    assert expected.exceptAll(got).count() == 0 and got.exceptAll(expected).count() == 0
