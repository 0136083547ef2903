"""The counts behind an ``observe`` snapshot, exact: from two passes in the JVM, or from a job's update.

Both passes read the projection ``(key, hash)`` of the batch (``hash`` = ``xxhash64`` of the key as
repart hashes it, ``repart.spark.keys``) with Spark's generated hash aggregation; only aggregates are
shuffled and collected, never the batch's rows.

1. **The slot pass** groups the rows by slot ``h >> (64 - S)``: each non-empty slot's exact tuple count
   (the snapshot's histogram) and its HyperLogLog register, the largest ``rho`` of its hashes
   (``repart.spark.cardinality``); the rows with a null key form one group of their own (no slot),
   whose count is the batch's null keys.
2. **The key pass** counts exactly the keys of the *hot* slots. A key's count is at most its slot's
   count, so every key occurring more than ``bound = floor(n / ceil(1/ε))`` times lies in a slot whose
   count exceeds ``bound``; the slot counts sum to ``n``, so fewer than ``ceil(1/ε)`` slots are hot. The
   pass keeps the rows whose slot is hot (one bit of a ``2^S``-bit mask, a plan constant, tested per
   row) and groups them by ``(slot, key)``. The snapshot's items are the keys counted more than
   ``bound`` times, each ``[key, count, 0]``: a lossy counter's guarantee (``count <= true <= count +
   delta``, every key above ``ε·n`` listed) with no error at all. A batch without a hot slot (no key
   can exceed the bound) runs no key pass.

The key pass reads the batch a second time. Its per-slot totals must equal the slot pass's count of
every hot slot: a batch whose two reads differ there (a nondeterministic batch that is not cached) is
refused rather than described by items whose counts disagree with their slots'. Rows of the other
slots are read by the slot pass only, so a difference confined to them goes unseen, and the snapshot
describes the slot pass's read.

A job that updates keyed state reads the batch once already: its update reduces the rows to one
partial per channel and key (mergeable state, each partial with the number of rows it stands for) or
hands each channel's rows to a task (general state). The same counts then come from that read
(``channel_counts``, ``merged_counts``): the JVM adds each partial's or row's slot and HyperLogLog
register as columns, each channel's task counts its keys, slots and registers in Arrow,
and keeps the keys above the channel's own bound ``floor(n_c / ceil(1/ε))``, a bound no larger than
the batch's (``n_c <= n``), so every key above the batch's bound is kept by the channel that holds
all its rows; a split key's rows are spread over channels, so its every channel keeps it. The driver
adds the channels' counts up and keeps the keys above the batch's bound: the same snapshot as the two
passes, with no Spark job of its own.

Why not a frequent-items sketch (``approx_top_k_accumulate``, DataSketches) beside the slot pass, as
the first plan suggested: the sketch's Misra–Gries updates cost more per row than the key pass's filter
and small hash aggregation, its items carry an error, and it needs a sketch size tied to ε. Measured in
docs/DECISIONS.md, "observe in the JVM".
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql import Column, DataFrame
from pyspark.sql import functions as F

from repart.errors import InvalidInput
from repart.partitioning.domain import Key
from repart.protocol.snapshot import closed_buckets
from repart.spark.cardinality import register_value
from repart.spark.constants import constant

IntArray = npt.NDArray[np.int64]

#: Bits of one word of the hot-slot mask (a Spark bigint).
WORD_BITS = 64
#: The columns the JVM adds to a batch's rows for ``channel_counts``: each row's slot and register.
SLOT_COLUMN = "_observe_slot"
REGISTER_COLUMN = "_observe_register"


def counted_columns(key: Column, hash_column: Column, slot_bits: int) -> list[Column]:
    """The JVM expressions of ``SLOT_COLUMN`` and ``REGISTER_COLUMN`` (null for a null key)."""
    slot = F.shiftrightunsigned(hash_column, 64 - slot_bits)
    return [
        F.when(key.isNotNull(), slot).alias(SLOT_COLUMN),
        F.when(key.isNotNull(), register_value(hash_column, slot_bits)).alias(REGISTER_COLUMN),
    ]


@dataclass(frozen=True)
class SlotCounts:
    """The slot pass's result: the non-empty ``slots`` in ascending order with their exact ``tuples``
    and HyperLogLog ``registers``, and the rows whose key is null (``null_keys``)."""

    slots: IntArray
    tuples: IntArray
    registers: IntArray
    null_keys: int

    @property
    def n(self) -> int:
        """The rows with a key: the sum of the slot counts."""
        return int(self.tuples.sum())


@dataclass(frozen=True)
class KeyCounts:
    """The key pass's result: every key counted more than ``closed_buckets(n, epsilon)`` times,
    largest count first (ties by key), with its exact count."""

    keys: list[Key]
    counts: IntArray


@dataclass(frozen=True)
class ChannelCounts:
    """One channel's share of a batch's counts (``channel_counts``): its slots with their tuples and
    registers, its null keys, and its candidate keys with their counts on the channel."""

    slots: SlotCounts
    keys: KeyCounts

    def to_bytes(self) -> bytes:
        """The counts as an Arrow IPC stream of two record batches (slots, then keys)."""
        slots = pa.record_batch(
            {"slot": self.slots.slots, "tuples": self.slots.tuples, "register": self.slots.registers},
            metadata={"null_keys": str(self.slots.null_keys)},
        )
        keys = pa.record_batch({"key": pa.array(self.keys.keys), "tuples": self.keys.counts})
        sink = pa.BufferOutputStream()
        with pa.ipc.new_stream(sink, slots.schema) as writer:
            writer.write_batch(slots)
        with pa.ipc.new_stream(sink, keys.schema) as writer:
            writer.write_batch(keys)
        return bytes(sink.getvalue().to_pybytes())

    @classmethod
    def from_bytes(cls, data: bytes) -> ChannelCounts:
        """The counts ``to_bytes`` wrote."""
        reader = pa.BufferReader(data)
        slots = pa.ipc.open_stream(reader).read_all()
        keys = pa.ipc.open_stream(reader).read_all()
        null_keys = int((slots.schema.metadata or {})[b"null_keys"])
        return cls(
            SlotCounts(_int64(slots, "slot"), _int64(slots, "tuples"), _int64(slots, "register"), null_keys),
            KeyCounts(keys.column("key").to_pylist(), _int64(keys, "tuples")),
        )


def channel_counts(
    rows: pa.Table, key_col: str, tuples: pa.Array | None, epsilon: float, always: frozenset[Key]
) -> ChannelCounts:
    """A channel's counts from its rows: columns ``key_col``, ``SLOT_COLUMN`` and ``REGISTER_COLUMN``
    (the JVM's, null for a null key) and, for rows that stand for several batch rows (a mergeable
    update's partials, one per key), their number ``tuples``. Keeps the keys counted more than
    ``floor(n_c / ceil(1/epsilon))`` times (``n_c``: the channel's rows with a key) and the keys of
    ``always`` (a split function's split keys) that it holds."""
    weights = pa.array(np.ones(rows.num_rows, np.int64)) if tuples is None else tuples
    table = pa.table(
        {"key": rows.column(key_col), "slot": rows.column(SLOT_COLUMN),
         "register": rows.column(REGISTER_COLUMN), "tuples": weights}
    )  # fmt: skip
    keyed = pc.is_valid(table.column("slot"))
    null_keys = int(pc.sum(table.filter(pc.invert(keyed)).column("tuples")).as_py() or 0)
    table = table.filter(keyed)
    by_slot = table.group_by("slot").aggregate([("tuples", "sum"), ("register", "max")]).sort_by("slot")
    n = int(pc.sum(table.column("tuples")).as_py() or 0)
    by_key = table.group_by("key").aggregate([("tuples", "sum")]) if tuples is None else table
    counts = by_key.column("tuples_sum" if tuples is None else "tuples")
    kept = pc.greater(counts, closed_buckets(n, epsilon))
    if always:
        kept = pc.or_(kept, pc.is_in(by_key.column("key"), value_set=pa.array(sorted(always, key=str))))
    heavy = by_key.filter(kept)
    return ChannelCounts(
        SlotCounts(
            slots=_int64(by_slot, "slot"),
            tuples=_int64(by_slot, "tuples_sum"),
            registers=_int64(by_slot, "register_max"),
            null_keys=null_keys,
        ),
        KeyCounts(heavy.column("key").to_pylist(), np.asarray(pc.filter(counts, kept).to_numpy(), np.int64)),
    )


def merged_counts(parts: list[ChannelCounts], epsilon: float, slot_bits: int) -> tuple[SlotCounts, KeyCounts]:
    """The batch's counts from its channels': slot tuples added and registers maxed over channels, and
    the keys above the batch's bound ``floor(n / ceil(1/epsilon))`` with their counts added over the
    channels that kept them (largest first, ties by key)."""
    tuples = np.zeros(1 << slot_bits, np.int64)
    registers = np.zeros(1 << slot_bits, np.int64)
    found: dict[Key, int] = {}
    for part in parts:
        np.add.at(tuples, part.slots.slots, part.slots.tuples)
        np.maximum.at(registers, part.slots.slots, part.slots.registers)
        for key, count in zip(part.keys.keys, part.keys.counts.tolist(), strict=True):
            found[key] = found.get(key, 0) + count
    occupied = np.flatnonzero(tuples)
    slots = SlotCounts(occupied, tuples[occupied], registers[occupied], sum(p.slots.null_keys for p in parts))
    bound = closed_buckets(slots.n, epsilon)
    heavy = sorted(
        ((key, count) for key, count in found.items() if count > bound), key=lambda kc: (-kc[1], kc[0])
    )
    return slots, KeyCounts([key for key, _ in heavy], np.array([count for _, count in heavy], np.int64))


def count_slots(projected: DataFrame, slot_bits: int) -> SlotCounts:
    """Run the slot pass over ``projected`` (columns ``key``, ``hash``): one Spark job."""
    slot = F.when(F.col("key").isNotNull(), F.shiftrightunsigned("hash", 64 - slot_bits))
    table = (
        projected.groupBy(slot.alias("slot"))
        .agg(
            F.count(F.lit(1)).alias("tuples"),
            F.max(register_value(F.col("hash"), slot_bits)).alias("register"),
        )
        .toArrow()
    )
    keyed = pc.is_valid(table.column("slot"))
    nulls = table.filter(pc.invert(keyed)).column("tuples").to_pylist()
    histogram = table.filter(keyed).sort_by("slot")
    return SlotCounts(
        slots=_int64(histogram, "slot"),
        tuples=_int64(histogram, "tuples"),
        registers=_int64(histogram, "register"),
        null_keys=int(nulls[0]) if nulls else 0,
    )


def count_hot_keys(projected: DataFrame, slots: SlotCounts, epsilon: float, slot_bits: int) -> KeyCounts:
    """Run the key pass over ``projected`` for the slots of ``slots`` above ``closed_buckets(n, epsilon)``,
    ``floor(n / ceil(1/epsilon))``, the bound a snapshot document allows (no Spark
    job when there are none) and check it against them; InvalidInput ``df`` when the two reads of the
    batch disagree on a hot slot's count (the slots the items come from; rows of other slots are read
    by the slot pass only)."""
    bound = closed_buckets(slots.n, epsilon)
    hot = slots.tuples > bound
    if not hot.any():
        return KeyCounts(keys=[], counts=np.zeros(0, dtype=np.int64))
    slot = F.shiftrightunsigned("hash", 64 - slot_bits)
    table = (
        projected.where(F.col("key").isNotNull() & in_slot_mask(slot, slots.slots[hot], slot_bits))
        .groupBy(slot.alias("slot"), F.col("key"))
        .agg(F.count(F.lit(1)).alias("tuples"))
        .toArrow()
    )
    counted = _int64(table, "tuples")
    seen = np.zeros(1 << slot_bits, dtype=np.int64)
    np.add.at(seen, _int64(table, "slot"), counted)
    expected = np.zeros(1 << slot_bits, dtype=np.int64)
    expected[slots.slots[hot]] = slots.tuples[hot]
    if not np.array_equal(seen, expected):
        differing = int(np.count_nonzero(seen != expected))
        raise InvalidInput(
            "df",
            "must give the same rows each time it is read: observe reads the batch twice (slot counts, "
            f"then the keys of the {int(hot.sum()):,} slots above {bound:,} rows) and the reads differ in "
            f"{differing:,} of those slots; cache or checkpoint a nondeterministic batch before observing it",
        )
    heavy = table.filter(pc.greater(table.column("tuples"), bound)).sort_by(
        [("tuples", "descending"), ("key", "ascending")]
    )
    return KeyCounts(keys=heavy.column("key").to_pylist(), counts=_int64(heavy, "tuples"))


def in_slot_mask(slot: Column, members: IntArray, slot_bits: int) -> Column:
    """Whether ``slot`` is one of ``members``: its bit in a mask of ``2^slot_bits`` bits held as one
    ``array<bigint>`` constant (word ``slot >> 6``, bit ``slot & 63``), constant time per row."""
    words = np.zeros((1 << slot_bits) // WORD_BITS, dtype=np.uint64)
    np.bitwise_or.at(words, members >> 6, np.left_shift(np.uint64(1), (members & 63).astype(np.uint64)))
    mask = constant(words.view(np.int64).tolist(), "array<bigint>")
    word = F.get(mask, F.shiftright(slot, 6).cast("int"))
    # The shift by a column: pyspark's shiftrightunsigned takes a fixed shift only.
    bit = F.call_function("shiftrightunsigned", word, slot.bitwiseAND(63).cast("int"))
    return bit.bitwiseAND(1) == 1


def _int64(table: pa.Table, column: str) -> IntArray:
    """A non-null integer column of ``table`` as an int64 numpy array."""
    return np.asarray(table.column(column).to_numpy(), dtype=np.int64)
