"""The counts behind an ``observe`` snapshot, exact and computed in the JVM in two passes (DESIGN §3, §9).

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

Why not a frequent-items sketch (``approx_top_k_accumulate``, DataSketches) beside the slot pass, as
issue #12 suggested: the sketch's Misra–Gries updates cost more per row than the key pass's filter
and small hash aggregation, its items carry an error, and it needs a sketch size tied to ε. Measured in
docs/DECISIONS.md, "observe in the JVM (issue #12)".
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
