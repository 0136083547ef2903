"""One object for a stateful Spark job under repart: ``StatefulJob``.

A job keeps keyed state that repart partitions, balances and moves. It hands each batch to
``process(df, batch_id)`` (or, in a Structured Streaming query, passes ``foreach_batch`` to
``writeStream.foreachBatch``), which does, in order:

1. **apply** the plan the controller left, if any: the state moves to the new layout;
2. **route** the batch with the region's applied version (each row's channel; a general update's rows
   are partitioned so that Spark partition i holds channel i);
3. **update** the state store: a mergeable job's batch is reduced by its merge in Spark and written as
   deltas, a general job's ``combine`` gets the state of the keys its channel's batch touches;
4. **observe** the batch's key frequencies, with each channel's rows and busy seconds, as the
   controller's snapshot: the update's tasks count the slots and keys of the rows they fold, so the
   snapshot costs no Spark job of its own;
5. **report** the batch to the controller, then compact the store when it is due and vacuum it.

Every step is exactly once under the batch id, however often a killed job runs the batch again: the
plan's id is in the store's commit log, the generation that absorbed the batch records its id, and the
controller keeps one snapshot and one report per batch id. Under ``foreach_batch`` the id is the
streaming query's (its id and batch id: a query restarted from its checkpoint finds its last batch
absorbed; a new checkpoint continues the store's sequence, ``repart.state.batches.sequence_of``).

``state()`` returns the merged state as a Spark DataFrame, read by Python tasks through the store's
object-store layer (so it needs no Hadoop connector for ``s3://``, ``gs://`` or ``az://`` state).
"""

from __future__ import annotations

import contextlib
import math
import os
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from types import MappingProxyType
from typing import TYPE_CHECKING, Any

import pyarrow as pa
from pyspark.sql import DataFrame, SparkSession
from pyspark.sql import types as T
from pyspark.sql.pandas.types import from_arrow_schema

from repart.errors import Conflict, InvalidInput, NotFound
from repart.partitioning.domain import MAX_SLOT_BITS, KeyType
from repart.partitioning.routing import RoutingFunction
from repart.protocol.client import ControllerClient
from repart.protocol.http_client import HttpControllerClient
from repart.protocol.merge import MergeSpec
from repart.protocol.snapshot import BatchProgress
from repart.spark.batch_counts import REGISTER_COLUMN, SLOT_COLUMN
from repart.spark.jobs import apply_next_plan
from repart.spark.keys import key_column
from repart.spark.observe import EPSILON, Observation, Window, observe, observe_counted
from repart.spark.route import DEFAULT_CHANNEL_COL, partition, route
from repart.spark.sinks import ControllerSink
from repart.spark.stateful import PARTIALS_MERGED, ROWS_COLUMN, ChannelUpdate, Combine, Counting, update_state
from repart.state.batches import QueryBatch, sequence_of
from repart.state.files import checked_layout
from repart.state.store import DEFAULT_RETENTION, DEFAULT_SLOT_GROUPS, StateStore, retention_seconds
from repart.validation import NON_NEGATIVE_INT, POSITIVE, check, shown

if TYPE_CHECKING:
    from sqlalchemy import Engine

__all__ = ["BatchResult", "StatefulJob"]

#: The start of the snapshots' windows: batch s covers [EPOCH + s·w, EPOCH + (s+1)·w) for a window
#: length w, so a batch run again after a crash submits the same window.
EPOCH = datetime(2026, 1, 1, tzinfo=UTC)
_QUERY_ID_PROPERTY = "sql.streaming.queryId"  # set by Spark on the thread that runs foreachBatch
#: A streaming query's input and processing rates (rows per second), None where Spark has measured none.
Rates = tuple[float | None, float | None]


@dataclass(frozen=True)
class BatchResult:
    """What ``process`` did with one batch.

    ``sequence`` is the batch's id in the store (the batch id itself, or for a streaming query its
    place in the store's sequence). ``moved_rows``/``moved_bytes`` are None when no plan was applied
    (or the store had applied it before a crash), ``state_rows_before`` the state's rows when the batch
    started, ``updates`` one entry per channel that had rows, ``seconds`` the whole batch and ``steps``
    its parts: open (the store), apply (the plan, and the region's applied version), update (route,
    update and the batch's counts: one Spark job), observe (the snapshot built and submitted), report,
    compact, vacuum and tick. ``absorbed``: the store had absorbed the batch before (a run again after a
    crash), so only its snapshot and report were sent again. ``controller_action``: what the embedded
    controller's tick did (``tick=True``), ``conflict`` when another tick changed the region meanwhile."""

    sequence: int
    version: int
    function: RoutingFunction
    n_channels: int
    n_channels_before: int
    plan_id: int | None
    moved_rows: int | None
    moved_bytes: int | None
    state_rows_before: int
    input_rows: int
    updates: tuple[ChannelUpdate, ...]
    observation: Observation
    seconds: float
    steps: Mapping[str, float] = field(default_factory=lambda: MappingProxyType({}))
    absorbed: bool = False
    controller_action: str | None = None


class StatefulJob:
    """A Spark job whose keyed state repart manages (module docstring).

    - ``controller``: the controller's database URL (SQLite or PostgreSQL), the ``http://`` or
      ``https://`` URL of its API (``repart serve``) with a ``token`` of scope ``job:REGION`` (default
      ``$REPART_TOKEN``), or a ``ControllerClient``.
    - ``region``: the region's name; ``key``: the key column, in the batches and in the state.
    - ``state``: where the state store lives: a local directory or an ``s3://``, ``gs://``, ``az://``
      or ``file://`` URL, with ``state_options`` (endpoint, region, credentials) for object stores.
    - ``schema``: the state's columns (a ``pyarrow.Schema``, a Spark ``StructType`` or a DDL string
      such as ``"ticker string, trades long, volume long"``), the key column among them.
    - ``merge`` for **mergeable** state: each state column's operation and source column in the batch,
      ``"trades=count,volume=sum,notional=sum(price_x_qty)"`` (``repart.protocol.merge``); or
      ``combine(old, batch) -> new`` for **general** state: the state rows of the keys a channel's batch
      touches and its batch rows (Arrow tables) to the new rows of those keys, a key left out deleted.
      Exactly one of the two.
    - ``epsilon``: the snapshots' error bound (every key above ε of a batch is counted exactly); it
      must stay below the controller's frequency threshold, and 10⁻⁴ leaves a margin at N ≤ 32.
    - ``window_seconds``: the length of a batch's snapshot window.
    - ``channel_rate``: when given, a channel's busy seconds are modelled as its rows over this rate
      (rows per second) instead of its measured task time.
    - ``retain``: how long the store keeps objects that no generation lists any more (``vacuum``): a
      reader of an older generation has that long to finish.
    - ``tick``: run one controller tick after each batch (a database URL and the ``controller``
      extra): for a job with no ``repart run`` daemon beside it.
    """

    def __init__(
        self,
        controller: str | ControllerClient,
        *,
        region: str,
        key: str,
        state: str | os.PathLike[str],
        schema: pa.Schema | T.StructType | str,
        merge: str | Mapping[str, str] | MergeSpec | None = None,
        combine: Combine | None = None,
        state_options: Mapping[str, str] | None = None,
        epsilon: float = 1e-4,
        window_seconds: float = 10.0,
        channel_rate: float | None = None,
        slot_groups: int = DEFAULT_SLOT_GROUPS,
        tick: bool = False,
        retain: timedelta | float = DEFAULT_RETENTION,
        token: str | None = None,
    ) -> None:
        if (merge is None) == (combine is None):
            raise InvalidInput(
                "merge", "or combine must be given, not both and not neither: merge for state whose "
                "columns are sums, counts, minima or maxima, combine for any other",
            )  # fmt: skip
        self.region = region
        self.key = key
        self.state_url = os.fspath(state)
        self.state_options = dict(state_options) if state_options is not None else None
        self.schema = _arrow_schema(schema)
        self.merge = None if merge is None else MergeSpec.of(merge)
        self.combine = combine
        self.key_type: KeyType = _key_type(self.schema, key)
        if self.merge is not None:
            clashing = sorted({ROWS_COLUMN, SLOT_COLUMN, REGISTER_COLUMN} & set(self.schema.names))
            if clashing:
                raise InvalidInput("schema", f"must not use the column names {clashing}, reserved by repart")
        # The store's own checks of its key, columns and merge, before anything is written (slot
        # groups against the most slot bits a region may have: the store checks the region's).
        checked_layout(
            key, self.key_type, MAX_SLOT_BITS, slot_groups, self.schema,
            None if self.merge is None else self.merge.columns,
        )  # fmt: skip
        self.epsilon = check("epsilon", epsilon, EPSILON)
        self.window_seconds = check("window_seconds", window_seconds, POSITIVE)
        self.channel_rate = None if channel_rate is None else check("channel_rate", channel_rate, POSITIVE)
        self.slot_groups = slot_groups
        self.engine: Engine | None = None
        self._client: ControllerClient | None = None
        if isinstance(controller, str) and controller.startswith(("http://", "https://")):
            self._client = HttpControllerClient(controller, token or os.environ.get("REPART_TOKEN", ""))
        elif isinstance(controller, str):
            from repart.storage import make_engine

            self.engine = make_engine(controller)
        else:
            self._client = controller
        if tick and self.engine is None:
            raise InvalidInput("tick", "needs a database URL as controller, not an API URL or a client")
        self.tick = tick
        self.retain = timedelta(seconds=retention_seconds(retain))
        self._store: StateStore | None = None
        self._applied: tuple[int, RoutingFunction] | None = None
        self._vacuumed_at: float | None = None
        self._last_started: float | None = None

    # --- the controller ------------------------------------------------------------------------------

    @property
    def client(self) -> ControllerClient:
        """The controller port the job talks through."""
        if self._client is None:
            from repart.storage.client import SqlControllerClient

            assert self.engine is not None
            self._client = SqlControllerClient(self.engine, source="repart.spark.StatefulJob")
        return self._client

    def ensure_region(self, channels: int = 4, *, policy: str = "target-utilization", **config: Any) -> bool:
        """Create the region unless it exists, and activate its first version; True if it was created.

        ``channels`` is its initial channel count, ``policy`` its channel-count policy and ``config``
        any other region setting (``repart.storage.RegionConfig``'s fields: ``min_channels``,
        ``settings``, ...), each checked with the field named. A mergeable job gives the region its
        merge. Needs a database URL as controller (InvalidInput ``controller`` otherwise) and the
        ``controller`` extra (it runs the controller's first tick); the database is brought to the
        code's schema first (``repart db upgrade``)."""
        if self.engine is None:
            raise InvalidInput(
                "controller", "must be a database URL to create a region, not an API URL or a client"
            )
        from repart.controller.service import create_region
        from repart.controller.tick import tick
        from repart.storage import RegionConfig, region_by_name, run_in_transaction, upgrade

        upgrade(self.engine)
        if self.merge is not None:
            config.setdefault("merge", self.merge.to_text())
        settings = RegionConfig(key_type=self.key_type, n_channels_initial=channels, policy=policy, **config)

        def create(session: Any) -> bool:
            try:
                region_by_name(session, self.region)
            except NotFound:
                create_region(session, self.region, settings)
                return True
            return False

        created = run_in_transaction(self.engine, create)
        try:
            self.client.applied_function(self.region)
        except NotFound:
            tick(self.engine, self.region)  # a new region's first tick activates its first version
        return created

    # --- the store -----------------------------------------------------------------------------------

    @property
    def store(self) -> StateStore:
        """The job's state store, opened at its newest generation, or created (laid out by the region's
        applied version) where there is none, and evolved to the job's schema when the job adds
        nullable columns. InvalidInput when the store there belongs to another region or holds
        columns the job's schema cannot evolve from."""
        if self._store is None:
            try:
                store = StateStore.open(self.state_url, self.state_options)
            except NotFound:
                store = self._create_store()
            self._store = self._fitted(store)
        return self._store

    def _create_store(self) -> StateStore:
        number, function = self.client.applied_function(self.region)
        return StateStore.create(
            self.state_url,
            region=self.region,
            version=number,
            function_digest=function.digest,
            n_channels=function.n_channels,
            slot_bits=function.slot_bits,
            key_type=self.key_type,
            key_col=self.key,
            schema=self.schema,
            slot_groups=self.slot_groups,
            merge=self.merge,
            options=self.state_options,
        )

    def _fitted(self, store: StateStore) -> StateStore:
        """``store``, evolved to the job's schema when that only adds nullable columns (old rows read
        them as null; ``StateStore.evolve``). InvalidInput when the store belongs to another region,
        has another key column, kind (mergeable or general) or a schema the job's cannot evolve from,
        naming the column."""
        if store.region != self.region:
            raise InvalidInput(
                "state",
                f"must be region {self.region!r}'s store: the store at {store.url} belongs to region "
                f"{store.region!r}",
            )
        if store.key_col != self.key:
            raise InvalidInput("key", f"must be the store's key column {store.key_col!r}, got {self.key!r}")
        if (store.merge is not None) != (self.merge is not None):
            kind = "mergeable (give merge)" if store.merge is not None else "general (give combine)"
            raise InvalidInput("merge", f"must fit the store at {store.url}, which is {kind}")
        return store.evolve(self.schema, None if self.merge is None else dict(self.merge.columns))

    # --- a batch -------------------------------------------------------------------------------------

    def process(self, df: DataFrame, batch_id: int, *, query_id: str | None = None) -> BatchResult:
        """Apply, route, update, observe and report one batch (module docstring), exactly once under
        ``batch_id`` (an integer ≥ 0 that grows from batch to batch) or, for a streaming query, under
        ``(query_id, batch_id)``. The result's ``steps`` say where the batch's time went.

        The batch's snapshot carries the time since the job's previous batch started as its
        ``progress.interval_seconds`` (the controller's budget per batch when the region declares
        none), and under ``foreach_batch`` the query's input and processing rates."""
        return self._process(df, batch_id, query_id, None)

    def _process(
        self, df: DataFrame, batch_id: int, query_id: str | None, rates: Rates | None
    ) -> BatchResult:
        watch = _Stopwatch()
        started, previous = time.monotonic(), self._last_started
        self._last_started = started
        number = check("batch_id", batch_id, NON_NEGATIVE_INT)
        query = None if query_id is None else QueryBatch.checked(query_id, number)
        self._check_frame(df)
        store = self.store.refreshed()
        if store.schema != self.schema:
            raise InvalidInput(
                "schema",
                f"must be the store's: another job changed the store at {store.url} to columns "
                f"{store.schema.names}; restart this job with that schema",
            )
        sequence = number if query is None else sequence_of(store.last_batch, query)
        absorbed = store.absorbed(sequence)
        rows_before, n_before = store.rows(), store.n_channels
        watch.lap("open")
        # A batch absorbed before a crash is finished under the layout it was written in: the next
        # batch applies the pending plan.
        # (A plan the store committed but nobody reported is finished even then: the store is past the
        # controller's applied version.)
        behind = absorbed and self.client.applied_function(self.region).version != store.version
        migration = (
            apply_next_plan(self.client, self.region, store, self.merge) if not absorbed or behind else None
        )
        version, function = self._applied_function(store)
        self._require_merge_for(function, version)
        watch.lap("apply")
        # A mergeable update reduces the rows itself (by key, or by channel and key under a split
        # function): routed rows suffice. A general update needs each channel's rows on its partition.
        placed = (
            route(df, self.key, function) if self.merge is not None else partition(df, self.key, function)
        )
        store, updates, counts = update_state(
            store,
            placed,
            self.combine,
            version=version,
            function=function,
            batch_id=sequence,
            query=query,
            sources=None if self.merge is None else self.merge.sources,
            counting=Counting.of(function, self.epsilon),
        )
        watch.lap("update")
        start = EPOCH + timedelta(seconds=sequence * self.window_seconds)
        snapshot_fields: dict[str, Any] = {
            "region": self.region,
            "window": Window(seq=sequence, start=start, end=start + timedelta(seconds=self.window_seconds)),
            "sink": ControllerSink(self.client),
            "epsilon": self.epsilon,
            "slot_bits": function.slot_bits,
            "version": version,
            "channels": self._measurements(store, updates, function.n_channels),
            "batch": sequence,
            "progress": _progress(None if previous is None else started - previous, rates),
        }
        # The update's tasks counted the batch as they folded it; a batch absorbed before a crash ran
        # no task, so its snapshot (submitted again, a no-op if it was) takes observe's own passes.
        observation = (
            observe(df, self.key, **snapshot_fields)
            if counts is None
            else observe_counted(counts, self.key_type, **snapshot_fields)
        )
        watch.lap("observe")
        plan_id = None if migration is None else migration[0].plan_id
        moved_rows = None if migration is None else migration[1].moved_rows
        moved_bytes = None if migration is None else migration[1].moved_bytes
        payload: dict[str, Any] = {
            "input_rows": observation.snapshot.tuples + observation.null_keys,
            "null_keys": observation.null_keys,
            "version": version,
            "moved_rows": moved_rows,
            "moved_bytes": moved_bytes,
            "seconds": watch.total(),
            "steps": dict(watch.seconds),
            "state_generation": store.generation,
        }
        if query is not None:
            payload["query"] = {"id": query.query_id, "batch": query.batch_id}
        self.client.report_batch(self.region, sequence, payload, plan_id)
        watch.lap("report")
        self._housekeeping(watch)
        action = self._tick() if self.tick else None
        watch.lap("tick")
        return BatchResult(
            sequence=sequence,
            version=version,
            function=function,
            n_channels=function.n_channels,
            n_channels_before=n_before,
            plan_id=plan_id,
            moved_rows=moved_rows,
            moved_bytes=moved_bytes,
            state_rows_before=rows_before,
            input_rows=observation.snapshot.tuples + observation.null_keys,
            updates=tuple(updates),
            observation=observation,
            seconds=watch.total(),
            steps=MappingProxyType(dict(watch.seconds)),
            absorbed=absorbed,
            controller_action=action,
        )

    def foreach_batch(self, df: DataFrame, batch_id: int) -> None:
        """``process`` for ``writeStream.foreachBatch``: the batch is named by the running query's id
        (stable across restarts from one checkpoint) and its batch id."""
        query_id = df.sparkSession.sparkContext.getLocalProperty(_QUERY_ID_PROPERTY)
        if not query_id:
            raise InvalidInput(
                "foreach_batch", "must be called by a streaming query's foreachBatch; call process instead"
            )
        self._process(df, batch_id, query_id, _query_rates(df.sparkSession, query_id))

    def state(self) -> DataFrame:
        """The state at the store's newest generation as a Spark DataFrame, one row per key: read by one
        Python task per channel through the object-store layer, and in split mode merged across
        channels by the merge (in Spark)."""
        store = self.store.refreshed()
        spark = SparkSession.active()
        channels = spark.createDataFrame([(c,) for c in range(store.n_channels)], "channel int")
        rows = channels.repartitionById(store.n_channels, "channel").mapInArrow(
            _ChannelReader(store), from_arrow_schema(store.schema)
        )
        applied = self.client.applied_function(self.region).function
        if applied.kind == "preserve" and applied.digest == store.function_digest:
            return rows  # laid out by a key-preserving function: one row per key
        merge = self.merge or self.client.region_merge(self.region)
        if merge is None:
            raise InvalidInput("merge", f"is required to merge region {self.region!r}'s split keys' rows")
        return rows.groupBy(self.key).agg(
            *(PARTIALS_MERGED[op](name).alias(name) for name, op in merge.columns.items())
        ).select(*store.schema.names)  # fmt: skip

    # --- the steps' details --------------------------------------------------------------------------

    def _check_frame(self, df: DataFrame) -> None:
        """InvalidInput naming the column when the batch lacks the key, holds a key of another type than
        the state's, lacks a merge's source column or uses a column name repart reserves; before any
        Spark job."""
        key_column(df, self.key, self.key_type, field="key")
        names = {DEFAULT_CHANNEL_COL, SLOT_COLUMN, REGISTER_COLUMN}
        reserved = sorted(column for column in df.columns if column.lower() in names)
        if reserved:
            raise InvalidInput(
                "df", f"must not use the column names {reserved}, which repart adds to a batch"
            )
        if self.merge is not None:
            missing = sorted({s for s in self.merge.sources.values() if s is not None} - set(df.columns))
            if missing:
                raise InvalidInput(
                    "merge", f"reads batch columns {missing} that the batch lacks: {df.columns}"
                )

    def _require_merge_for(self, function: RoutingFunction, version: int) -> None:
        """A split function spreads a key's rows over channels, whose partial rows merge by a merge:
        the job's, or for a general job the region's; InvalidInput ``merge`` without one."""
        if function.kind == "preserve" or self.merge is not None:
            return
        if self.client.region_merge(self.region) is None:
            raise InvalidInput(
                "merge",
                f"is required: region {self.region!r} routes with a split function (version {version}), "
                "whose partial state rows merge by the region's merge, and declares none; set one with "
                f"`repart region update {self.region} --merge COLUMN=sum|min|max,...`",
            )

    def _measurements(
        self, store: StateStore, updates: list[ChannelUpdate], n_channels: int
    ) -> list[dict[str, float | int]]:
        """Per-channel tuples, busy seconds and state bytes (in ``store``) for the snapshot, every
        channel."""
        by_channel = {update.channel: update for update in updates}
        measured = []
        for channel in range(n_channels):
            update = by_channel.get(channel)
            tuples = 0 if update is None else update.input_rows
            busy = 0.0 if update is None else update.busy_seconds
            if self.channel_rate is not None:
                busy = tuples / self.channel_rate
            state_bytes = sum(entry.seen_bytes for entry in store.files(channel))
            measured.append(
                {"channel": channel, "tuples": tuples, "busy_seconds": busy, "state_bytes": state_bytes}
            )
        return measured

    def _housekeeping(self, watch: _Stopwatch) -> None:
        """Between batches no executor writes: fold the deltas of channels whose compaction is due (a
        concurrent compaction, ``repart state compact``, wins a race against this one, which the
        committed batch does not need); then, at the first batch and every quarter of the retention
        time after, delete the objects no recent generation lists. Objects become garbage only as they
        age past the retention time, so a vacuum per batch would list the store for nothing."""
        store = self.store
        with contextlib.suppress(Conflict):
            store.compact()
        watch.lap("compact")
        now = time.monotonic()
        if self._vacuumed_at is None or now - self._vacuumed_at >= self.retain.total_seconds() / 4:
            store.vacuum(self.retain)
            self._vacuumed_at = now
        watch.lap("vacuum")

    def _applied_function(self, store: StateStore) -> tuple[int, RoutingFunction]:
        """The region's applied version, read once per version: the applied version changes only by a
        plan that moves the store, so while the store is at the version last read it still holds."""
        if self._applied is None or self._applied[0] != store.version:
            applied = self.client.applied_function(self.region)
            self._applied = (applied.version, applied.function)
        return self._applied

    def _tick(self) -> str:
        """One controller tick of the region (the embedded controller); the action it took, or
        ``conflict`` when another tick changed the region meanwhile."""
        from repart.controller.tick import tick

        assert self.engine is not None
        try:
            return tick(self.engine, self.region).action
        except Conflict:  # another tick (a daemon's) acted meanwhile; the batch is done either way
            return "conflict"


class _Stopwatch:
    """Seconds per step of a batch: ``lap(step)`` charges the time since the previous lap to ``step``."""

    def __init__(self) -> None:
        self.seconds: dict[str, float] = {}
        self._started = self._mark = time.perf_counter()

    def lap(self, step: str) -> None:
        now = time.perf_counter()
        self.seconds[step] = self.seconds.get(step, 0.0) + now - self._mark
        self._mark = now

    def total(self) -> float:
        return time.perf_counter() - self._started


@dataclass(frozen=True)
class _ChannelReader:
    """The task of ``StatefulJob.state``: the state of each channel number it receives."""

    store: StateStore

    def __call__(self, batches: Iterator[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        for batch in batches:
            for channel in batch.column(0).to_pylist():
                yield from self.store.read_channel(int(channel)).to_batches()


def _query_rates(spark: SparkSession, query_id: str) -> Rates:
    """The input and processing rates (rows per second) of the running query's last finished
    micro-batch (``StreamingQuery.lastProgress``); None for a rate Spark has not measured yet.

    ``spark`` is the batch's session, a clone whose query manager knows no query: the query is
    looked up in the session the application built (``SparkSession.builder.getOrCreate``) too."""
    query = spark.streams.get(query_id) or SparkSession.builder.getOrCreate().streams.get(query_id)
    progress = None if query is None else query.lastProgress
    if progress is None:
        return None, None
    return _rate(progress["inputRowsPerSecond"]), _rate(progress["processedRowsPerSecond"])


def _rate(value: object) -> float | None:
    """A measured rate: a finite number > 0 (Spark reports 0 or NaN before it has one)."""
    return float(value) if isinstance(value, int | float) and math.isfinite(value) and value > 0 else None


def _progress(interval: float | None, rates: Rates | None) -> BatchProgress | None:
    """The snapshot's ``progress``: the interval since the previous batch started, and the rates."""
    input_rate, processed_rate = rates or (None, None)
    if interval is None and input_rate is None and processed_rate is None:
        return None
    return BatchProgress(
        interval_seconds=interval if interval is not None and interval > 0 else None,
        input_rows_per_second=input_rate,
        processed_rows_per_second=processed_rate,
    )


def _arrow_schema(schema: object) -> pa.Schema:
    """The state schema as Arrow: given so, as a Spark ``StructType``, or as a DDL string."""
    if isinstance(schema, pa.Schema):
        return schema
    if isinstance(schema, str):
        if SparkSession.getActiveSession() is None:
            raise InvalidInput(
                "schema",
                "given as a DDL string needs a running SparkSession to parse it: start the session "
                "first, or give a pyarrow.Schema or a StructType",
            )
        schema = T._parse_datatype_string(schema)
    if isinstance(schema, T.StructType):
        from pyspark.sql.pandas.types import to_arrow_schema

        return to_arrow_schema(schema)
    raise InvalidInput(
        "schema", f"must be a pyarrow.Schema, a StructType or a DDL string, got {shown(schema)}"
    )


def _key_type(schema: pa.Schema, key: str) -> KeyType:
    """The repart key type of the state's key column: ``str`` for a string column, ``int`` for a
    signed integer one; InvalidInput ``key`` for a missing column or any other type."""
    if key not in schema.names:
        raise InvalidInput("key", f"must name a column of the schema {schema.names}, got {key!r}")
    kind = schema.field(key).type
    if pa.types.is_string(kind):
        return "str"
    if pa.types.is_signed_integer(kind):
        return "int"
    raise InvalidInput("key", f"must be a string or signed integer column, got {key!r} of type {kind}")
