"""What ``observe``'s executors run: a lossy counter over one partition's ``(hash, key)`` batches
(DESIGN §3, §9).

Kept apart from ``repart.spark.observe`` so that a Python worker unpickling ``count_partition``
imports only numpy, pyarrow and ``repart.partitioning`` (not repart.storage and SQLAlchemy, which
``observe`` needs for the snapshot document and which took about 0.6 s per worker to import).
"""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from repart.partitioning.frequency import LossyCounter
from repart.partitioning.hashing import slots_of_hashes

# Rows a task collects from Arrow batches (Spark sends 10,000 at a time by default) before it updates
# its counter, in whole chunks of this size: LossyCounter absorbs chunks of 2^16 fastest, and a short
# chunk would pay the merge with the counter's table for few rows.
CHUNK_ROWS = 1 << 16

_INT64 = npt.NDArray[np.int64]


def count_partition(
    batches: Iterator[pa.RecordBatch], *, epsilon: float, slot_bits: int
) -> Iterator[pa.RecordBatch]:
    """``mapInArrow`` function: count one partition's ``(hash, key)`` batches, yield one result row."""
    partition: PartitionCounter | None = None
    for batch in batches:
        if partition is None:
            partition = PartitionCounter(epsilon, slot_bits, batch.column(1).type)
        partition.add(batch)
    if partition is not None:
        yield partition.result()


class PartitionCounter:
    """One partition's lossy counter over key hashes, slot counts, null keys and retained keys.

    ``_hashes`` is the counter's table (sorted hashes) after the last update and ``_keys[i]`` an
    original key of ``_hashes[i]``. A hash enters the table only while a chunk containing it is
    counted, so after each chunk the keys of the new entries are found in that chunk.
    """

    def __init__(self, epsilon: float, slot_bits: int, key_type: pa.DataType) -> None:
        self._counter = LossyCounter(epsilon, "int")
        self._slot_bits = slot_bits
        self._slot_counts = np.zeros(1 << slot_bits, dtype=np.int64)
        self._null_keys = 0
        self._hashes: _INT64 = np.empty(0, dtype=np.int64)
        self._keys = pa.array([], type=key_type)
        self._pending: list[tuple[_INT64, pa.Array]] = []
        self._pending_rows = 0

    def add(self, batch: pa.RecordBatch) -> None:
        hashes, keys = batch.column(0), batch.column(1)
        if keys.null_count:
            self._null_keys += keys.null_count
            valid = keys.is_valid()
            hashes, keys = hashes.filter(valid), keys.filter(valid)
        self._pending.append((hashes.to_numpy(), keys))
        self._pending_rows += len(keys)
        if self._pending_rows >= CHUNK_ROWS:
            self._flush(self._pending_rows - self._pending_rows % CHUNK_ROWS)

    def _flush(self, rows: int) -> None:
        """Count the first ``rows`` pending rows (whole chunks but at the end); keep the rest pending."""
        if not rows:
            return
        hashes = np.concatenate([part for part, _ in self._pending])
        keys = pa.concat_arrays([part for _, part in self._pending])
        self._pending = [(hashes[rows:], keys.slice(rows))]
        self._pending_rows -= rows
        hashes, keys = hashes[:rows], keys.slice(0, rows)
        self._counter.update(hashes)
        slots = slots_of_hashes(hashes.view(np.uint64), self._slot_bits)
        self._slot_counts += np.bincount(slots, minlength=len(self._slot_counts))

        table = self._counter.entries()[0]
        known, found = _find(self._hashes, table)
        new = table[~found]
        at, hit = _find(new, hashes)
        row_of_new = np.empty(len(new), dtype=np.int64)
        row_of_new[at[hit]] = np.flatnonzero(hit)  # any row holding the hash will do
        take = np.where(found, known, 0)
        take[~found] = len(self._keys) + row_of_new
        self._keys = pa.concat_arrays([self._keys, keys]).take(pa.array(take))
        self._hashes = table

    def result(self) -> pa.RecordBatch:
        """The partition's one result row (the schema in ``repart.spark.observe._count``)."""
        self._flush(self._pending_rows)
        hashes, counts, deltas = self._counter.entries()
        filled = np.flatnonzero(self._slot_counts)
        columns = {
            "n": pa.array([self._counter.n], type=pa.int64()),
            "null_keys": pa.array([self._null_keys], type=pa.int64()),
            "hashes": _one_list(pa.array(hashes)),
            "counts": _one_list(pa.array(counts)),
            "deltas": _one_list(pa.array(deltas)),
            "keys": _one_list(self._keys),
            "slots": _one_list(pa.array(filled.astype(np.int64))),
            "slot_counts": _one_list(pa.array(self._slot_counts[filled])),
        }
        return pa.RecordBatch.from_arrays(list(columns.values()), names=list(columns))


def _find(table: _INT64, values: _INT64) -> tuple[_INT64, npt.NDArray[np.bool_]]:
    """For each of ``values``: a position in the sorted ``table`` and whether the value is there."""
    if len(table) == 0:
        return np.zeros(len(values), dtype=np.int64), np.zeros(len(values), dtype=bool)
    positions = np.minimum(np.searchsorted(table, values), len(table) - 1).astype(np.int64)
    return positions, table[positions] == values


def _one_list(values: pa.Array) -> pa.ListArray:
    """A list array of one row holding ``values``."""
    return pa.ListArray.from_arrays(pa.array([0, len(values)], type=pa.int32()), values)
