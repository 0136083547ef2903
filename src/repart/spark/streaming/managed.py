"""``ManagedQuery``: a user's stateful Structured Streaming query, run under repart's control of its
state partition count.

The query is the user's, unchanged: ``start(checkpoint)`` builds and starts it with that checkpoint
location. ``ManagedQuery`` runs it over a ``spark-state`` region and, as batches complete:

1. **measures** each new batch (``repart.spark.streaming.measure``) and submits its snapshot;
2. runs one controller tick when ``tick`` is on (the embedded controller; else a daemon ticks);
3. **activates** a plan the controller stored: it stops the query at a batch boundary, repartitions
   the checkpoint to the plan's count (``repart.spark.streaming.checkpoint``), restarts the query with
   ``start`` and reports the plan applied, with the state's rows and bytes (``applied`` keeps the
   seconds; a repartition Spark refuses is reported ``failed``, in ``failed``, and the query goes on
   at its count; any other failure of Spark's leaves the plan ``applying``, raised as Conflict, for
   the next ``start`` to finish).

The plan's life is the controller's (pending → applying → applied | failed), with Spark's own states
in it (``repart.spark.streaming.checkpoint.CheckpointBatches``): a driver killed while Spark
repartitions leaves the plan ``applying`` and the checkpoint with an unfinished repartition (the
repartition's batch logged with its new count, not committed), which Spark lets only the same count
finish and refuses to start the query on; the next ``start`` finds the plan ``applying`` and
repartitions to its count again, which finishes it. A committed count that already matches means the
plan was done. PySpark's ``stop()`` interrupts a running batch, after which Spark refuses to
repartition, so the query is stopped only while its trigger waits; a batch interrupted anyway is
finished by running the query until it commits, then stopping again.

While the query runs, its driver holds the region's query lease (``repart.storage.query_leases``),
renewed by a thread every third of ``lease_seconds`` and before a repartition: nothing else
repartitions the checkpoint meanwhile. A driver restarted sooner than ``lease_seconds`` after a kill
finds its predecessor's lease still live (Conflict) and starts once it expires.
"""

from __future__ import annotations

import contextlib
import os
import socket
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from pyspark.sql import SparkSession
from pyspark.sql.streaming.query import StreamingQuery
from sqlalchemy import Engine

from repart.errors import Conflict, InvalidInput
from repart.migration import MigrationPlan
from repart.spark.streaming.checkpoint import (
    batch_ids,
    checkpoint_batches,
    reachable_checkpoint,
    repartition_checkpoint,
    state_partition_count,
)
from repart.spark.streaming.measure import (
    batch_snapshot,
    check_change_feed,
    check_state_key,
    key_frequencies,
    partition_state,
    progress_of,
)
from repart.validation import POSITIVE, Matches, check

CHECKPOINT = Matches(r"(?s).+", "a non-empty location")
DEFAULT_LEASE_SECONDS = 120.0
"""How long a query lease lasts past its last renewal (a killed driver's lease ends after it)."""


@dataclass(frozen=True)
class Applied:
    """A plan ``ManagedQuery`` applied: its id, the counts, the state's rows and bytes, and seconds."""

    plan_id: int
    from_partitions: int
    to_partitions: int
    state_rows: int
    state_bytes: int
    seconds: float


class ManagedQuery:
    """Run ``start``'s streaming query over ``region`` (a ``spark-state`` region) with its state in
    ``checkpoint`` (module docstring).

    ``controller`` is the controller's database URL. ``count_column`` names the state's count value (for
    ``groupBy(k).agg(count("*"))`` Spark names it ``count``), whose change-feed deltas are the keys'
    frequencies; None for a deduplication, balanced by state rows only. ``trigger_seconds`` is the
    query's trigger interval, the time a batch has (None: the time since the previous batch started).
    ``tick`` runs a controller tick after each measured batch. InvalidInput naming the field for bad
    values; the region's engine and the checkpoint are checked when the query starts.
    """

    def __init__(
        self,
        start: Callable[[str], StreamingQuery],
        *,
        checkpoint: str,
        region: str,
        controller: str,
        count_column: str | None = "count",
        trigger_seconds: float | None = None,
        tick: bool = False,
        spark: SparkSession | None = None,
        lease_seconds: float = DEFAULT_LEASE_SECONDS,
    ) -> None:
        from repart.storage import make_engine

        if not callable(start):
            raise InvalidInput(
                "start", f"must be a function of the checkpoint that starts the query, got {start!r}"
            )
        self.start_query = start
        self.checkpoint = check("checkpoint", checkpoint, CHECKPOINT)
        self.region = region
        self.count_column = count_column
        self.trigger_seconds = (
            None if trigger_seconds is None else check("trigger_seconds", trigger_seconds, POSITIVE)
        )
        self.tick = tick
        self.lease_seconds = check("lease_seconds", lease_seconds, POSITIVE)
        self.engine: Engine = make_engine(controller)
        self.spark = spark or SparkSession.active()
        self.holder = f"{socket.gethostname()}:{os.getpid()}:{id(self):x}"
        self.query: StreamingQuery | None = None
        self.applied: list[Applied] = []
        self.failed: list[tuple[int, str]] = []
        self._warming_up = False
        self._partitions: int | None = None
        self._renewing = threading.Event()
        self._lease_lost: Exception | None = None
        self._key_checked = False
        self._measured: int | None = None
        self._previous_start: datetime | None = None

    # --- life cycle ------------------------------------------------------------------------------------
    def start(self) -> StreamingQuery:
        """Take the region's query lease, finish a plan a killed driver left ``applying``, and start the
        query (on a fresh checkpoint, with the applied count as ``spark.sql.shuffle.partitions``)."""
        region = self._region()
        if region.engine != "spark-state":
            raise InvalidInput(
                "region", f"must be a spark-state region, got {self.region!r} with engine {region.engine!r}"
            )
        if region.applied_version is None:
            raise InvalidInput(
                "region",
                f"must have an applied count: run `repart tick --region {self.region}` once first",
            )
        reachable_checkpoint(self.spark, self.checkpoint)
        self._renew()
        self._keep_lease()
        if _fresh(self.spark, self.checkpoint):
            self.spark.conf.set("spark.sql.shuffle.partitions", str(self._applied_count()))
        self._finish_applying()
        self.query = self._start_query()
        return self.query

    def stop(self) -> None:
        """Stop the query at a batch boundary and release the lease."""
        self._stop_at_boundary()
        self._renewing.set()
        from repart.storage import run_in_transaction
        from repart.storage.query_leases import release_query_lease

        run_in_transaction(
            self.engine, lambda session: release_query_lease(session, self.region, self.holder)
        )

    def poll(self) -> list[Mapping[str, Any]]:
        """Measure the batches completed since the last poll, tick when ``tick`` is on, and apply a plan
        the controller stored (module docstring). Returns the progress (Spark's JSON object) of each
        batch measured. The first batch after each start of the query is not measured: its time is
        the query's start (loading the state stores), not the load."""
        query = self._running()
        if self._lease_lost is not None:
            self._stop_at_boundary()
            raise Conflict(f"the query's lease of region {self.region!r} was lost: {self._lease_lost}")
        measured: list[Mapping[str, Any]] = []
        committed = batch_ids(self.spark, f"{self.checkpoint}/commits")
        for progress in [progress_of(p.json) for p in query.recentProgress]:
            batch = int(progress["batchId"])
            if (self._measured is not None and batch <= self._measured) or not progress.get("stateOperators"):
                continue
            if not committed or batch > committed[-1]:
                break  # its commit is not written yet: measured at the next poll
            self._measured = batch
            if self._warming_up:
                self._warming_up = False
                continue
            self._measure(progress)
            measured.append(progress)
        if measured:
            if self.tick:
                self._tick()
            self._apply_pending()
        return measured

    # --- measure ---------------------------------------------------------------------------------------
    def _measure(self, progress: Mapping[str, Any]) -> None:
        from repart.storage.client import SqlControllerClient

        region = self._region()
        batch = int(progress["batchId"])
        started = datetime.fromisoformat(str(progress["timestamp"]).replace("Z", "+00:00"))
        interval = self.trigger_seconds
        if interval is None and self._previous_start is not None:
            gap = (started - self._previous_start).total_seconds()
            interval = gap if gap > 0 else None
        self._previous_start = started
        duration_ms = progress["durationMs"]["triggerExecution"]
        if self._partitions is None:  # read once; a repartition of this driver's sets it
            self._partitions = state_partition_count(self.spark, self.checkpoint)
        n = self._partitions
        frequencies = None
        if self.count_column is not None:
            if not self._key_checked:  # once: what the change feed and Spark's hash need
                check_change_feed(self.spark, self.checkpoint)
                check_state_key(self.spark, self.checkpoint, region.key_type)
                self._key_checked = True
            frequencies = key_frequencies(self.spark, self.checkpoint, batch, self.count_column)
        snapshot = batch_snapshot(
            region=self.region,
            key_type=region.key_type,
            slot_bits=region.slot_bits,
            seq=batch,
            progress=progress,
            interval_seconds=interval,
            window_start=started,
            window_end=started + timedelta(milliseconds=max(1, int(duration_ms))),
            partitions=partition_state(self.spark, self.checkpoint, n),
            frequencies=frequencies,
            version=region.applied_version,
        )
        SqlControllerClient(self.engine).submit_snapshot(snapshot)

    def _tick(self) -> None:
        from repart.controller.tick import tick

        with contextlib.suppress(Conflict):  # another tick (a daemon's) acted meanwhile
            tick(self.engine, self.region)

    # --- activate --------------------------------------------------------------------------------------
    def _apply_pending(self) -> None:
        from repart.storage.client import SqlControllerClient

        todo = SqlControllerClient(self.engine).claim_next_plan(self.region)
        if todo is None:
            return
        self._stop_at_boundary()
        self._apply(todo.plan_id, todo.plan_json)
        self._previous_start = None  # the time the query was stopped is no batch's interval
        self.query = self._start_query()

    def _finish_applying(self) -> None:
        """Apply a plan left ``applying`` (a driver killed in the middle), before the query starts."""
        from repart.storage.client import SqlControllerClient

        todo = SqlControllerClient(self.engine).claim_next_plan(self.region)
        if todo is not None:
            self._apply(todo.plan_id, todo.plan_json)

    def _apply(self, plan_id: int, plan_json: str) -> None:
        """Repartition the stopped query's checkpoint to the plan's count and report the plan applied (on a
        checkpoint without a committed batch, the query starts at the plan's count: nothing to move).
        A repartition Spark refuses (InvalidInput: an unsupported provider or operator, say) is reported
        ``failed`` with Spark's reason, and the query goes on at its count; a lease another driver holds
        (Conflict) stops everything, the plan still ``applying``."""
        from repart.storage.client import SqlControllerClient

        client = SqlControllerClient(self.engine)
        plan = MigrationPlan.from_json(plan_json)
        target = plan.target_n_channels
        self._renew()  # Conflict when another driver holds the checkpoint: nothing runs then
        if _fresh(self.spark, self.checkpoint):  # no batch yet: the query starts at the plan's count
            self.spark.conf.set("spark.sql.shuffle.partitions", str(target))
            client.report_plan(plan_id, "applied", moved_rows=0, moved_bytes=0)
            self.applied.append(Applied(plan_id, plan.source_n_channels, target, 0, 0, 0.0))
            return
        if not _unfinished_repartition(self.spark, self.checkpoint):
            self._finish_interrupted_batch()
        self._renew()
        try:
            result = repartition_checkpoint(self.spark, self.checkpoint, target)
        except InvalidInput as refused:  # nothing was written: the query goes on at its count
            client.report_plan(plan_id, "failed", reason=str(refused))
            self.failed.append((plan_id, str(refused)))
            return
        self._partitions = target
        states = partition_state(self.spark, self.checkpoint, target)
        rows, stored = sum(s.rows for s in states), sum(s.stored_bytes for s in states)
        client.report_plan(plan_id, "applied", moved_rows=rows, moved_bytes=stored)
        self.applied.append(Applied(plan_id, result.from_partitions, target, rows, stored, result.seconds))

    def _finish_interrupted_batch(self) -> None:
        """Run the query until an interrupted batch commits, then stop it at a boundary (Spark refuses to
        repartition after an unfinished batch)."""
        for _ in range(3):
            if not _interrupted(self.spark, self.checkpoint):
                return
            query = self._start_query()
            query.processAllAvailable()
            self.query = query
            self._stop_at_boundary()
        if _interrupted(self.spark, self.checkpoint):
            raise Conflict(f"the last batch of checkpoint {self.checkpoint!r} did not finish after 3 runs")

    def _stop_at_boundary(self) -> None:
        """Stop the query while its trigger waits (not in the middle of a batch)."""
        query = self.query
        if query is None or not query.isActive:
            return
        deadline = time.monotonic() + 600
        while query.isActive and query.status.get("isTriggerActive") and time.monotonic() < deadline:
            time.sleep(0.02)
        query.stop()

    # --- helpers ---------------------------------------------------------------------------------------
    def _start_query(self) -> StreamingQuery:
        """Start the user's query; its first batch is a warm-up (``poll``)."""
        self._warming_up = True
        return self.start_query(self.checkpoint)

    def _running(self) -> StreamingQuery:
        if self.query is None:
            raise Conflict("the query is not started: call start() first")
        if not self.query.isActive and self.query.exception() is not None:
            raise Conflict(f"the query failed: {self.query.exception()}")
        return self.query

    def _region(self) -> Any:
        from repart.storage import read_transaction, region_by_name

        return read_transaction(self.engine, lambda session: _detached(region_by_name(session, self.region)))

    def _applied_count(self) -> int:
        from repart.storage import read_transaction
        from repart.storage.versions import applied_version

        def count(session: Any) -> int:
            version = applied_version(session, self.region)
            if version is None:
                raise Conflict(f"region {self.region!r} has no applied version")
            return version.n_channels

        return read_transaction(self.engine, count)

    def _keep_lease(self) -> None:
        """Renew the lease every third of ``lease_seconds`` from a daemon thread until ``stop`` (a long
        batch or repartition keeps it); a renewal that fails is raised by the next ``poll``."""
        self._renewing.clear()

        def renew() -> None:
            while not self._renewing.wait(self.lease_seconds / 3):
                try:
                    self._renew()
                except Exception as error:
                    self._lease_lost = error
                    return

        threading.Thread(target=renew, name=f"repart-lease-{self.region}", daemon=True).start()

    def _renew(self) -> None:
        from repart.storage import run_in_transaction
        from repart.storage.query_leases import hold_query_lease

        now = datetime.now(UTC)
        run_in_transaction(
            self.engine,
            lambda session: hold_query_lease(
                session, self.region, self.checkpoint, self.holder, self.lease_seconds, now
            ),
        )


def _fresh(spark: SparkSession, checkpoint: str) -> bool:
    """No batch was ever planned in the checkpoint: the query's first run fixes its count."""
    return not batch_ids(spark, f"{checkpoint}/offsets")


def _interrupted(spark: SparkSession, checkpoint: str) -> bool:
    """The newest planned batch has no commit (an interrupted batch, or an unfinished repartition)."""
    offsets, commits = batch_ids(spark, f"{checkpoint}/offsets"), batch_ids(spark, f"{checkpoint}/commits")
    return bool(offsets) and (not commits or offsets[-1] > commits[-1])


def _unfinished_repartition(spark: SparkSession, checkpoint: str) -> bool:
    """The checkpoint holds a repartition that did not finish (``CheckpointBatches``)."""
    return bool(batch_ids(spark, f"{checkpoint}/commits")) and (
        checkpoint_batches(spark, checkpoint).unfinished_repartition is not None
    )


def _detached(row: Any) -> Any:
    """The region row's columns as a plain namespace (usable after its session closed)."""
    from types import SimpleNamespace

    return SimpleNamespace(**{column.key: getattr(row, column.key) for column in row.__table__.columns})
