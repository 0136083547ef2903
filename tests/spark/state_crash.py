"""Trials of a driver killed with SIGKILL while it repartitions a streaming query's checkpoint, shared by
the suite (``test_spark_state_crash.py``, a few trials) and ``benchmarks/spark_state.py --sections
crash`` (ten).

Each trial: an operator scales the ``spark-state`` region (a pending plan); a child process starts a
``ManagedQuery`` on the stopped query's checkpoint, which claims the plan and repartitions, and is
killed ``delay`` seconds after Spark's repartition began (before it started, in the middle, or after it
finished but before the plan was reported). Then this process starts a ``ManagedQuery`` on the same
checkpoint, which finds the plan ``applying`` and finishes it, and runs the query on new input: the
plan must end ``applied``, the checkpoint at its count, and the state equal to a batch ``groupBy`` of
every file the query read.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from pyspark.sql import functions as F

from repart.controller import service
from repart.controller.actions import scale
from repart.controller.tick import tick
from repart.spark.streaming import ManagedQuery
from repart.spark.streaming.checkpoint import checkpoint_batches
from repart.storage import RegionConfig, make_engine, run_in_transaction, upgrade
from repart.storage.plans import get_plan

ROCKSDB = {
    "spark.sql.streaming.stateStore.providerClass": (
        "org.apache.spark.sql.execution.streaming.state.RocksDBStateStoreProvider"
    ),
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled": "true",
}
REGION = "crash"
CHILD_LEASE_SECONDS = 1.0

CHILD = f"""
import os, signal, sys, threading, time

import repart.spark.streaming.managed as managed_module
from repart.spark.session import spark_session
from repart.spark.streaming import ManagedQuery

db, checkpoint, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])
spark = spark_session("local[2]", "crash-trial", shuffle_partitions=2, config={ROCKSDB!r})
real = managed_module.repartition_checkpoint


def killed_during(*args, **kwargs):
    threading.Timer(delay, lambda: os.kill(os.getpid(), signal.SIGKILL)).start()
    print("repartitioning", flush=True)
    result = real(*args, **kwargs)
    print("repartitioned", flush=True)
    return result


def waits(location):
    time.sleep(600)  # the kill comes first


managed_module.repartition_checkpoint = killed_during
managed = ManagedQuery(waits, checkpoint=checkpoint, region={REGION!r}, controller=db, spark=spark,
                       lease_seconds={CHILD_LEASE_SECONDS!r})
managed.start()
"""


@dataclass(frozen=True)
class Trial:
    """What one trial saw: the kill's delay, the target count, where the child got to (``printed``: its
    last line), the checkpoint's state after the kill (``before``, ``unfinished`` or ``done``), and
    the recovery's seconds."""

    delay: float
    target: int
    printed: str
    after_kill: str
    recovery_seconds: float


class CrashBench:
    """A ``spark-state`` region over an aggregation's checkpoint in ``root``, and its trials."""

    def __init__(self, spark: Any, root: Path, java_options: str = "") -> None:
        self.spark, self.root, self.java_options = spark, root, java_options
        self.source, self.checkpoint = root / "in", str(root / "ck")
        self.source.mkdir()
        self.db = f"sqlite:///{root / 'repart.db'}"
        self.engine = make_engine(self.db)
        upgrade(self.engine)
        config = RegionConfig(key_type="str", n_channels_initial=2, max_channels=16, engine="spark-state")
        run_in_transaction(self.engine, lambda s: service.create_region(s, REGION, config))
        tick(self.engine, REGION)
        self.rng = np.random.default_rng(11)
        self.files = 0
        self.run_query()

    def start(self, location: str) -> Any:
        stream = self.spark.readStream.schema("k string, v long").json(str(self.source))
        totals = stream.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s"))
        return (
            totals.writeStream.format("noop")
            .outputMode("complete")
            .option("checkpointLocation", location)
            .trigger(processingTime="0.2 seconds")
            .start()
        )

    def write_file(self) -> None:
        keys = self.rng.zipf(1.3, 3000) % 400
        frame = pd.DataFrame({"k": [f"k{key}" for key in keys], "v": self.rng.integers(1, 100, 3000)})
        temporary = self.source / f".part-{self.files}"
        frame.to_json(temporary, orient="records", lines=True)
        os.rename(temporary, self.source / f"part-{self.files:03d}.json")
        self.files += 1

    def run_query(self) -> float:
        """Start a ``ManagedQuery`` (finishing a plan left ``applying``), run it on a new file, stop it;
        the seconds its start took."""
        for key, value in ROCKSDB.items():
            self.spark.conf.set(key, value)
        managed = ManagedQuery(
            self.start, checkpoint=self.checkpoint, region=REGION, controller=self.db, spark=self.spark
        )
        started = time.perf_counter()
        managed.start()
        seconds = time.perf_counter() - started
        self.write_file()
        assert managed.query is not None
        managed.query.processAllAvailable()
        managed.stop()
        return seconds

    def trial(self, delay: float, target: int) -> Trial:
        """One trial (module docstring); AssertionError when the recovery is not exact."""
        plan_id = scale(self.engine, REGION, target, reason="crash trial").plan_id
        options = f"--driver-java-options '{self.java_options}' pyspark-shell"
        child = subprocess.run(
            [sys.executable, "-c", CHILD, self.db, self.checkpoint, str(delay)],
            env=os.environ | {"PYSPARK_SUBMIT_ARGS": options},
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert child.returncode == -signal.SIGKILL, (child.returncode, child.stderr[-3000:])
        printed = (child.stdout.strip().splitlines() or ["(nothing)"])[-1]
        time.sleep(CHILD_LEASE_SECONDS + 0.2)  # the killed driver's lease expires
        batches = checkpoint_batches(self.spark, self.checkpoint)
        if batches.unfinished_repartition is not None:
            after_kill = "unfinished"
        else:
            after_kill = "done" if batches.committed_partitions == target else "before"
        recovery = self.run_query()
        plan = run_in_transaction(self.engine, lambda s: get_plan(s, plan_id).status)
        assert plan == "applied", (plan_id, plan)
        assert checkpoint_batches(self.spark, self.checkpoint).committed_partitions == target
        self.check_state()
        return Trial(delay, target, printed, after_kill, recovery)

    def check_state(self) -> None:
        """The newest state equals a batch ``groupBy`` of every file written (all were read)."""
        state = self.spark.read.format("statestore").load(self.checkpoint)
        got = state.select(
            F.col("key.k").alias("k"), F.col("value.count").alias("n"), F.col("value.sum").alias("s")
        )
        everything = self.spark.read.schema("k string, v long").json(str(self.source))
        expected = everything.groupBy("k").agg(F.count("*").alias("n"), F.sum("v").alias("s"))
        assert expected.exceptAll(got).count() == 0 and got.exceptAll(expected).count() == 0
