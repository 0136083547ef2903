"""``observe``: a snapshot of one Spark batch's key frequencies, computed in the JVM (DESIGN §3, §9).

One Spark query (one action: adaptive execution runs its two shuffle stages as jobs of their own); no
row of the batch leaves the JVM and nothing runs in Python workers:

1. The JVM projects every row to ``(key, hash)``: the key as repart hashes it and ``xxhash64`` of it
   (``repart.spark.keys``, equal to repart's XXH64, DESIGN §2).
2. Two aggregations of that projection run as one query (a union of their results, collected as
   Arrow), their map stages side by side:

   - the **slot aggregation**, ``groupBy(h >> (64 - S))`` over the rows with a key: each slot's tuple
     count (the histogram of the snapshot, exact) and the slot's HyperLogLog register, the largest
     ``rho`` of its hashes (``repart.spark.cardinality``): Spark's hash aggregation, generated code,
     at most 2^S rows per task cross the shuffle;
   - the **key sketch**, a global aggregation: DataSketches' frequent-items sketch of the keys
     (``approx_top_k_accumulate``, ``repart.spark.frequent_items``) sized for ``epsilon``, and the
     counts of rows and of rows with a key. Each task builds a partial sketch; one task merges them.

3. The driver reads the sketch with the ``datasketches`` package: every tracked key with its lower
   bound, and the sketch's offset. An item is ``[key, lower bound, offset]``: the key's true count lies
   in ``[count, count + delta]``, every key occurring more than ``offset`` times is tracked, and
   ``offset <= 3.5 / M * n <= floor(n / ceil(1/epsilon))`` for the map size ``M`` the sketch size
   gives (checked before the job and again after it). |D| is Ertl's estimate from the slots'
   registers. The ``Snapshot`` (``repart.protocol.snapshot``) goes to a sink (``repart.spark.sinks``),
   which writes its document.

Both aggregations read the batch, so a batch that is not cached is computed twice within the query
(Spark SQL plans no shared scan; measured alternatives that read it once were slower, see
docs/DECISIONS.md "observe in the JVM"). The reads must agree: a nondeterministic batch whose
two reads give different rows is refused (cache or checkpoint it first) rather than described by a
snapshot whose slots and items count different rows. Results travel through the shuffle and the
job's result, not through accumulators, so a retried or speculative task counts once.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any

import pyarrow.compute as pc
from pyspark.sql import DataFrame
from pyspark.sql import functions as F

from repart.errors import InvalidInput
from repart.partitioning.documents import require_int
from repart.partitioning.domain import DEFAULT_SLOT_BITS, KeyType, check_slot_bits
from repart.protocol.snapshot import (
    ChannelMeasurement,
    CounterEntry,
    Snapshot,
    channel_measurements,
    check_region_name,
)
from repart.spark.cardinality import estimate_distinct, register_value
from repart.spark.frequent_items import accumulate, check_sketch_size, default_sketch_size, read_sketch
from repart.spark.keys import key_column

if TYPE_CHECKING:  # no import of the sinks (and the database) at run time
    from repart.spark.sinks import SnapshotSink


@dataclass(frozen=True)
class Window:
    """The tumbling window a batch belongs to: ``seq`` (new per region) and ``start < end``, both
    timezone-aware. InvalidInput naming the field otherwise."""

    seq: int
    start: datetime
    end: datetime

    def __post_init__(self) -> None:
        require_int(self.seq, "window.seq")
        for name, value in (("window.start", self.start), ("window.end", self.end)):
            if not isinstance(value, datetime) or value.utcoffset() is None or not _has_utc_time(value):
                raise InvalidInput(
                    name, f"must be a timezone-aware datetime in years 1-9999 UTC, got {value!r}"
                )
        if self.end <= self.start:
            raise InvalidInput(
                "window.end",
                f"must be after window.start, got {self.start.isoformat()} .. {self.end.isoformat()}",
            )


def _has_utc_time(moment: datetime) -> bool:
    """Whether ``moment`` converts to UTC (year 1 at +14:00 or year 9999 at -14:00 does not)."""
    try:
        moment.astimezone(UTC)
    except OverflowError:
        return False
    return True


@dataclass(frozen=True)
class Observation:
    """What ``observe`` emitted: the batch's ``snapshot`` and where the sink wrote it.

    The snapshot's ``tuples`` counts the rows with a non-null key and its ``items`` are the keys the
    sketch tracked; ``null_keys`` counts the rows left out (a null key). ``seconds`` is the wall time
    of the whole call (Spark job, reading the sketch, write).
    """

    snapshot: Snapshot
    null_keys: int
    seconds: float
    destination: str


@dataclass(frozen=True)
class _BatchCounts:
    """The measured part of a snapshot."""

    tuples: int
    null_keys: int
    distinct_estimate: int
    items: list[list[Any]]
    slots: tuple[tuple[int, int], ...]


def observe(
    df: DataFrame,
    key_col: str,
    region: str,
    window: Window,
    sink: SnapshotSink,
    *,
    epsilon: float = 1e-3,
    sketch_size: int | None = None,
    slot_bits: int = DEFAULT_SLOT_BITS,
    version: int | None = None,
    channels: Sequence[dict[str, Any]] | None = None,
    batch: int | None = None,
) -> Observation:
    """Count the keys of ``df[key_col]`` and write the batch's snapshot for ``region`` to ``sink``.

    Runs one Spark query that keeps the batch in the JVM (module docstring). The snapshot's ``items``
    are the frequent-items sketch's entries (key, count, delta) with ``count <= true count <= count +
    delta`` and ``delta <= floor(tuples / ceil(1/epsilon)) <= epsilon * tuples`` (every key occurring
    more than ``delta`` times, so every key above ``epsilon * tuples``, is among them), the exact tuple
    count of every non-empty slot of ``slot_bits`` bits, a HyperLogLog estimate of the distinct keys
    over those slots as ``distinct_estimate``, and ``version``, ``channels`` (per-channel
    measurements: dicts with channel, tuples, busy_seconds, state_bytes) and ``batch`` (the job's id
    of the batch, so that a batch run again after a crash is ingested once) as given. It holds
    everything ``Snapshot.from_document`` requires of a document (its document parses back to it),
    so the sink writes it as it is.

    ``sketch_size`` is the number of counters of the sketch (Spark's ``maxItemsTracked``); by default
    the most a sketch for ``epsilon`` holds in the map it needs (3,072 for epsilon = 1e-3, see
    ``repart.spark.frequent_items``). A larger one is more exact and costs more memory.

    Rows whose key is null are not counted: not in ``tuples``, items or slots. Their number is
    returned as ``Observation.null_keys``; ``repart.spark.route`` sends them to channel 0.

    Raises InvalidInput naming the field and accepted range, before any Spark work, for: a missing
    key column or one of an unsupported type, ``epsilon`` outside (0, 1) or below what Spark's largest
    sketch guarantees (about 1.7e-6), a ``sketch_size`` outside [1, 1,000,000] or too small for
    ``epsilon`` (naming both), ``slot_bits`` outside [10, 20], a ``window`` that is not a ``Window``, a
    bad region name, version or channels; after the job, for a batch whose two reads disagree
    (``df``). A sink that rejects the snapshot (such as a window already ingested under another
    batch) raises its ReparError. Nothing is written when anything raises.
    """
    began = time.perf_counter()
    key = key_column(df, key_col)
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float) or not 0.0 < epsilon < 1.0:
        raise InvalidInput("epsilon", f"must be a number in (0, 1), got {epsilon!r}")
    epsilon = float(epsilon)
    size = default_sketch_size(epsilon) if sketch_size is None else check_sketch_size(sketch_size, epsilon)
    if not isinstance(window, Window):
        raise InvalidInput("window", f"must be a repart.spark.observe.Window, got {type(window).__name__}")
    check_slot_bits(slot_bits)  # the fields given, checked before the Spark job runs
    fields = partial(
        _snapshot,
        region=check_region_name(region),
        window=window,
        epsilon=epsilon,
        key_type=key.key_type,
        slot_bits=slot_bits,
        version=None if version is None else require_int(version, "version", 1),
        channels=None if not channels else channel_measurements(list(channels)),
        batch=None if batch is None else require_int(batch, "batch"),
    )

    projected = df.select(key.value.alias("key"), key.hash.alias("hash"))
    counts = _count(projected, key.key_type, epsilon, size, slot_bits)
    snapshot = fields(counts)
    destination = sink.write(snapshot)
    return Observation(
        snapshot=snapshot,
        null_keys=counts.null_keys,
        seconds=time.perf_counter() - began,
        destination=destination,
    )


def _snapshot(
    counts: _BatchCounts,
    *,
    region: str,
    window: Window,
    epsilon: float,
    key_type: KeyType,
    slot_bits: int,
    version: int | None,
    channels: tuple[ChannelMeasurement, ...] | None,
    batch: int | None,
) -> Snapshot:
    """The snapshot of ``counts`` in ``window``; ``version``, ``channels`` and ``batch`` only when given."""
    return Snapshot(
        region=region,
        seq=window.seq,
        window_start=window.start.astimezone(UTC),
        window_end=window.end.astimezone(UTC),
        tuples=counts.tuples,
        distinct_estimate=counts.distinct_estimate,
        epsilon=epsilon,
        key_type=key_type,
        items=tuple(CounterEntry(key, count, delta) for key, count, delta in counts.items),
        slot_bits=slot_bits,
        slots=counts.slots or None,
        version=version,
        channels=channels,
        batch=batch,
    )


def _count(
    projected: DataFrame, key_type: KeyType, epsilon: float, sketch_size: int, slot_bits: int
) -> _BatchCounts:
    """Run the Spark query over ``projected`` (columns ``key``, ``hash``) and read its result: the slot
    aggregation's rows (``slot``, ``tuples``, ``register``) and the key sketch's one row (``sketch``,
    ``keyed``, ``rows``), unioned into one table."""
    slots = (
        projected.where(F.col("key").isNotNull())
        .groupBy(F.shiftrightunsigned("hash", 64 - slot_bits).alias("slot"))
        .agg(
            F.count(F.lit(1)).alias("tuples"),
            F.max(register_value(F.col("hash"), slot_bits)).alias("register"),
        )
    )
    sketch = projected.agg(
        accumulate("key", sketch_size).getField("sketch").alias("sketch"),
        F.count("key").alias("keyed"),
        F.count(F.lit(1)).alias("rows"),
    )
    table = slots.unionByName(sketch, allowMissingColumns=True).toArrow()
    sketched = pc.is_valid(table.column("sketch"))
    summary = table.filter(sketched).to_pylist()[0]
    histogram = table.filter(pc.invert(sketched)).sort_by("slot")

    tuples = int(pc.sum(histogram.column("tuples")).as_py() or 0)
    keys = read_sketch(summary["sketch"], key_type)
    if not tuples == keys.n == summary["keyed"]:
        raise InvalidInput(
            "df",
            "must give the same rows each time it is read: observe reads the batch twice in one query "
            f"(slot counts and key sketch) and they saw {tuples:,} and {keys.n:,} rows with a key; "
            "cache or checkpoint a nondeterministic batch before observing it",
        )
    keys.check_error(epsilon, sketch_size)
    items = [[key, count, keys.offset] for key, count in zip(keys.keys, keys.counts.tolist(), strict=True)]
    distinct = estimate_distinct(histogram.column("register").to_numpy(), slot_bits)
    return _BatchCounts(
        tuples=tuples,
        null_keys=int(summary["rows"]) - tuples,
        # HyperLogLog errs both ways, but each item is a distinct key and a snapshot requires
        # distinct_estimate >= len(items): a low estimate is clamped up to the item count.
        distinct_estimate=max(distinct, len(items)),
        items=items,
        slots=tuple(
            zip(histogram.column("slot").to_pylist(), histogram.column("tuples").to_pylist(), strict=True)
        ),
    )
