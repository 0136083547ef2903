"""The frequent-items sketch ``observe`` runs in the JVM: its size for an error bound ε, the Spark
aggregate, and reading it on the driver (DESIGN §3, §9).

Spark's ``approx_top_k_accumulate(key, sketch_size)`` builds DataSketches' frequent-items sketch
(``ItemsSketch``; Anderson et al., "A High-Performance Algorithm for Identifying Frequent Items in
Data Streams", IMC 2017): a Misra–Gries table of at most ``0.75 * M`` counters in a hash map of ``M``
slots, ``M = 2^ceil(log2(ceil(sketch_size / 0.75)))`` (Spark's ``ApproxTopK.calMaxMapSize``). When
the table is full, the median counter is subtracted from every counter, the non-positive ones are
dropped, and the median is added to the sketch's ``offset``; partial sketches merge by adding
counters and offsets. The sketch then guarantees, for every item, ``counter <= true count <= counter
+ offset`` (an item without a counter has counter 0), and DataSketches documents the a-priori bound
``offset <= 3.5 / M * n`` for a stream of weight ``n`` (the "Error Threshold Table" of the frequent
items sketch: ``epsilon = 3.5 / maxMapSize``; ``datasketches.frequent_items_sketch.epsilon`` returns
it).

A snapshot item is ``[key, count, delta]`` with ``count <= true <= count + delta`` and every key with
more than ``floor(n / ceil(1/ε))`` occurrences present (README "Snapshot documents"), so ``count`` is
the sketch's lower bound, ``delta = offset``, and the sketch must keep ``offset <= floor(n /
ceil(1/ε))``. By the bound above that holds whenever ``3.5 / M <= 1 / ceil(1/ε)``, i.e. ``M >= 3.5 *
ceil(1/ε)``: that is the sketch size ε needs (``minimum_sketch_size``), checked before the job runs,
and the measured offset is checked again after it (``FrequentKeys.check_error``).

The binary sketch (the ``sketch`` field of the accumulate struct) is DataSketches' serialized
frequent-items format; the ``datasketches`` package (the library's C++ implementation) reads it with
the serde of the item type: strings (int32 length + UTF-8 bytes) and longs (8 bytes little-endian).
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import datasketches
import numpy as np
import numpy.typing as npt
from pyspark.sql import Column
from pyspark.sql import functions as F

from repart.errors import InvalidInput
from repart.partitioning.domain import Key, KeyType
from repart.partitioning.frequency import bucket_width
from repart.validation import Interval, check

# DataSketches' a-priori error factor: the sketch errs by at most EPSILON_FACTOR / M of the stream.
EPSILON_FACTOR = 3.5
# The sketch's hash map holds at most LOAD_FACTOR * M counters.
LOAD_FACTOR = 0.75
# DataSketches' smallest map (LG_MIN_MAP_SIZE = 3): a smaller maxMapSize gets this one.
MIN_MAP_SIZE = 8
# The largest maxItemsTracked Spark accepts (ApproxTopK.MAX_ITEMS_TRACKED_LIMIT).
MAX_SKETCH_SIZE = 1_000_000
SKETCH_SIZE = Interval(int, 1, MAX_SKETCH_SIZE)


def map_size(sketch_size: int) -> int:
    """The hash map size ``M`` a sketch of ``sketch_size`` items gets: the power of two at or above
    ``ceil(sketch_size / 0.75)`` (Spark's ``calMaxMapSize``, here in integer arithmetic: Spark's
    floating-point version never gives less), at least DataSketches' smallest map of 8."""
    return max(MIN_MAP_SIZE, 1 << (-(-4 * sketch_size // 3) - 1).bit_length())


def required_map_size(epsilon: float) -> int:
    """The smallest map size whose a-priori error ``3.5 / M * n`` stays within the ``floor(n /
    ceil(1/epsilon))`` a snapshot allows: the power of two at or above ``3.5 * ceil(1/epsilon)``."""
    return 1 << (math.ceil(EPSILON_FACTOR * bucket_width(epsilon)) - 1).bit_length()


def minimum_sketch_size(epsilon: float) -> int:
    """The fewest items a sketch for ``epsilon`` may have: the smallest size with ``map_size(size) >=
    required_map_size(epsilon)``. InvalidInput naming ``epsilon`` when no size Spark accepts is
    enough."""
    required = required_map_size(epsilon)
    # For M > 8: map_size(s) >= M  <=>  ceil(4s/3) > M/2  <=>  s > 3M/8; any size gets a map of 8.
    smallest = 1 if required <= MIN_MAP_SIZE else 3 * required // 8 + 1
    if smallest > MAX_SKETCH_SIZE:
        largest = map_size(MAX_SKETCH_SIZE)
        raise InvalidInput(
            "epsilon",
            f"must be at least 1/{math.floor(largest / EPSILON_FACTOR):,} (about "
            f"{EPSILON_FACTOR / largest:.3g}): Spark's largest frequent-items sketch "
            f"({MAX_SKETCH_SIZE:,} items, a map of {largest:,}) errs by up to {EPSILON_FACTOR}/{largest:,} "
            f"of the tuples, got {epsilon!r}",
        )
    return smallest


def default_sketch_size(epsilon: float) -> int:
    """The sketch size ``observe`` uses for ``epsilon``: every counter the required map holds
    (``0.75 * M``, capped at Spark's limit), since fewer items would not make the map smaller."""
    minimum_sketch_size(epsilon)
    return min(int(LOAD_FACTOR * required_map_size(epsilon)), MAX_SKETCH_SIZE)


def check_sketch_size(sketch_size: object, epsilon: float) -> int:
    """``sketch_size`` as an int if it is in [1, 1,000,000] and large enough for ``epsilon``;
    InvalidInput naming ``sketch_size`` (and ``epsilon``) otherwise."""
    size = int(check("sketch_size", sketch_size, SKETCH_SIZE))
    smallest = minimum_sketch_size(epsilon)
    if size < smallest:
        raise InvalidInput(
            "sketch_size",
            f"must be at least {smallest:,} for epsilon={epsilon!r}: a sketch of {size:,} items has a map "
            f"of M = {map_size(size):,} and errs by up to {EPSILON_FACTOR}/M of the tuples, but epsilon "
            f"allows 1/{bucket_width(epsilon):,} (M >= {required_map_size(epsilon):,}), got {size:,}",
        )
    return size


def accumulate(column: str, sketch_size: int) -> Column:
    """Spark's aggregate building the sketch of column ``column`` (a plain column name) with
    ``sketch_size`` items; nulls are skipped. Its value is a struct whose ``sketch`` field holds the
    serialized sketch."""
    return F.expr(f"approx_top_k_accumulate(`{column}`, {int(sketch_size)})")


@dataclass(frozen=True)
class FrequentKeys:
    """A sketch read on the driver: the tracked ``keys`` with their lower bounds ``counts``, the
    sketch's ``offset`` (every key's true count is in ``[count, count + offset]``, 0 for a key
    without a counter), the stream weight ``n`` and the map size ``M`` the sketch had."""

    keys: list[Key]
    counts: npt.NDArray[np.int64]
    offset: int
    n: int
    map_size: int

    def check_error(self, epsilon: float, sketch_size: int) -> None:
        """InvalidInput naming ``sketch_size`` and ``epsilon`` if the offset exceeds the ``floor(n /
        ceil(1/epsilon))`` a snapshot allows (DataSketches' bound says it cannot for a size that
        ``check_sketch_size`` accepted; this keeps the document valid if the bound is ever missed)."""
        allowed = self.n // bucket_width(epsilon)
        if self.offset > allowed:
            raise InvalidInput(
                "sketch_size",
                f"must be larger for epsilon={epsilon!r}: the sketch of {sketch_size:,} items erred by up "
                f"to {self.offset:,} of {self.n:,} tuples, more than floor(n / ceil(1/epsilon)) = "
                f"{allowed:,}",
            )


def read_sketch(serialized: bytes, key_type: KeyType) -> FrequentKeys:
    """The keys, lower bounds and offset of a serialized sketch of ``key_type`` keys (``str``: a
    sketch of Spark strings, ``int``: of bigints), largest count first."""
    serde: Any = datasketches.PyStringsSerDe() if key_type == "str" else datasketches.PyLongsSerDe()
    sketch = datasketches.frequent_items_sketch.deserialize(serialized, serde)
    # NO_FALSE_NEGATIVES with threshold 0 lists every tracked item: (item, estimate, lower, upper).
    rows = sketch.get_frequent_items(datasketches.frequent_items_error_type.NO_FALSE_NEGATIVES, 0)
    rows.sort(key=lambda row: -row[2])
    # Every item has upper - lower = offset; without items, any item's upper bound is the offset.
    offset = rows[0][3] - rows[0][2] if rows else sketch.get_upper_bound("" if key_type == "str" else 0)
    return FrequentKeys(
        keys=[row[0] for row in rows],
        counts=np.fromiter((row[2] for row in rows), dtype=np.int64, count=len(rows)),
        offset=int(offset),
        n=int(sketch.total_weight),
        map_size=round(EPSILON_FACTOR / sketch.epsilon),
    )
