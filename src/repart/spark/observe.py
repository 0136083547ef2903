"""``observe``: a snapshot of one Spark batch's key frequencies, computed in the JVM.

No row of the batch leaves the JVM and nothing runs in Python workers. The JVM projects every row to
``(key, hash)``: the key as repart hashes it and ``xxhash64`` of it (``repart.spark.keys``, equal to
repart's XXH64). Two passes over that projection (``repart.spark.batch_counts``) count
exactly what the snapshot holds:

1. the **slot pass**: every slot's tuple count (the histogram), its HyperLogLog register and the rows
   without a key;
2. the **key pass**, only over the rows of the slots whose count exceeds ``floor(n / ceil(1/ε))``: the
   exact count of every key in them, of which the snapshot lists those above that bound, each with
   delta 0.

The driver estimates |D| from the registers (Ertl's estimator, ``repart.spark.cardinality``), builds
the ``Snapshot`` (``repart.protocol.snapshot``) and hands it to a sink (``repart.spark.sinks``), which
writes its document. The key pass reads the batch again (Spark SQL shares no scan between jobs): its
per-slot totals must equal the slot pass's counts, so a nondeterministic batch whose reads differ is
refused (cache or checkpoint it first). Results travel through the shuffle and the jobs' results, not
through accumulators, so a retried or speculative task counts once.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
from pyspark.sql import DataFrame

from repart.errors import InvalidInput
from repart.partitioning.documents import require_int
from repart.partitioning.domain import DEFAULT_SLOT_BITS, KeyType, check_slot_bits
from repart.protocol.counter_items import CounterItems
from repart.protocol.slot_columns import SlotColumns
from repart.protocol.snapshot import (
    BatchProgress,
    ChannelMeasurement,
    Snapshot,
    batch_progress,
    channel_measurements,
    check_region_name,
)
from repart.spark.batch_counts import KeyCounts, SlotCounts, count_hot_keys, count_slots
from repart.spark.cardinality import estimate_distinct
from repart.spark.keys import key_column
from repart.validation import Interval, check

if TYPE_CHECKING:  # no import of the sinks (and the database) at run time
    from repart.spark.sinks import SnapshotSink

#: ε of a snapshot: a snapshot lists fewer than ceil(1/ε) keys, so at most a million.
EPSILON = Interval(float, 1e-6, 1.0, closed="left")


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

    The snapshot's ``tuples`` counts the rows with a non-null key and its ``items`` are the keys above
    its error bound, exactly counted; ``null_keys`` counts the rows left out (a null key).
    ``seconds`` is the wall time of the whole call (both passes and the write).
    """

    snapshot: Snapshot
    null_keys: int
    seconds: float
    destination: str


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
    progress: BatchProgress | None = None,
) -> Observation:
    """Count the keys of ``df[key_col]`` and write the batch's snapshot for ``region`` to ``sink``.

    Runs the slot pass and, when a slot can hold a key above the bound, the key pass (module
    docstring). The snapshot's ``items`` are ``(key, count, 0)`` for every key occurring more than
    ``floor(tuples / ceil(1/epsilon))`` times, ``count`` its exact count: the lossy counter's
    guarantee (``count <= true count <= count + delta``, every key above ``epsilon * tuples`` listed)
    without its error. It also holds the exact tuple count of every non-empty slot of ``slot_bits``
    bits, a HyperLogLog estimate of the distinct keys over those slots as ``distinct_estimate``, and
    ``version``, ``channels`` (per-channel measurements: dicts with channel, tuples, busy_seconds,
    state_bytes), ``batch`` (the job's id of the batch, so that a batch run again after a crash is
    ingested once) and ``progress`` (what the job knows of its time: the interval between its batches,
    its input and processing rates) as given. It holds everything ``Snapshot.from_document`` requires
    of a document (its document parses back to it), so the sink writes it as it is.

    Rows whose key is null are not counted: not in ``tuples``, items or slots. Their number is
    returned as ``Observation.null_keys``; ``repart.spark.route`` sends them to channel 0.

    Raises InvalidInput naming the field and accepted range, before any Spark work, for: a missing
    key column or one of an unsupported type, ``epsilon`` outside [1e-6, 1) (a snapshot lists fewer
    than ``ceil(1/epsilon)`` keys), ``slot_bits`` outside [10, 20], a ``window`` that is not a
    ``Window``, a bad region name, version or channels; after the passes, for a batch whose two reads
    disagree (``df``). A sink that rejects the snapshot (such as a window already ingested under
    another batch) raises its RepartError. Nothing is written when anything raises.
    """
    began = time.perf_counter()
    key = key_column(df, key_col)
    fields = _snapshot_fields(
        region, window, epsilon, key.key_type, slot_bits, version, channels, batch, progress
    )
    projected = df.select(key.value.alias("key"), key.hash.alias("hash"))
    slots = count_slots(projected, slot_bits)
    keys = count_hot_keys(projected, slots, fields.keywords["epsilon"], slot_bits)
    return _emitted(fields(slots, keys), slots.null_keys, sink, began)


def observe_counted(
    counts: tuple[SlotCounts, KeyCounts],
    key_type: KeyType,
    region: str,
    window: Window,
    sink: SnapshotSink,
    *,
    epsilon: float = 1e-3,
    slot_bits: int = DEFAULT_SLOT_BITS,
    version: int | None = None,
    channels: Sequence[dict[str, Any]] | None = None,
    batch: int | None = None,
    progress: BatchProgress | None = None,
) -> Observation:
    """``observe`` for counts that a read of the batch made already: a job's update counts the slots and
    keys of the rows it folds (``repart.spark.stateful.update_state``), so the snapshot costs no
    Spark job of its own. Its fields and checks are ``observe``'s; ``key_type`` is the key column's."""
    began = time.perf_counter()
    fields = _snapshot_fields(
        region, window, epsilon, key_type, slot_bits, version, channels, batch, progress
    )
    slots, keys = counts
    return _emitted(fields(slots, keys), slots.null_keys, sink, began)


def _snapshot_fields(
    region: str,
    window: Window,
    epsilon: float,
    key_type: KeyType,
    slot_bits: int,
    version: int | None,
    channels: Sequence[dict[str, Any]] | None,
    batch: int | None,
    progress: BatchProgress | None,
) -> partial[Snapshot]:
    """``_snapshot`` with every field but the counts, each checked (InvalidInput naming it)."""
    epsilon = check("epsilon", epsilon, EPSILON)
    if not isinstance(window, Window):
        raise InvalidInput("window", f"must be a repart.spark.observe.Window, got {type(window).__name__}")
    check_slot_bits(slot_bits)
    return partial(
        _snapshot,
        region=check_region_name(region),
        window=window,
        epsilon=epsilon,
        key_type=key_type,
        slot_bits=slot_bits,
        version=None if version is None else require_int(version, "version", 1),
        channels=None if not channels else channel_measurements(list(channels)),
        batch=None if batch is None else require_int(batch, "batch"),
        progress=None if progress is None else batch_progress(progress.to_document()),
    )


def _emitted(snapshot: Snapshot, null_keys: int, sink: SnapshotSink, began: float) -> Observation:
    """``snapshot`` written to ``sink``, as an Observation."""
    destination = sink.write(snapshot)
    return Observation(
        snapshot=snapshot,
        null_keys=null_keys,
        seconds=time.perf_counter() - began,
        destination=destination,
    )


def _snapshot(
    slots: SlotCounts,
    keys: KeyCounts,
    *,
    region: str,
    window: Window,
    epsilon: float,
    key_type: KeyType,
    slot_bits: int,
    version: int | None,
    channels: tuple[ChannelMeasurement, ...] | None,
    batch: int | None,
    progress: BatchProgress | None,
) -> Snapshot:
    """The snapshot of the two passes' counts in ``window``; ``version``, ``channels``, ``batch`` and
    ``progress`` only when given."""
    items = CounterItems(tuple(keys.keys), keys.counts, np.zeros(len(keys.keys), dtype=np.int64))
    distinct = estimate_distinct(slots.registers, slot_bits)
    return Snapshot(
        region=region,
        seq=window.seq,
        window_start=window.start.astimezone(UTC),
        window_end=window.end.astimezone(UTC),
        tuples=slots.n,
        # HyperLogLog errs both ways, but each item is a distinct key and a snapshot requires
        # distinct_estimate >= len(items): a low estimate is clamped up to the item count.
        distinct_estimate=max(distinct, len(items)),
        epsilon=epsilon,
        key_type=key_type,
        items=items,
        slot_bits=slot_bits,
        slots=SlotColumns(slots.slots, slots.tuples),
        version=version,
        channels=channels,
        batch=batch,
        progress=progress,
    )
