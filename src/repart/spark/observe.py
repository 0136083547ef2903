"""``observe``: a snapshot of one Spark batch's key frequencies, without a shuffle (DESIGN §3, §9).

One Spark job, one stage, no exchange of the batch's rows:

1. The JVM projects every row to ``(hash, key)``: ``xxhash64`` of the key (``repart.spark.keys``, equal
   to repart's XXH64, DESIGN §2) and the key itself. The same job computes Spark's
   ``approx_count_distinct`` (HyperLogLog++) over the hashes of the non-null keys as an observed metric
   (``DataFrame.observe``): each task aggregates its rows into a sketch and only the sketches travel.
2. Each task runs ``repart.spark.counting.count_partition`` over its Arrow batches (``mapInArrow``):
   Manku & Motwani's lossy counter (``LossyCounter``; Manku and Motwani, VLDB 2002) over the int64
   hashes, a bincount of the slots ``h >> (64 - S)``, and, for every hash in the counter's table, one
   original key. At the end of the partition it yields one row with its table, its tuple and null-key
   counts and its sparse slot counts: the original keys of retained hashes only, never the batch.
   Workers import only that module (not repart.storage and SQLAlchemy), so they start fast.
3. The driver collects one row per partition, rebuilds each counter with ``LossyCounter.from_entries``,
   merges them (counts and deltas add; the error bound is ``epsilon`` times the total, DESIGN §3),
   maps the merged table's hashes back to original keys, adds up the slot counts, and hands the
   snapshot document (README "Snapshot documents") to a sink (``repart.spark.sinks``).

The counter counts hashes, not keys: the arithmetic stays on int64 whatever the key type, and only the
retained hashes' keys leave the executors. Two distinct keys with the same 64-bit hash would be counted
as one and reported under one of their keys (with their summed count). For |D| distinct keys that
happens with probability about |D|² / 2^65 (3·10⁻⁸ for 10⁶ keys), and such keys share a slot anyway,
so it is accepted rather than paid for by carrying every key to the executors' tables.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial, reduce
from typing import TYPE_CHECKING, Any

import numpy as np
import numpy.typing as npt
import pyarrow as pa
from pyspark.sql import DataFrame
from pyspark.sql import Observation as MetricsObservation
from pyspark.sql import functions as F

from repart.errors import InvalidInput
from repart.partitioning.documents import require_int
from repart.partitioning.domain import DEFAULT_SLOT_BITS, KeyType, check_slot_bits
from repart.partitioning.frequency import LossyCounter
from repart.protocol.snapshot import (
    ChannelMeasurement,
    CounterEntry,
    Snapshot,
    channel_measurements,
    check_region_name,
)
from repart.spark.counting import count_partition
from repart.spark.keys import key_column

if TYPE_CHECKING:  # no import of the sinks (and the database) at run time
    from repart.spark.sinks import SnapshotSink

_INT64 = npt.NDArray[np.int64]


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
    """What ``observe`` emitted: the snapshot ``document`` and where the sink wrote it.

    ``tuples`` counts the rows with a non-null key, ``null_keys`` the rest; ``items`` is the number of
    counter entries in the document; ``seconds`` the wall time of the whole call (Spark job, merge,
    write).
    """

    document: dict[str, Any]
    null_keys: int
    tuples: int
    items: int
    seconds: float
    destination: str


@dataclass(frozen=True)
class _BatchCounts:
    """The measured part of a snapshot document."""

    tuples: int
    null_keys: int
    distinct_estimate: int
    items: list[list[Any]]
    slots: list[list[int]]


def observe(
    df: DataFrame,
    key_col: str,
    region: str,
    window: Window,
    sink: SnapshotSink,
    *,
    epsilon: float = 1e-3,
    slot_bits: int = DEFAULT_SLOT_BITS,
    version: int | None = None,
    channels: Sequence[dict[str, Any]] | None = None,
    batch: int | None = None,
) -> Observation:
    """Count the keys of ``df[key_col]`` and write the batch's snapshot for ``region`` to ``sink``.

    Runs one Spark job without a shuffle (module docstring). The document holds the lossy counter's
    entries ``[key, count, delta]`` with ``count <= true count <= count + delta`` and ``delta <= epsilon
    * tuples`` (every key occurring more than ``epsilon * tuples`` times is among them), the tuple
    count of every non-empty slot of ``slot_bits`` bits, ``approx_count_distinct`` of the keys as
    ``distinct_estimate``, and ``version``, ``channels`` (per-channel measurements: dicts with
    channel, tuples, busy_seconds, state_bytes) and ``batch`` (the job's id of the batch, so that a
    batch run again after a crash is ingested once) as given.

    Rows whose key is null are not counted: not in ``tuples``, items or slots. Their number is
    returned as ``Observation.null_keys``; ``repart.spark.route`` sends them to channel 0.

    Raises InvalidInput naming the field and accepted range, before any Spark work, for: a missing
    key column or one of an unsupported type, ``epsilon`` outside (0, 1), ``slot_bits`` outside
    [10, 20], a ``window`` that is not a ``Window``, a bad region name, version or channels. A sink
    that rejects the document (such as a window already ingested under another batch) raises its
    ReparError. Nothing is written when anything raises.
    """
    began = time.perf_counter()
    key = key_column(df, key_col)
    if isinstance(epsilon, bool) or not isinstance(epsilon, int | float) or not 0.0 < epsilon < 1.0:
        raise InvalidInput("epsilon", f"must be a number in (0, 1), got {epsilon!r}")
    if not isinstance(window, Window):
        raise InvalidInput("window", f"must be a repart.spark.observe.Window, got {type(window).__name__}")
    check_slot_bits(slot_bits)  # the fields given, checked before the Spark job runs
    fields = partial(
        _snapshot,
        region=check_region_name(region),
        window=window,
        epsilon=float(epsilon),
        key_type=key.key_type,
        slot_bits=slot_bits,
        version=None if version is None else require_int(version, "version", 1),
        channels=None if not channels else channel_measurements(list(channels)),
        batch=None if batch is None else require_int(batch, "batch"),
    )

    counts = _count(
        df.select(key.hash.alias("hash"), key.value.alias("key")), key.key_type, epsilon, slot_bits
    )
    document = fields(counts).to_document()
    destination = sink.write(document)
    return Observation(
        document=document,
        null_keys=counts.null_keys,
        tuples=counts.tuples,
        items=len(counts.items),
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
        slots=tuple((slot, count) for slot, count in counts.slots) or None,
        version=version,
        channels=channels,
        batch=batch,
    )


def _count(projected: DataFrame, key_type: KeyType, epsilon: float, slot_bits: int) -> _BatchCounts:
    """Run the Spark job over ``projected`` (columns ``hash``, ``key``) and merge its partitions."""
    metrics = MetricsObservation()
    hashes_of_keys = F.when(F.col("key").isNotNull(), F.col("hash"))  # xxhash64(NULL) is the seed, 42
    observed = projected.observe(metrics, F.approx_count_distinct(hashes_of_keys).alias("distinct"))
    key_sql = "string" if key_type == "str" else "bigint"
    schema = (
        "n bigint, null_keys bigint, hashes array<bigint>, counts array<bigint>, deltas array<bigint>, "
        f"keys array<{key_sql}>, slots array<bigint>, slot_counts array<bigint>"
    )
    table = observed.mapInArrow(
        partial(count_partition, epsilon=epsilon, slot_bits=slot_bits), schema
    ).toArrow()
    distinct = int(metrics.get["distinct"])

    ns = table.column("n").to_numpy()
    counters = [
        LossyCounter.from_entries(epsilon, int(n), hashes, counts, deltas, "int")
        for n, hashes, counts, deltas in zip(
            ns, _rows(table, "hashes"), _rows(table, "counts"), _rows(table, "deltas"), strict=True
        )
    ]
    merged = reduce(LossyCounter.merge, counters, LossyCounter(epsilon, "int"))
    hashes, counts, deltas = merged.entries()
    # Every merged entry is in some partition's table, which carries one original key of it.
    shipped, first = np.unique(_flat(table, "hashes").to_numpy(), return_index=True)
    keys = _flat(table, "keys").take(pa.array(first[np.searchsorted(shipped, hashes)])).to_pylist()
    order = np.argsort(-counts, kind="stable")  # items by count, largest first
    items = [[keys[i], int(counts[i]), int(deltas[i])] for i in order.tolist()]

    slot_counts = np.zeros(1 << slot_bits, dtype=np.int64)
    np.add.at(slot_counts, _flat(table, "slots").to_numpy(), _flat(table, "slot_counts").to_numpy())
    filled = np.flatnonzero(slot_counts)
    return _BatchCounts(
        tuples=merged.n,
        null_keys=int(table.column("null_keys").to_numpy().sum()),
        # HyperLogLog++ errs both ways (about 5 %), but each item is a distinct key and the document
        # requires distinct_estimate >= len(items): a low estimate is clamped up to the item count.
        distinct_estimate=max(distinct, len(items)),
        items=items,
        slots=np.column_stack([filled, slot_counts[filled]]).tolist(),
    )


def _flat(table: pa.Table, name: str) -> pa.Array:
    """The values of list column ``name`` of all rows, concatenated."""
    return table.column(name).combine_chunks().flatten()


def _rows(table: pa.Table, name: str) -> list[_INT64]:
    """The values of int64 list column ``name``, one numpy array per row."""
    column = table.column(name).combine_chunks()
    if len(column) == 0:
        return []
    offsets = column.offsets.to_numpy()
    return np.split(column.flatten().to_numpy(), offsets[1:-1] - offsets[0])
