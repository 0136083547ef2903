"""Structured Streaming queries under repart, end to end: a file source of JSON batches,
``foreachBatch(job.foreach_batch)`` and a checkpoint.

- Beside a running ``repart run`` daemon, with a processing-time trigger: the daemon's policy scales
  the region while the query runs, and the next micro-batch applies the plan.
- Ten trials in which the query's driver (a child process) is SIGKILLed at a random moment and the
  query restarted from its checkpoint; the region is scaled between trials, so kills also strike
  plans being applied. Afterwards the state equals a plain groupBy of every input file, with one
  snapshot and one report per batch and every plan applied.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pandas as pd
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession
from sqlalchemy import select
from sqlalchemy.orm import Session

from repart.controller.actions import scale
from repart.errors import Conflict, NotFound
from repart.spark import StatefulJob
from repart.state.store import StateStore
from repart.storage import make_engine, models
from repart.storage.client import SqlControllerClient
from tests.spark.children import class_data_archive

SCHEMA = "k string, trades long, volume long"
MERGE = "trades=count,volume=sum(qty)"
INPUT = "k string, qty long"

CHILD = f"""
import sys

from repart.spark import StatefulJob
from repart.spark.session import spark_session

db, state, incoming, checkpoint, mode = sys.argv[1:6]
spark = spark_session("local[2]", "streaming-trial", shuffle_partitions=2)
job = StatefulJob(db, region="trades", key="k", state=state, schema={SCHEMA!r}, merge={MERGE!r})
stream = spark.readStream.schema({INPUT!r}).option("maxFilesPerTrigger", 1).json(incoming)
writer = stream.writeStream.foreachBatch(job.foreach_batch).option("checkpointLocation", checkpoint)
trigger = {{"availableNow": True}} if mode == "available-now" else {{"processingTime": "1 second"}}
writer.trigger(**trigger).start().awaitTermination()
"""


def drop(incoming: Path, number: int, rows: int, rng: random.Random) -> pd.DataFrame:
    """Write input file ``number`` of ``rows`` skewed trades and return its rows."""
    keys = [f"k{int(rng.paretovariate(1.2)) % 200}" for _ in range(rows)]
    frame = pd.DataFrame({"k": keys, "qty": [rng.randint(1, 9) for _ in range(rows)]})
    temporary = incoming.parent / f".{number}.json"
    temporary.write_text("\n".join(json.dumps(row) for row in frame.to_dict("records")))
    os.replace(temporary, incoming / f"{number:04d}.json")  # the source sees whole files only
    return frame


def expected_state(frames: list[pd.DataFrame]) -> dict[str, tuple[int, int]]:
    grouped = pd.concat(frames).groupby("k")["qty"].agg(["size", "sum"])
    return {key: (int(row["size"]), int(row["sum"])) for key, row in grouped.iterrows()}


def stored_state(state: Path) -> dict[str, tuple[int, int]]:
    table = StateStore.open(state).read_merged()
    return {
        key: (trades, volume)
        for key, trades, volume in zip(
            table["k"].to_pylist(), table["trades"].to_pylist(), table["volume"].to_pylist(), strict=True
        )
    }


def last_batch_id(state: Path) -> int:
    """The last batch the store at ``state`` absorbed; -1 before its first (or before it exists)."""
    try:
        last = StateStore.open(state).last_batch
    except NotFound:
        return -1
    return -1 if last is None else last.batch_id


def check_once_per_batch(db: str, state: Path) -> None:
    """One snapshot and one report per batch of the store's sequence, and the plans the store applied
    are exactly those the controller has as applied (none failed, none left applying)."""
    store = StateStore.open(state)
    store.verify()
    assert store.last_batch is not None
    batches = store.last_batch.batch_id + 1
    engine = make_engine(db)
    with Session(engine) as session:
        snapshots = session.execute(select(models.Snapshot.seq, models.Snapshot.batch)).all()
        reported = session.scalars(select(models.BatchReport.batch)).all()
        plans = session.execute(select(models.Plan.id, models.Plan.status)).all()
    engine.dispose()
    assert sorted(snapshots) == [(seq, seq) for seq in range(batches)]
    assert sorted(reported) == list(range(batches))
    applied = tuple(sorted(plan_id for plan_id, status in plans if status == "applied"))
    # A scale replaces a pending plan; a plan made after the last batch waits for the next one.
    assert {status for _, status in plans} <= {"applied", "superseded", "pending"}
    assert sum(status == "pending" for _, status in plans) <= 1
    assert store.applied_plans == applied


@pytest.fixture
def region_db(tmp_path: Path) -> Iterator[str]:
    """A SQLite database with region ``trades`` (str keys, 2 to 6 channels, starting on 3), ticked."""
    db = f"sqlite:///{tmp_path / 'repart.db'}"
    arrow = pa.schema([("k", pa.string()), ("trades", pa.int64()), ("volume", pa.int64())])
    job = StatefulJob(db, region="trades", key="k", state=tmp_path / "state", schema=arrow, merge=MERGE)
    job.ensure_region(
        channels=3,
        min_channels=2,
        max_channels=6,
        settings={"target_utilization": 0.5},
    )
    assert job.engine is not None
    job.engine.dispose()
    yield db


@pytest.mark.slow
def test_a_processing_time_query_beside_the_daemon_applies_its_scale_steps(
    spark: SparkSession, tmp_path: Path, region_db: str
) -> None:
    incoming = tmp_path / "incoming"
    incoming.mkdir()
    rng = random.Random(7)
    frames = [drop(incoming, number, 3_000, rng) for number in range(6)]
    daemon = subprocess.Popen(
        [str(Path(sys.executable).parent / "repart"), "run", "--db", region_db, "--interval", "1"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    # Busy seconds modelled as rows / 100 per second against 10 s windows: the policy scales up.
    job = StatefulJob(
        region_db, region="trades", key="k", state=tmp_path / "state", schema=SCHEMA, merge=MERGE,
        channel_rate=100.0,
    )  # fmt: skip
    stream = spark.readStream.schema(INPUT).option("maxFilesPerTrigger", 1).json(str(incoming))
    query = (
        stream.writeStream.foreachBatch(job.foreach_batch)
        .option("checkpointLocation", str(tmp_path / "checkpoint"))
        .trigger(processingTime="1 second")
        .start()
    )
    try:
        deadline = time.monotonic() + 240
        while time.monotonic() < deadline and query.exception() is None:
            if last_batch_id(tmp_path / "state") >= len(frames) - 1:
                break
            time.sleep(0.5)
    finally:
        query.stop()
        daemon.send_signal(signal.SIGTERM)
        daemon.wait(timeout=60)
    assert query.exception() is None
    store = StateStore.open(tmp_path / "state")
    assert store.last_batch is not None and store.last_batch.batch_id == len(frames) - 1
    assert store.n_channels > 3 and store.applied_plans  # a scale step landed and was applied
    assert stored_state(tmp_path / "state") == expected_state(frames)
    check_once_per_batch(region_db, tmp_path / "state")


@pytest.mark.slow
def test_a_query_killed_at_random_moments_and_restarted_counts_every_row_once(
    tmp_path: Path, tmp_path_factory: pytest.TempPathFactory, region_db: str
) -> None:
    archive, options = class_data_archive(tmp_path_factory.getbasetemp().parent, tmp_path)
    if not archive.exists():  # made by the exactly-once trials; only a child that exits could make it
        options = ""
    environment = os.environ | {"PYSPARK_SUBMIT_ARGS": f"--driver-java-options '{options}' pyspark-shell"}
    incoming, state, checkpoint = tmp_path / "incoming", tmp_path / "state", tmp_path / "checkpoint"
    incoming.mkdir()
    engine = make_engine(region_db)
    client = SqlControllerClient(engine)
    rng = random.Random(2026)
    frames: list[pd.DataFrame] = []

    def start(mode: str) -> subprocess.Popen[bytes]:
        arguments = [region_db, str(state), str(incoming), str(checkpoint), mode]
        return subprocess.Popen(
            [sys.executable, "-c", CHILD, *arguments],
            env=environment,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
        )

    for trial in range(10):
        for _ in range(2):
            frames.append(drop(incoming, len(frames), rng.randint(500, 3_000), rng))
        if trial % 3 == 1:  # a plan for the next run to apply (Conflict: a killed run was applying one)
            applied = client.applied_function("trades").function.n_channels
            with contextlib.suppress(Conflict):
                scale(engine, "trades", rng.choice([n for n in range(2, 7) if n != applied]))
        child = start("processing-time")
        time.sleep(rng.uniform(4.0, 16.0))
        child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
    child = start("available-now")
    _, stderr = child.communicate(timeout=600)
    assert child.returncode == 0, stderr.decode()[-3000:]
    engine.dispose()
    assert stored_state(state) == expected_state(frames)
    check_once_per_batch(region_db, state)
