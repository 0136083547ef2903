"""update_state: each channel's task writes its delta of the batch; checked against a pandas oracle.
General stores (combine over the touched keys' rows) and mergeable ones (partials reduced in the JVM,
no state read), on a local directory and on a local S3 endpoint written by the executors. Exactly
once under a batch id; damaged state and bad combines come back with their error class."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pytest
from pyspark.sql import SparkSession

from repart.errors import Corrupt, InvalidInput
from repart.partitioning import BuildParams, FrequencyEstimate, build, initial_function
from repart.spark.route import partition
from repart.spark.stateful import update_state
from repart.state.store import StateStore
from tests.factories import empty_store

SCHEMA = pa.schema([("k", pa.string()), ("n", pa.int64()), ("total", pa.int64())])


def add_up(state: pa.Table, rows: pa.Table) -> pa.Table:
    batch = rows.group_by("k").aggregate([("v", "sum"), ("k", "count")])
    batch = pa.table({"k": batch["k"], "n": batch["k_count"], "total": batch["v_sum"]}, schema=SCHEMA)
    summed = pa.concat_tables([state, batch]).group_by("k").aggregate([("n", "sum"), ("total", "sum")])
    return pa.table({"k": summed["k"], "n": summed["n_sum"], "total": summed["total_sum"]}, schema=SCHEMA)


def batch(seed: int, rows: int = 20_000) -> pa.Table:
    rng = np.random.default_rng(seed)
    keys = rng.zipf(1.3, rows) % 3_000
    return pa.table({"k": [f"key-{k}" for k in keys.tolist()], "v": rng.integers(1, 100, rows)})


def test_two_batches_fold_into_the_state_on_the_right_channels(spark: SparkSession, tmp_path: Path) -> None:
    first, second = batch(1), batch(2)
    counts = dict(zip(*np.unique(first["k"].to_numpy(zero_copy_only=False), return_counts=True), strict=True))
    function = build(
        initial_function(3, "str"), FrequencyEstimate.from_counts(counts), 5, BuildParams(), "redist"
    ).function
    store = empty_store(tmp_path / "state", function, SCHEMA, key_col="k", version=2)
    for table in (first, second):
        store, updates, _ = update_state(
            store,
            partition(spark.createDataFrame(table), "k", function),
            add_up,
            version=2,
            function=function,
        )
        assert sum(update.input_rows for update in updates) == table.num_rows
        assert all(update.busy_seconds > 0 and update.state_bytes > 0 for update in updates)
        assert all(isinstance(update.peak_bytes, int) for update in updates)  # measured on Linux
    assert store.generation == 2
    state = store.read().to_pandas()
    expected = pa.concat_tables([first, second]).to_pandas().groupby("k")["v"].agg(["count", "sum"])
    got = state.set_index("k").sort_index()
    assert got["n"].to_dict() == expected["count"].to_dict()
    assert got["total"].to_dict() == expected["sum"].to_dict()
    assert (state["channel"] == [function.lookup(key) for key in state["k"]]).all()
    assert StateStore.open(tmp_path / "state").checksum() == store.checksum()


def test_a_version_that_is_not_the_store_layout_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    old, new = initial_function(3, "str"), initial_function(4, "str")
    store = empty_store(tmp_path / "state", old, SCHEMA, key_col="k", version=1)
    frame = partition(spark.createDataFrame(batch(3, 100)), "k", new)
    with pytest.raises(InvalidInput, match=r"N=4.*not the layout.*N=3.*apply the pending migration plan"):
        update_state(store, frame, add_up, version=2, function=new)
    assert store.generation == 0 and StateStore.open(tmp_path / "state").rows() == 0


def test_a_combine_that_invents_or_duplicates_keys_is_refused(spark: SparkSession, tmp_path: Path) -> None:
    function = initial_function(2, "str")
    store = empty_store(tmp_path / "state", function, SCHEMA, key_col="k", version=1)
    frame = partition(spark.createDataFrame(batch(4, 200)), "k", function)

    def invents(state: pa.Table, rows: pa.Table) -> pa.Table:
        return pa.concat_tables(
            [add_up(state, rows), pa.table({"k": ["stranger"], "n": [1], "total": [1]}, SCHEMA)]
        )

    def duplicates(state: pa.Table, rows: pa.Table) -> pa.Table:
        summed = add_up(state, rows)
        return pa.concat_tables([summed, summed.slice(0, 1)])

    with pytest.raises(
        InvalidInput, match=r"combine must .* returned key 'stranger', which is neither in channel"
    ):
        update_state(store, frame, invents, version=1, function=function)
    with pytest.raises(InvalidInput, match=r"one row per key: .*several rows for one key"):
        update_state(store, frame, duplicates, version=1, function=function)
    assert StateStore.open(tmp_path / "state").generation == 0


def test_a_batch_is_absorbed_once_under_its_id(spark: SparkSession, tmp_path: Path) -> None:
    function = initial_function(3, "str")
    store = empty_store(tmp_path / "state", function, SCHEMA, key_col="k", version=1)
    table = batch(5, 3000)
    frame = partition(spark.createDataFrame(table), "k", function)
    store, first, _ = update_state(store, frame, add_up, version=1, function=function, batch_id=4)
    assert store.generation == 1 and store.last_batch is not None and store.last_batch.batch_id == 4
    assert list(store.last_batch.channels) == first and sum(u.input_rows for u in first) == 3000
    reopened = StateStore.open(tmp_path / "state")  # a job run again on batch 4, or on an older one
    for batch_id in (4, 2):
        again, updates, _ = update_state(
            reopened, frame, add_up, version=1, function=function, batch_id=batch_id
        )
        assert again.generation == 1 and updates == (first if batch_id == 4 else [])
    state = StateStore.open(tmp_path / "state").read().to_pandas().set_index("k")
    assert state["n"].sum() == 3000 and state["total"].sum() == pc.sum(table["v"]).as_py()
    store, _, _ = update_state(store, frame, add_up, version=1, function=function, batch_id=5)
    assert store.generation == 2 and store.read().to_pandas()["n"].sum() == 6000


@pytest.mark.parametrize("damage", ["deleted", "truncated"])
def test_a_damaged_state_file_is_corrupt_naming_it(spark: SparkSession, tmp_path: Path, damage: str) -> None:
    function = initial_function(2, "str")
    store = empty_store(tmp_path / "state", function, SCHEMA, key_col="k", version=1)
    frame = partition(spark.createDataFrame(batch(6, 2000)), "k", function)
    store, _, _ = update_state(store, frame, add_up, version=1, function=function, batch_id=0)
    victim = store.files(1)[0]
    assert store.objects.local_root is not None
    path = store.objects.local_root / victim.path
    if damage == "deleted":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[: victim.bytes // 3])
    with pytest.raises(Corrupt, match="missing" if damage == "deleted" else "Parquet magic bytes") as error:
        update_state(store, frame, add_up, version=1, function=function, batch_id=1)
    assert error.value.path == victim.path
    assert StateStore.open(tmp_path / "state").generation == 1


COUNTED = pa.schema([("k", pa.string()), ("n", pa.int64()), ("v", pa.int64()), ("low", pa.int64())])
COUNTED_MERGE = {"n": "count", "v": "sum", "low": "min"}


def test_a_mergeable_store_takes_partials_and_reads_no_state(
    spark: SparkSession, tmp_path: Path, store_url: str, store_options: dict[str, str] | None
) -> None:
    """The executors write their channels' partials (to the local S3 endpoint too); a damaged base file
    does not stop a batch, because no task reads state; the merged state equals a plain groupBy."""
    function = initial_function(3, "str")
    store = StateStore.create(
        store_url, region="r", version=1, function_digest=function.digest, n_channels=3,
        slot_bits=function.slot_bits, key_type="str", key_col="k", schema=COUNTED, slot_groups=4,
        merge=COUNTED_MERGE, options=store_options,
    )  # fmt: skip
    tables = [batch(seed, 4000) for seed in (7, 8, 9)]
    for batch_id, table in enumerate(tables):
        frame = spark.createDataFrame(table.append_column("low", table["v"]))
        store, updates, _ = update_state(
            store, partition(frame, "k", function), version=1, function=function, batch_id=batch_id
        )
        assert sum(update.input_rows for update in updates) == table.num_rows
    assert {entry.kind for entry in store.all_files()} == {"delta"}
    reopened = StateStore.open(store_url, store_options)
    state = reopened.read().to_pandas().set_index("k").sort_index()
    expected = pa.concat_tables(tables).to_pandas().groupby("k")["v"].agg(["count", "sum", "min"])
    assert state["n"].to_dict() == expected["count"].to_dict()
    assert state["v"].to_dict() == expected["sum"].to_dict()
    assert state["low"].to_dict() == expected["min"].to_dict()
    assert (state["channel"] == [function.lookup(key) for key in state.index]).all()
    if store.objects.local_root is not None:  # damage a written file: the next batch must not read it
        victim = store.files(0)[0]
        (store.objects.local_root / victim.path).write_bytes(b"not parquet")
        with pytest.raises(Corrupt):
            store.read_channel(0)
        frame = spark.createDataFrame(tables[0].append_column("low", tables[0]["v"]))
        store, _, _ = update_state(
            store, partition(frame, "k", function), version=1, function=function, batch_id=9
        )
        assert store.last_batch is not None and store.last_batch.batch_id == 9


def test_combine_and_merge_are_one_or_the_other(spark: SparkSession, tmp_path: Path) -> None:
    function = initial_function(2, "str")
    general = empty_store(tmp_path / "general", function, SCHEMA, key_col="k", version=1)
    frame = partition(spark.createDataFrame(batch(4, 50)), "k", function)
    with pytest.raises(InvalidInput, match="combine must be given for a general store") as error:
        update_state(general, frame, version=1, function=function)
    assert error.value.field == "combine"
    mergeable = StateStore.create(
        tmp_path / "mergeable", region="r", version=1, function_digest=function.digest, n_channels=2,
        slot_bits=function.slot_bits, key_type="str", key_col="k", schema=COUNTED, merge=COUNTED_MERGE,
    )  # fmt: skip
    with pytest.raises(InvalidInput) as error:
        update_state(mergeable, frame, add_up, version=1, function=function)
    assert error.value.field == "combine" and mergeable.refreshed().generation == 0
