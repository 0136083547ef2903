"""Compaction (``StateStore.compact``, ``repart.state.compact``), checked against independent oracles:
the content (every row, sorted) and each row's channel (``check_oracle``), a plain Python replay of the
batches (newest row wins, tombstones delete) or a pyarrow group_by of every input row (a mergeable
store), the objects the store holds, and a policy written out from its definition."""

from __future__ import annotations

from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import repart.state.store as store_module
from repart.errors import Conflict, Corrupt, InvalidInput
from repart.partitioning import PartitionFunction, initial_function
from repart.state.batches import absorbed_batch
from repart.state.compact import (
    DEFAULT_MAX_DELTA_FILES,
    DEFAULT_MAX_DELTA_SHARE,
    DEFAULT_MAX_FILES_PER_GROUP,
    DEFAULT_MAX_FILTERED_SHARE,
    CompactionPolicy,
    compact_files,
)
from repart.state.files import FileKindName
from repart.state.filters import SlotFilter
from repart.state.store import FileEntry, StateStore
from tests.factories import (
    CHURNED_FUNCTION,
    SMALL_SLOT_BITS,
    all_files,
    check_oracle,
    churned_store,
    empty_store,
    log_documents,
    new_store,
    object_listing,
    sorted_rows,
    state_table,
)

ROWS = 6000
FOUR = CHURNED_FUNCTION
#: Any delta makes a channel due.
FOLD_EVERY_DELTA = CompactionPolicy(max_delta_share=0)


def test_compaction_leaves_one_unfiltered_file_per_slot_group_with_the_same_content(
    store_url: str, store_options: dict[str, str] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = churned_store(store_url, ROWS, monkeypatch, store_options)
    table = state_table(ROWS, "str")
    before = all_files(store)
    assert all(entry.filter is not None for entry in before)  # churned: every entry filtered
    checksum, generation = store.checksum(), store.generation
    result = store.compact()
    assert result.compacted and result.generation == generation + 1 == store.generation
    check_oracle(store, table, FOUR, store_options)
    after = all_files(store)
    pairs = [(entry.channel, entry.slot_group) for entry in after]
    assert len(pairs) == len(set(pairs)) and all(entry.filter is None for entry in after)
    assert store.checksum() == checksum
    assert (result.files_before, result.files_after) == (len(before), len(after))
    replaced = set(before) - set(after)
    assert result.replaced_files == len(replaced)
    assert result.dropped_rows == sum(entry.hidden_rows for entry in replaced)
    new_paths = {e.path for e in after} - {e.path for e in before}
    assert result.written_files == len(new_paths) == len(after)
    assert result.channels == (0, 1, 2, 3)
    data = {path for path in object_listing(store) if path.startswith("data/")}
    assert {entry.path for entry in after} <= data
    assert not store.compact().compacted  # nothing is due any more


def test_nothing_due_writes_nothing(tmp_path: Any) -> None:
    store = new_store(tmp_path / "s", initial_function(3, "str", SMALL_SLOT_BITS), state_table(500, "str"))
    files = object_listing(store)
    result = store.compact()
    assert not result.compacted and result.channels == () and result.generation == store.generation == 1
    assert result.files_before == result.files_after == len(all_files(store))
    assert (result.replaced_files, result.written_files, result.dropped_rows) == (0, 0, 0)
    assert object_listing(store) == files


def entry(channel: int, group: int, rows: int, hidden: int, delta: bool) -> FileEntry:
    runs = SlotFilter(((0, 0),), hidden) if hidden else None
    return FileEntry(
        f"data/{'0' * 32}.parquet",
        channel,
        None if delta else group,
        rows,
        100,
        0,
        runs,
        kind="delta" if delta else "base",
    )


@settings(max_examples=200, deadline=None)
@given(
    files=st.lists(
        st.tuples(
            st.integers(0, 3), st.integers(0, 7), st.integers(1, 100), st.integers(0, 100), st.booleans()
        ),
        max_size=30,
    ),
    share=st.floats(0, 1, exclude_max=True),
    per_group=st.floats(1, 4),
    delta_share=st.floats(0, 3),
    delta_files=st.integers(1, 4),
)
def test_a_channel_is_due_past_any_threshold(
    files: list[tuple[int, int, int, int, bool]],
    share: float,
    per_group: float,
    delta_share: float,
    delta_files: int,
) -> None:
    entries = [entry(*row) for row in files]
    expected = []
    for channel in range(4):
        mine = [row for row in files if row[0] == channel]
        if not mine:
            continue
        bases = [row for row in mine if not row[4]]
        deltas = [row for row in mine if row[4]]
        hidden, total = sum(row[3] for row in mine), sum(row[2] + row[3] for row in mine)
        too_many_deltas = len(deltas) > delta_files
        too_much_delta = bool(deltas) and sum(r[2] for r in deltas) > delta_share * sum(r[2] for r in bases)
        if (
            too_many_deltas
            or too_much_delta
            or hidden > share * total
            or len(bases) > per_group * len({row[1] for row in bases})
        ):
            expected.append(channel)
    assert CompactionPolicy(share, per_group, delta_share, delta_files).due(entries) == expected


@pytest.mark.parametrize(
    ("arguments", "field", "message"),
    [
        ({"max_filtered_share": 1.0}, "max_filtered_share", r"must be a number in \[0, 1\), got 1.0"),
        ({"max_filtered_share": -0.1}, "max_filtered_share", r"must be a number in \[0, 1\)"),
        ({"max_filtered_share": float("nan")}, "max_filtered_share", r"must be a number in \[0, 1\)"),
        ({"max_filtered_share": "0.1"}, "max_filtered_share", r"must be a number in \[0, 1\), got '0.1'"),
        ({"max_files_per_group": 0.5}, "max_files_per_group", r"must be a number in \[1, 1024\], got 0.5"),
        ({"max_files_per_group": 2000}, "max_files_per_group", r"must be a number in \[1, 1024\]"),
        ({"max_delta_share": -1}, "max_delta_share", r"must be a number in \[0, 1000\], got -1"),
        ({"max_delta_share": 1001}, "max_delta_share", r"must be a number in \[0, 1000\], got 1001"),
        ({"max_delta_files": 0}, "max_delta_files", r"must be an integer in \[1, 100000\], got 0"),
        ({"max_delta_files": 2.5}, "max_delta_files", r"must be an integer in \[1, 100000\], got 2.5"),
    ],
)
def test_thresholds_out_of_range_name_the_field(arguments: dict[str, Any], field: str, message: str) -> None:
    with pytest.raises(InvalidInput, match=f"^{field} {message}") as error:
        CompactionPolicy(**arguments)
    assert error.value.field == field
    assert CompactionPolicy() == CompactionPolicy(
        DEFAULT_MAX_FILTERED_SHARE,
        DEFAULT_MAX_FILES_PER_GROUP,
        DEFAULT_MAX_DELTA_SHARE,
        DEFAULT_MAX_DELTA_FILES,
    )


def test_of_two_overlapping_compactions_the_second_conflicts(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer compacts the same channels while this compaction is prepared: both remove the
    same entries, so the second to commit is refused and commits nothing; run again, it finds nothing
    due."""
    store = churned_store(tmp_path / "s", ROWS, monkeypatch)
    other = StateStore.open(store.url)
    original = compact_files
    raced: list[int] = []

    def racing(*args: Any, **kwargs: Any) -> Any:
        compaction = original(*args, **kwargs)
        if not raced:  # once: the other writer's own compaction runs through this function too
            raced.append(-1)
            raced[0] = other.compact().generation
        return compaction

    monkeypatch.setattr(store_module, "compact_files", racing)
    with pytest.raises(
        Conflict, match=r"moved on to generation 4 through a compact that removed file data/\w+\.parquet"
    ):
        store.compact()
    assert raced == [4]
    reopened = StateStore.open(store.url)
    assert reopened.generation == 4 and set(reopened.all_files()) == set(other.all_files())
    check_oracle(reopened, state_table(ROWS, "str"), FOUR)
    assert not store.compact().compacted


def test_a_batch_committed_while_a_compaction_is_prepared_goes_through_and_stays_newest(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A batch only adds files, so a compaction commits after it; the compacted rows keep the seq of
    the rows they fold, so the batch's rows stay the newest."""
    store = churned_store(tmp_path / "s", ROWS, monkeypatch)
    table = state_table(ROWS, "str")
    job = StateStore.open(store.url)
    mine = table.filter(pa.array(FOUR.lookup_many(table.column("key").to_pylist()) == 2)).slice(0, 10)
    raised = mine.set_column(1, "volume", pa.array([v + 7 for v in mine["volume"].to_pylist()]))
    original = compact_files

    def racing(*args: Any, **kwargs: Any) -> Any:
        compaction = original(*args, **kwargs)
        job.commit(
            {2: job.write(2, raised)},
            version=3,
            function_digest=FOUR.digest,
            n_channels=4,
            batch=absorbed_batch(1, []),
        )
        return compaction

    monkeypatch.setattr(store_module, "compact_files", racing)
    result = store.compact()
    assert result.compacted and result.generation == 5 and job.generation == 4
    expected = {row["key"]: row for row in table.to_pylist()} | {
        row["key"]: row for row in raised.to_pylist()
    }
    reopened = StateStore.open(store.url)
    assert reopened.last_batch is not None and reopened.last_batch.batch_id == 1
    assert [entry.kind for entry in reopened.files(2)].count("delta") == 1
    assert sorted_rows(reopened.read()).equals(sorted_rows(pa.Table.from_pylist(list(expected.values()))))
    monkeypatch.setattr(store_module, "compact_files", original)
    assert reopened.compact(FOLD_EVERY_DELTA).channels == (2,)  # the delta folds in, still newest
    assert sorted_rows(reopened.read()).equals(sorted_rows(pa.Table.from_pylist(list(expected.values()))))
    assert reopened.rows() == ROWS


def test_a_job_commit_goes_ahead_over_a_compaction(tmp_path: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    """A job's handle read generation G; a compaction (same state) moved the store on: the job's commit
    only adds its delta, so it goes ahead, and its rows are the newest."""
    store = churned_store(tmp_path / "s", ROWS, monkeypatch)
    job = StateStore.open(store.url)
    old_state = job.read_channel(2)
    new_state = old_state.slice(0, 10).set_column(
        1, "volume", pa.array([v * 3 + 1 for v in old_state.slice(0, 10)["volume"].to_pylist()])
    )
    entries = job.write(2, new_state)
    assert StateStore.open(store.url).compact().compacted
    job.commit({2: entries}, version=3, function_digest=FOUR.digest, n_channels=4)
    reopened = StateStore.open(store.url)
    assert reopened.generation == 5
    expected = {row["key"]: row for row in old_state.to_pylist()} | {
        row["key"]: row for row in new_state.to_pylist()
    }
    assert (
        reopened.read_channel(2)
        .sort_by("key")
        .equals(pa.Table.from_pylist(list(expected.values())).sort_by("key"))
    )
    assert reopened.read_channel(1).num_rows == store.read_channel(1).num_rows


def test_a_damaged_file_stops_compaction_with_nothing_committed(
    tmp_path: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = churned_store(tmp_path / "s", ROWS, monkeypatch)
    victim = next(entry for entry in all_files(store) if entry.filter is not None)
    store.objects.write(victim.path, store.objects.read(victim.path)[:-40])
    log = log_documents(store)
    with pytest.raises(Corrupt, match="Parquet magic bytes") as error:
        store.compact()
    assert error.value.path == victim.path
    assert log_documents(store) == log and StateStore.open(store.url).generation == 3


SCHEMA = pa.schema([("key", pa.int64()), ("volume", pa.int64()), ("venue", pa.string())])


def general_store(location: Any, options: dict[str, str] | None, function: PartitionFunction) -> StateStore:
    return empty_store(location, function, SCHEMA, slot_groups=4, options=options)


def commit_batch(
    store: StateStore,
    function: PartitionFunction,
    batch_id: int,
    upserts: dict[int, tuple[int, str | None]],
    deletes: set[int],
    kind: FileKindName = "delta",
) -> None:
    """Write one batch (rows for ``upserts``, tombstones for ``deletes``) channel by channel, as
    deltas (or base files), and commit it."""
    keys = sorted(upserts) + sorted(deletes)
    rows = pa.table(
        {
            "key": pa.array(keys, pa.int64()),
            "volume": pa.array([upserts[k][0] if k in upserts else None for k in keys], pa.int64()),
            "venue": pa.array([upserts[k][1] if k in upserts else None for k in keys], pa.string()),
            "_deleted": pa.array([k in deletes for k in keys], pa.bool_()),
        }
    )
    channels = np.array([function.lookup(key) for key in keys], dtype=np.int64)
    added = {
        channel: store.write(channel, rows.filter(pa.array(channels == channel)), kind=kind)
        for channel in range(function.n_channels)
    }
    store.commit(
        added,
        version=1,
        function_digest=function.digest,
        n_channels=function.n_channels,
        batch=absorbed_batch(batch_id, []),
    )


def expected_state(state: dict[int, tuple[int, str | None]], function: PartitionFunction) -> pa.Table:
    keys = sorted(state)
    return pa.table(
        {
            "key": pa.array(keys, pa.int64()),
            "volume": pa.array([state[k][0] for k in keys], pa.int64()),
            "venue": pa.array([state[k][1] for k in keys], pa.string()),
            "channel": pa.array([function.lookup(k) for k in keys], pa.int32()),
        }
    )


def assert_state(
    store: StateStore, state: dict[int, tuple[int, str | None]], function: PartitionFunction
) -> None:
    assert store.read().sort_by("key").equals(expected_state(state, function))


def test_compaction_folds_upserts_and_tombstones_into_base_files(
    store_url: str, store_options: dict[str, str] | None
) -> None:
    """A general store: base rows, then batches of upserts and deletes as deltas; a reader resolves
    them, and compaction folds them into one base file per slot group holding exactly that state."""
    function = initial_function(3, "int", SMALL_SLOT_BITS)
    store = general_store(store_url, store_options, function)
    state: dict[int, tuple[int, str | None]] = {k: (k * 10, f"v{k % 3}") for k in range(300)}
    commit_batch(store, function, 0, dict(state), set(), kind="base")
    batches: list[tuple[dict[int, tuple[int, str | None]], set[int]]] = [
        ({k: (k * 100, None) for k in range(0, 300, 7)} | {k: (1, "new") for k in range(300, 340)}, set()),
        ({}, set(range(0, 300, 5)) | {999}),  # 999 never existed: its tombstone deletes nothing
        ({k: (-k, "back") for k in range(0, 100, 5)}, set(range(300, 320))),
    ]
    for batch_id, (upserts, deletes) in enumerate(batches, start=1):
        commit_batch(store, function, batch_id, upserts, deletes)
        state.update(upserts)
        for key in deletes:
            state.pop(key, None)
    assert_state(store, state, function)  # resolved on read
    before = store.all_files()
    assert [entry.kind for entry in before].count("delta") == 3 * 3
    file_rows = sum(entry.file_rows for entry in before)

    result = store.compact(FOLD_EVERY_DELTA)
    assert result.compacted and result.channels == (0, 1, 2)
    after = store.all_files()
    assert all(entry.kind == "base" and entry.filter is None for entry in after)
    pairs = [(entry.channel, entry.slot_group) for entry in after]
    assert len(pairs) == len(set(pairs)) and None not in {group for _, group in pairs}
    assert store.rows() == len(state) and result.dropped_rows == file_rows - len(state)
    assert result.replaced_files == len(before) and result.written_files == len(after)
    assert all(entry.seq == 4 for entry in after)  # the newest rows folded: batch 3's generation
    assert_state(store, state, function)
    store.verify()
    reopened = StateStore.open(store_url, store_options)
    assert_state(reopened, state, function)
    assert not reopened.compact(FOLD_EVERY_DELTA).compacted

    commit_batch(reopened, function, 4, {0: (5, "after"), 301: (6, None)}, {1})  # newer than the base
    state.update({0: (5, "after"), 301: (6, None)})
    state.pop(1)
    assert_state(reopened, state, function)
    assert reopened.compact(FOLD_EVERY_DELTA).compacted
    assert_state(reopened, state, function)


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    batches=st.lists(
        st.tuples(
            st.dictionaries(st.integers(0, 40), st.one_of(st.none(), st.integers(-5, 5)), max_size=25),
            st.booleans(),
        ),
        min_size=1,
        max_size=6,
    ),
    groups=st.sampled_from([1, 4]),
)
def test_reads_and_compactions_between_batches_match_a_replay(
    tmp_path_factory: pytest.TempPathFactory,
    batches: list[tuple[dict[int, int | None], bool]],
    groups: int,
) -> None:
    """Batches of upserts (a value) and deletes (None) over a few keys, a compaction after some of
    them: the state read, before and after each compaction, is the replay of the batches in order."""
    function = initial_function(2, "int", SMALL_SLOT_BITS)
    store = empty_store(tmp_path_factory.mktemp("s"), function, SCHEMA, slot_groups=groups)
    state: dict[int, tuple[int, str | None]] = {}
    for batch_id, (operations, compact) in enumerate(batches):
        upserts: dict[int, tuple[int, str | None]] = {
            key: (value, str(batch_id)) for key, value in operations.items() if value is not None
        }
        deletes = {key for key, value in operations.items() if value is None}
        commit_batch(store, function, batch_id, upserts, deletes)
        state.update(upserts)
        for key in deletes:
            state.pop(key, None)
        assert_state(store, state, function)
        if compact:
            store.compact(FOLD_EVERY_DELTA)
            assert all(entry.kind == "base" for entry in store.all_files())
            assert store.rows() == len(state)
            assert_state(store, state, function)
    store.verify()
    assert_state(StateStore.open(store.url), state, function)


COUNTED = pa.schema(
    [("key", pa.string()), ("n", pa.int64()), ("v", pa.int64()), ("low", pa.int64()), ("high", pa.int64())]
)
COUNTED_MERGE = {"n": "count", "v": "sum", "low": "min", "high": "max"}


def partials(rows: pa.Table) -> pa.Table:
    """A batch's partial rows per key, as a job writes them: count, sum, min and max of ``v``."""
    grouped = rows.group_by("key", use_threads=False).aggregate(
        [("v", "count"), ("v", "sum"), ("v", "min"), ("v", "max")]
    )
    return pa.table(
        {
            "key": grouped["key"],
            "n": grouped["v_count"],
            "v": grouped["v_sum"],
            "low": grouped["v_min"],
            "high": grouped["v_max"],
        },
        schema=COUNTED,
    )


def test_compaction_merges_a_mergeable_stores_partials(
    store_url: str, store_options: dict[str, str] | None
) -> None:
    """A mergeable store: each batch writes its partials (count, sum, min, max) per channel; compaction
    merges them into one row per key, equal to a group_by of every input row."""
    function = initial_function(3, "str", SMALL_SLOT_BITS)
    store = empty_store(
        store_url, function, COUNTED, slot_groups=4, merge=COUNTED_MERGE, options=store_options
    )
    rng = np.random.default_rng(5)
    inputs = []
    for batch_id in range(4):
        keys = [f"k{k}" for k in rng.integers(0, 200, 1500)]
        rows = pa.table({"key": keys, "v": pa.array(rng.integers(-1000, 1000, 1500), pa.int64())})
        inputs.append(rows)
        channels = np.array([function.lookup(key) for key in keys])
        added = {
            channel: store.write(channel, partials(rows.filter(pa.array(channels == channel))))
            for channel in range(3)
        }
        store.commit(
            added,
            version=1,
            function_digest=function.digest,
            n_channels=3,
            batch=absorbed_batch(batch_id, []),
        )
    everything = pa.concat_tables(inputs)
    oracle = partials(everything).sort_by("key")
    assert store.read_merged().sort_by("key").equals(oracle)  # merged on read
    delta_rows = store.rows()

    result = store.compact()  # deltas only, no base rows: due by their share
    assert result.compacted and result.channels == (0, 1, 2)
    assert all(entry.kind == "base" for entry in store.all_files())
    assert store.rows() == oracle.num_rows and result.dropped_rows == delta_rows - oracle.num_rows
    for channel in range(3):
        on_channel = [function.lookup(key) == channel for key in oracle.column("key").to_pylist()]
        assert store.read_channel(channel).sort_by("key").equals(oracle.filter(pa.array(on_channel)))
    assert StateStore.open(store_url, store_options).read_merged().sort_by("key").equals(oracle)
    store.verify()
