"""The Spark-managed state demo (``repart demo --spark-state``): a Structured Streaming aggregation
whose load grows, under ``ManagedQuery`` and the controller in-process.

A file source receives one file of clicks per batch, keys drawn from Zipf(1.2) over 2,000 users,
each file 40 % larger than the one before. The query counts clicks per user with the RocksDB state
store; the controller ticks after every batch and changes the query's state partition count when its
batches run over their budget. After every batch the state, read back with Spark's state data
source, must equal a plain ``groupBy`` of every file the query has read.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import SparkSession
from pyspark.sql import functions as F

from repart.spark.streaming import ManagedQuery
from repart.spark.streaming.checkpoint import ROCKSDB_PROVIDER, batch_ids, state_partition_count
from repart.spark.streaming.measure import CHANGELOG_SETTING
from repart.validation import Interval, check

REGION = "clicks"
USERS = 2000
FIRST_FILE_ROWS = 20_000
GROWTH = 1.4
TRIGGER_SECONDS = 1.0
BATCHES = Interval(int, 1, 30)


@dataclass(frozen=True)
class StateDemoRow:
    """One measured batch: its id, its input rows, the state partitions it ran with, its seconds
    against the trigger, and whether the state equalled the ``groupBy`` of the input read so far."""

    batch: int
    rows: int
    partitions: int
    seconds: float
    exact: bool


@dataclass(frozen=True)
class StateDemoResult:
    """The rows, the plans applied (id, from, to, state rows, bytes, seconds) and the verdict."""

    rows: tuple[StateDemoRow, ...]
    applied: tuple[dict[str, Any], ...]

    @property
    def exact(self) -> bool:
        """The state equalled the input's ``groupBy`` after every batch."""
        return all(row.exact for row in self.rows)

    def to_json(self) -> dict[str, Any]:
        """The result as a JSON object."""
        rows = [asdict(row) for row in self.rows]
        return {"rows": rows, "applied": list(self.applied), "exact": self.exact}


def run_spark_state_demo(
    batches: int, workdir: Path, master: str, seed: int, on_batch: Callable[[StateDemoRow], None]
) -> StateDemoResult:
    """Run the demo (module docstring) for ``batches`` files in ``workdir`` (emptied first), calling
    ``on_batch`` with each measured batch's row."""
    from repart.controller import service
    from repart.controller.tick import tick
    from repart.spark.session import spark_session
    from repart.storage import RegionConfig, make_engine, run_in_transaction, upgrade

    check("batches", batches, BATCHES)
    shutil.rmtree(workdir, ignore_errors=True)
    source, checkpoint = workdir / "clicks", str(workdir / "checkpoint")
    source.mkdir(parents=True)
    db = f"sqlite:///{workdir / 'repart.db'}"
    engine = make_engine(db)
    upgrade(engine)
    region = RegionConfig(
        key_type="str",
        n_channels_initial=2,
        policy="target-utilization",
        max_channels=16,
        engine="spark-state",
        settings={"stabilization_batches": 1},
    )
    run_in_transaction(engine, lambda session: service.create_region(session, REGION, region))
    tick(engine, REGION)
    spark = spark_session(
        master,
        "repart-demo-spark-state",
        shuffle_partitions=2,
        config={"spark.sql.streaming.stateStore.providerClass": ROCKSDB_PROVIDER, CHANGELOG_SETTING: "true"},
    )
    rng = np.random.default_rng(seed)

    def start(location: str) -> Any:
        clicks = spark.readStream.schema("user string").option("maxFilesPerTrigger", 1).json(str(source))
        per_user = clicks.groupBy("user").agg(F.count("*").alias("clicks"))
        return (
            per_user.writeStream.format("noop")
            .outputMode("update")
            .option("checkpointLocation", location)
            .trigger(processingTime=f"{TRIGGER_SECONDS} seconds")
            .start()
        )

    def write(index: int) -> None:
        rows = int(FIRST_FILE_ROWS * GROWTH**index)
        users = rng.zipf(1.2, rows) % USERS
        frame = pd.DataFrame({"user": [f"user-{user}" for user in users]})
        frame.to_json(source / f".{index}.json", orient="records", lines=True)
        os.replace(source / f".{index}.json", source / f"clicks-{index:03d}.json")

    managed = ManagedQuery(
        start,
        checkpoint=checkpoint,
        region=REGION,
        controller=db,
        count_column="count",  # Spark's name for count(*) in the state
        trigger_seconds=TRIGGER_SECONDS,
        tick=True,
        spark=spark,
    )
    managed.start()
    rows = []
    for index in range(batches):
        write(index)
        assert managed.query is not None
        managed.query.processAllAvailable()
        for progress in managed.poll():  # measure, tick, and apply a plan between batches
            row = StateDemoRow(
                batch=int(progress["batchId"]),
                rows=int(progress["numInputRows"]),
                partitions=state_partition_count(spark, checkpoint),
                seconds=progress["durationMs"]["triggerExecution"] / 1000,
                exact=state_equals_input(spark, checkpoint),
            )
            rows.append(row)
            on_batch(row)
    managed.stop()
    applied = tuple(
        {
            "plan": a.plan_id,
            "from": a.from_partitions,
            "to": a.to_partitions,
            "state_rows": a.state_rows,
            "state_bytes": a.state_bytes,
            "seconds": round(a.seconds, 3),
        }
        for a in managed.applied
    )
    return StateDemoResult(tuple(rows), applied)


def state_equals_input(spark: SparkSession, checkpoint: str) -> bool:
    """Whether each user's count in the newest committed state equals a plain ``groupBy`` of the files
    the query read up to that batch (as its source's log names them)."""
    committed = batch_ids(spark, f"{checkpoint}/commits")
    if not committed:
        return True
    batch = committed[-1]
    log = spark.read.text(f"{checkpoint}/sources/0").where(F.col("value").startswith("{")).collect()
    entries = [json.loads(row["value"]) for row in log]
    files = sorted({entry["path"] for entry in entries if entry["batchId"] <= batch})
    state = spark.read.format("statestore").option("batchId", batch).load(checkpoint)
    got = state.select(F.col("key.user").alias("user"), F.col("value.count").alias("clicks"))
    if not files:
        return got.count() == 0
    clicks = spark.read.schema("user string").json(files)
    expected = clicks.groupBy("user").agg(F.count("*").alias("clicks"))
    return expected.exceptAll(got).count() == 0 and got.exceptAll(expected).count() == 0
