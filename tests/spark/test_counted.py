"""The snapshot a job's update counts as it folds the batch equals observe's own two passes over the
batch (themselves checked against exact counts in test_observe), for mergeable and general state,
key-preserving and split functions; and the counts of one channel handle null keys and split keys."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest
from pyspark.sql import SparkSession

from repart.partitioning import initial_function
from repart.partitioning.function import PartitionFunction
from repart.partitioning.split.function import SplitEntry, SplitFunction
from repart.spark.batch_counts import (
    REGISTER_COLUMN,
    SLOT_COLUMN,
    ChannelCounts,
    KeyCounts,
    SlotCounts,
    channel_counts,
    merged_counts,
)
from repart.spark.observe import observe, observe_counted
from repart.spark.route import partition
from repart.spark.stateful import Counting, update_state
from tests.factories import empty_store
from tests.spark.observing import WINDOW, MemorySink

SCHEMA = pa.schema([("k", pa.string()), ("n", pa.int64()), ("total", pa.int64())])
EPSILON = 1e-3


def add_up(state: pa.Table, rows: pa.Table) -> pa.Table:
    batch = rows.group_by("k").aggregate([("v", "sum"), ("k", "count")])
    batch = pa.table({"k": batch["k"], "n": batch["k_count"], "total": batch["v_sum"]}, schema=SCHEMA)
    both = pa.concat_tables([state.cast(SCHEMA), batch])
    summed = both.group_by("k").aggregate([("n", "sum"), ("total", "sum")])
    return pa.table({"k": summed["k"], "n": summed["n_sum"], "total": summed["total_sum"]}, schema=SCHEMA)


def skewed(seed: int, rows: int = 30_000) -> pa.Table:
    rng = np.random.default_rng(seed)
    keys = (rng.zipf(1.2, rows) - 1) % 5_000
    return pa.table({"k": [f"k{key}" for key in keys.tolist()], "v": rng.integers(1, 100, rows)})


def functions() -> dict[str, PartitionFunction | SplitFunction]:
    plain = initial_function(4, "str")
    hot = {"k0": SplitEntry((plain.lookup("k0"), (plain.lookup("k0") + 1) % 4), (0.5, 0.5))}
    return {"preserve": plain, "split": SplitFunction(plain, hot)}


@pytest.mark.parametrize("kind", ["preserve", "split"])
@pytest.mark.parametrize("mergeable", [True, False], ids=["mergeable", "general"])
def test_the_update_counts_the_snapshot_observe_counts(
    spark: SparkSession, tmp_path: Path, kind: str, mergeable: bool
) -> None:
    function = functions()[kind]
    merge = {"n": "count", "total": "sum"} if mergeable else None
    store = empty_store(tmp_path / "state", function, SCHEMA, key_col="k", merge=merge)  # type: ignore[arg-type]
    frame = spark.createDataFrame(skewed(3)).cache()
    _, updates, counts = update_state(
        store,
        partition(frame, "k", function),
        None if mergeable else add_up,
        version=1,
        function=function,
        sources={"total": "v"} if mergeable else None,
        counting=Counting.of(function, EPSILON),
    )
    assert counts is not None
    expected, got = MemorySink(), MemorySink()
    observe(frame, "k", "r", WINDOW, expected, epsilon=EPSILON, slot_bits=function.slot_bits)
    observe_counted(counts, "str", "r", WINDOW, got, epsilon=EPSILON, slot_bits=function.slot_bits)
    assert got.snapshots == expected.snapshots
    assert sum(update.input_rows for update in updates) == frame.count()
    if kind == "split":  # the split key's rows were spread over its two channels, and added up
        assert "k0" in expected.snapshots[0].items.keys


def test_one_channel_keeps_its_keys_above_its_own_bound_split_keys_and_null_keys_apart() -> None:
    rows = pa.table(
        {
            "k": ["a"] * 5 + ["b"] * 2 + ["s"] + [None] * 3,
            SLOT_COLUMN: [1] * 5 + [2] * 2 + [3] + [None] * 3,
            REGISTER_COLUMN: [4] * 5 + [2] * 2 + [1] + [None] * 3,
        }
    )
    counts = channel_counts(rows, "k", None, 0.25, frozenset({"s"}))  # 8 keyed rows: bound 8 // 4 = 2
    assert counts.keys.keys == ["a", "s"] and counts.keys.counts.tolist() == [5, 1]
    assert counts.slots.slots.tolist() == [1, 2, 3] and counts.slots.tuples.tolist() == [5, 2, 1]
    assert counts.slots.registers.tolist() == [4, 2, 1] and counts.slots.null_keys == 3
    assert _same(ChannelCounts.from_bytes(counts.to_bytes()), counts)


def _same(a: ChannelCounts, b: ChannelCounts) -> bool:
    def slots(counts: SlotCounts) -> tuple[list[int], ...]:
        return counts.slots.tolist(), counts.tuples.tolist(), counts.registers.tolist(), [counts.null_keys]

    def keys(counts: KeyCounts) -> tuple[list[object], list[int]]:
        return counts.keys, counts.counts.tolist()

    return slots(a.slots) == slots(b.slots) and keys(a.keys) == keys(b.keys)


def test_a_channel_of_null_keys_only_keeps_its_count_through_the_report() -> None:
    rows = pa.table(
        {"k": pa.array([None] * 3, pa.string()), SLOT_COLUMN: pa.array([None] * 3, pa.int64()),
         REGISTER_COLUMN: pa.array([None] * 3, pa.int32())}
    )  # fmt: skip
    counts = ChannelCounts.from_bytes(channel_counts(rows, "k", None, 0.25, frozenset()).to_bytes())
    assert counts.slots.null_keys == 3 and len(counts.slots.slots) == 0 and counts.keys.keys == []


def test_the_channels_counts_add_up_to_the_batchs() -> None:
    def part(keys: list[str], counts: list[int], slots: list[int], nulls: int) -> ChannelCounts:
        return ChannelCounts(
            SlotCounts(np.array(slots), np.array(counts), np.array([3] * len(slots)), nulls),
            KeyCounts(keys, np.array(counts, np.int64)),
        )

    # 'a' alone on channel 0, 's' split over both channels: 40 keyed rows, bound 40 // 4 = 10.
    slots, keys = merged_counts(
        [part(["a", "s"], [12, 6], [5, 9], 1), part(["s", "b"], [7, 15], [9, 2], 0)], 0.25, 10
    )
    assert (slots.slots.tolist(), slots.tuples.tolist(), slots.null_keys) == ([2, 5, 9], [15, 12, 13], 1)
    assert keys.keys == ["b", "s", "a"] and keys.counts.tolist() == [15, 13, 12]
