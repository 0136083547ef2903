"""Schema evolution (``StateStore.evolve``): nullable columns added to a store's schema.

The oracle is written out here from the operations alone: a general store replays its batches into a
plain dict of rows, a mergeable store merges every partial row written in plain Python (sums, counts'
partials summed, minima and maxima over the values that are not null; null when there are none). A row
written before a column existed has no value for it, so the oracle's table, built with
``pa.Table.from_pylist`` in the store's schema, holds a null there. Every reader must return exactly
that table, for data in base files and deltas written before the evolution (which lack the column),
after it, and after a migration (rows relisted, filtered and restaged) and a compaction.

Every refused change must leave the store's objects as they were: same generation, no new ``_log/``
object. The functional tests run on a local directory and on the local S3 endpoint.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from repart.errors import Conflict, Corrupt, InvalidInput
from repart.migration import plan_migration
from repart.partitioning import PartitionFunction
from repart.partitioning.domain import Key
from repart.partitioning.hashing import hash_keys, slots_of_hashes
from repart.partitioning.split.function import SplitEntry, SplitFunction
from repart.state.compact import CompactionPolicy
from repart.state.files import (
    DELETED_COLUMN,
    SLOT_COLUMN,
    FileKindName,
    Layout,
    checked_layout,
    file_schema,
    write_channel_files,
)
from repart.state.log import Generation, Log
from repart.state.store import StateStore
from tests.factories import (
    REGION,
    SMALL_SLOT_BITS,
    legacy_store,
    log_documents,
    new_store,
    object_listing,
    state_table,
)

BITS = SMALL_SLOT_BITS
EVERY_DELTA = CompactionPolicy(max_delta_share=0.0)
Row = dict[str, Any]
Function = PartitionFunction | SplitFunction


def with_columns(schema: pa.Schema, *fields: pa.Field) -> pa.Schema:
    for field in fields:
        schema = schema.append(field)
    return schema


def commit_rows(store: StateStore, routed: Mapping[int, Sequence[Row]], kind: FileKindName = "delta") -> None:
    """Write each channel's rows in the store's current schema (a column a row leaves out is null; a
    general store's rows are upserts unless ``_deleted``) and commit them as one generation."""
    schema = (
        store.schema if store.merge is not None else store.schema.append(pa.field(DELETED_COLUMN, pa.bool_()))
    )
    added = {
        channel: store.write(channel, pa.Table.from_pylist(list(rows), schema=schema), kind=kind)
        for channel, rows in routed.items()
    }
    store.commit(
        added, version=store.version, function_digest=store.function_digest, n_channels=store.n_channels
    )


def file_widths(store: StateStore) -> set[tuple[str, ...]]:
    """The user's columns of every file the store lists."""
    return {
        tuple(
            name
            for name in file_schema(store.objects, entry.path).names
            if name not in (SLOT_COLUMN, DELETED_COLUMN)
        )
        for entry in store.all_files()
    }


# --- a general store ------------------------------------------------------------------------------------

KEYS = [f"k{i}" for i in range(40)]
PROBE = ["k0", "k1", "k2", "k4", "k5", "k6", "k9", "k50", "k77"]


def write_general(store: StateStore, function: PartitionFunction, batch: Mapping[Key, Row | None]) -> None:
    """One batch: each key's row, or for None a tombstone, on ``function``'s channel."""
    routed: dict[int, list[Row]] = {}
    for key, row in batch.items():
        routed.setdefault(function.lookup(key), []).append(
            {"key": key, **(row or {}), DELETED_COLUMN: row is None}
        )
    commit_rows(store, routed)


def replayed(state: Mapping[Key, Row], batch: Mapping[Key, Row | None]) -> dict[Key, Row]:
    after = dict(state)
    for key, row in batch.items():
        if row is None:
            after.pop(key, None)
        else:
            after[key] = dict(row)
    return after


def check_general(store: StateStore, function: PartitionFunction, state: Mapping[Key, Row]) -> None:
    """Every reader returns the oracle's table: ``read`` (every key on ``function``'s channel),
    ``read_channel`` of some columns, ``read_keys``; ``verify`` passes, and ``read_bytes`` reads
    every file's footer."""
    expected = pa.Table.from_pylist(
        [{"key": key, **row} for key, row in sorted(state.items())], schema=store.schema
    )
    channels = [function.lookup(key) for key in expected["key"].to_pylist()]
    got = store.read().sort_by("key")
    assert got.schema.equals(store.schema.append(pa.field("channel", pa.int32())))
    assert got.drop_columns(["channel"]).to_pylist() == expected.to_pylist()
    assert got["channel"].to_pylist() == channels
    last = store.schema.names[-1]
    for channel in range(store.n_channels):
        mine = expected.filter(pa.array([found == channel for found in channels], pa.bool_()))
        assert (
            store.read_channel(channel, [last, "key"]).sort_by("key").to_pylist()
            == mine.select([last, "key"]).to_pylist()
        )
        probed = store.read_keys(channel, pa.array(PROBE)).sort_by("key")
        assert probed.schema.equals(store.schema)
        assert probed.to_pylist() == [row for row in mine.to_pylist() if row["key"] in PROBE]
        assert store.read_bytes(channel) > 0 or not store.files(channel)
    store.verify()


def test_a_general_store_reads_added_columns_as_null_where_files_lack_them(
    store_url: str, store_options: dict[str, str] | None
) -> None:
    """Base files and a delta (updates, tombstones) written before any evolution; ``trades`` added, a
    delta that sets it on some rows and leaves it null on others, re-adds a deleted key and deletes
    one; ``note`` added, one more delta. Files of three widths then hold the state, and every reader
    returns the replay; a migration that relists, filters and restages rows of every width keeps it;
    ``flag`` added over the migration's filtered entries, one more delta, and a compaction keep it; a
    fresh open reads it too."""
    a = PartitionFunction(4, key_type="str", slot_bits=BITS, explicit={"k1": 3, "k2": 0})
    b = PartitionFunction(5, key_type="str", slot_bits=BITS, explicit={"k1": 0, "k4": 4, "k5": 2})
    base = pa.table(
        {
            "key": KEYS,
            "volume": pa.array(range(len(KEYS)), pa.int64()),
            "venue": [None if i % 7 == 3 else f"v{i % 3}" for i in range(len(KEYS))],
        }
    )
    store = new_store(store_url, a, base, slot_groups=4, options=store_options)
    state: dict[Key, Row] = {row.pop("key"): row for row in base.to_pylist()}
    steps: list[tuple[pa.Field | None, dict[Key, Row | None]]] = [
        (None, {"k1": {"volume": 101, "venue": "x"}, "k2": None, "k3": None}),
        (
            pa.field("trades", pa.int32()),
            {
                "k4": {"volume": 4, "venue": None, "trades": 7},
                "k5": {"volume": 5, "venue": "y", "trades": None},
                "k2": {"volume": 2, "venue": "z", "trades": 2},
                "k50": {"volume": 50, "venue": None, "trades": 1},
                "k6": None,
            },
        ),
        (
            pa.field("note", pa.string()),
            {
                "k0": {"volume": 0, "venue": None, "trades": 3, "note": "n0"},
                "k4": {"volume": 44, "venue": "w"},
            },
        ),
    ]
    for added, batch in steps:
        if added is not None:
            generation = store.generation
            assert store.evolve(with_columns(store.schema, added)) is store
            assert store.generation == generation + 1 and store.layout.added[-1] == added.name
            check_general(store, a, state)  # nothing written yet in the new schema: nulls
        write_general(store, a, batch)
        state = replayed(state, batch)
        check_general(store, a, state)
    assert {entry.kind for entry in store.all_files()} == {"base", "delta"}
    assert file_widths(store) == {
        ("key", "volume", "venue"),
        ("key", "volume", "venue", "trades"),
        ("key", "volume", "venue", "trades", "note"),
    }
    before = {entry.path for entry in store.all_files()}
    result = store.apply(plan_migration(a, b), plan_id=1, region=REGION, from_version=1, to_version=2)
    assert result.moved_rows and result.filtered_files and result.taken_rows
    written = {entry.path for entry in store.all_files()} - before
    assert written  # the rows of the explicit keys' slots were restaged, in the new schema
    assert all("note" in file_schema(store.objects, path).names for path in written)
    check_general(store, b, state)
    assert any(entry.filter is not None for entry in store.all_files())
    store.evolve(with_columns(store.schema, pa.field("flag", pa.bool_())))  # over filtered entries
    check_general(store, b, state)
    batch = {"k1": {"volume": 1, "flag": True}, "k7": {"volume": 7, "trades": 0, "flag": False}, "k0": None}
    write_general(store, b, batch)
    state = replayed(state, batch)
    check_general(store, b, state)
    before = {entry.path for entry in store.all_files()}
    assert store.compact(EVERY_DELTA).compacted
    written = {entry.path for entry in store.all_files()} - before
    assert written and all("flag" in file_schema(store.objects, path).names for path in written)
    check_general(store, b, state)
    check_general(StateStore.open(store_url, store_options), b, state)


def test_a_store_of_format_2_evolves_after_its_upgrade(tmp_path: Path) -> None:
    """A format-2 store (files without ``_deleted``) evolves: its upgrade commits generation 0, the
    evolution generation 1, and its files read the new column as null."""
    a = PartitionFunction(3, key_type="str", slot_bits=BITS)
    table = state_table(300, "str")
    store = StateStore.open(legacy_store(tmp_path / "legacy", a, table))
    store.evolve(with_columns(store.schema, pa.field("extra", pa.float32())))
    assert (store.format, store.generation, store.layout.added) == (3, 1, ("extra",))
    commits = [text for path, text in sorted(log_documents(store).items()) if "checkpoint" not in path]
    assert [json.loads(text)["operation"] for text in commits] == ["upgrade", "evolve"]
    state = {row.pop("key"): row for row in table.to_pylist()}
    check_general(store, a, state)
    write_general(store, a, {"ticker-3": {"volume": 3, "extra": 1.5}, "ticker-4": None})
    check_general(store, a, replayed(state, {"ticker-3": {"volume": 3, "extra": 1.5}, "ticker-4": None}))


# --- a mergeable store, split keys consolidated ---------------------------------------------------------

MERGEABLE_SCHEMA = pa.schema([("key", pa.string()), ("volume", pa.int64()), ("low", pa.float64())])
MERGE = {"volume": "sum", "low": "min"}
NEW_COLUMNS = (pa.field("trades", pa.int64()), pa.field("high", pa.float64()))
NEW_MERGE = {"trades": "count", "high": "max"}
HOT = ["h0", "h1"]
COLD = [f"c{i}" for i in range(12)]


def split_over(home: PartitionFunction, split: Mapping[Key, tuple[int, ...]]) -> SplitFunction:
    return SplitFunction(
        home,
        {key: SplitEntry(chosen, tuple([1 / len(chosen)] * len(chosen))) for key, chosen in split.items()},
    )


def create(
    location: str,
    function: Function,
    schema: pa.Schema,
    merge: Mapping[str, str] | None,
    options: Mapping[str, str] | None,
) -> StateStore:
    """An empty store of region ``REGION`` at version 1 laid out by ``function`` (4 slot groups)."""
    return StateStore.create(
        location,
        region=REGION,
        version=1,
        function_digest=function.digest,
        n_channels=function.n_channels,
        slot_bits=BITS,
        key_type="str",
        key_col="key",
        schema=schema,
        slot_groups=4,
        merge=merge,
        options=options,
    )


def candidates_of(function: SplitFunction, key: Key) -> tuple[int, ...]:
    entry = function.split.get(key)
    return entry.candidates if entry is not None else (function.home.lookup(key),)


def merged_row(rows: Sequence[Row]) -> Row:
    """The merge of partial rows in plain Python, nulls skipped: a count's partials are summed."""

    def present(name: str) -> list[Any]:
        return [row[name] for row in rows if row.get(name) is not None]

    return {
        "volume": sum(present("volume")),
        "low": min(present("low"), default=None),
        "trades": sum(present("trades")) if present("trades") else None,
        "high": max(present("high"), default=None),
    }


def test_a_mergeable_store_merges_added_columns_null_safe(
    store_url: str, store_options: dict[str, str] | None
) -> None:
    """Partials of split and cold keys as base files and a delta, then ``trades`` (a count) and
    ``high`` (a max) added and two more deltas: keys with partials only from before (their new columns
    stay null), from both (the nulls skipped), only from after. Each channel reads the merge of the
    partials written to it, ``read_merged`` the merge of all of a key's; a plan that consolidates the
    split keys (its pools mixing old and new partials) and moves cold slots, then a compaction, keep
    the merged state."""
    home = PartitionFunction(4, key_type="str", slot_bits=BITS, explicit={"h0": 0, "h1": 1})
    a = split_over(home, {"h0": (0, 1, 2), "h1": (1, 3)})
    moved = {
        slot: (int(home.table[slot]) + 1) % 4
        for slot in slots_of_hashes(hash_keys(COLD, "str"), BITS).tolist()
    }
    b = split_over(
        PartitionFunction(
            4, key_type="str", slot_bits=BITS, explicit={"h0": 1, "h1": 3}, slot_overrides=moved
        ),
        {"h0": (1, 0)},
    )
    plan = plan_migration(a, b)
    assert {(row.key, row.source, row.target) for row in plan.consolidations} >= {("h0", 2, 1), ("h1", 1, 3)}
    store = create(store_url, a, MERGEABLE_SCHEMA, MERGE, store_options)
    written: list[tuple[Key, int, Row]] = []

    def batch(rows: Sequence[tuple[Key, int, Row]], kind: FileKindName = "delta") -> None:
        routed: dict[int, list[Row]] = {}
        for key, choice, row in rows:
            candidates = candidates_of(a, key)
            channel = candidates[choice % len(candidates)]
            routed.setdefault(channel, []).append({"key": key, **row})
            written.append((key, channel, row))
        commit_rows(store, routed, kind)

    batch(
        [
            (key, choice, {"volume": 10 + choice, "low": 1.0 + choice})
            for key in HOT
            for choice in range(len(candidates_of(a, key)))
        ],
        "base",
    )
    batch(
        [(key, 0, {"volume": i, "low": None if i % 3 else float(i)}) for i, key in enumerate(COLD)]
        + [("h0", 2, {"volume": 5, "low": 0.5})]
    )
    store.evolve(with_columns(store.schema, *NEW_COLUMNS), NEW_MERGE)
    assert store.merge == {**MERGE, **NEW_MERGE} and store.layout.added == ("trades", "high")
    batch(
        [
            ("h0", 1, {"volume": 1, "low": 2.0, "trades": 4, "high": 9.0}),
            ("h1", 0, {"volume": 1, "low": None, "trades": None, "high": 3.0}),
        ]
    )
    batch(
        [(key, 0, {"volume": 100, "low": 0.0, "trades": 1, "high": None}) for key in COLD[:4]]
        + [("n0", 0, {"volume": 7, "trades": 2, "high": 1.0})]
    )

    def by_key(rows: list[Row]) -> dict[Key, Row]:
        return {row.pop("key"): row for row in rows}

    per_key: dict[Key, list[Row]] = {}
    per_channel: dict[tuple[Key, int], list[Row]] = {}
    for key, channel, row in written:
        per_key.setdefault(key, []).append(row)
        per_channel.setdefault((key, channel), []).append(row)
    oracle = pa.Table.from_pylist(
        [{"key": key, **merged_row(rows)} for key, rows in sorted(per_key.items())], schema=store.schema
    )
    assert oracle["trades"].null_count and oracle["high"].null_count  # keys with only old partials
    assert store.read_merged().sort_by("key").equals(oracle)
    for channel in range(4):
        expected = {key: merged_row(rows) for (key, at), rows in per_channel.items() if at == channel}
        assert by_key(store.read_channel(channel).to_pylist()) == expected
        probed = by_key(store.read_keys(channel, pa.array(["h0", "h1", "c0", "c5", "n0"])).to_pylist())
        assert probed == {key: row for key, row in expected.items() if key in ("h0", "h1", "c0", "c5", "n0")}
    store.verify()
    result = store.apply(plan, plan_id=1, region=REGION, from_version=1, to_version=2)
    assert result.moved_rows and not result.already_applied
    for row in store.read().to_pylist():
        assert row["channel"] in candidates_of(b, row["key"]), row
    assert store.read_merged().sort_by("key").equals(oracle)
    store.verify()
    before = {entry.path for entry in store.all_files()}
    assert store.compact(EVERY_DELTA).compacted
    assert store.read_merged().sort_by("key").equals(oracle)
    written = {entry.path for entry in store.all_files()} - before
    assert written and all("high" in file_schema(store.objects, path).names for path in written)
    store.verify()
    assert StateStore.open(store_url, store_options).read_merged().sort_by("key").equals(oracle)


# --- what is refused, and what writes nothing -----------------------------------------------------------


def general_store(store_url: str, store_options: dict[str, str] | None) -> StateStore:
    """Keys ``ticker-<i>``: key (string), volume (int64), notional (float64), venue (string)."""
    a = PartitionFunction(2, key_type="str", slot_bits=BITS)
    return new_store(store_url, a, state_table(100, "str"), slot_groups=4, options=store_options)


def mergeable_store(store_url: str, store_options: dict[str, str] | None) -> StateStore:
    store = create(
        store_url,
        PartitionFunction(2, key_type="str", slot_bits=BITS),
        MERGEABLE_SCHEMA,
        MERGE,
        store_options,
    )
    commit_rows(store, {0: [{"key": "a", "volume": 1, "low": 1.0}]}, "base")
    return store


def replaced(schema: pa.Schema, name: str, field: pa.Field) -> pa.Schema:
    return schema.set(schema.get_field_index(name), field)


NULLABLE = pa.field("extra", pa.int64())
Change = Callable[[pa.Schema], Any]
REFUSED: list[tuple[str, Change, Mapping[str, str] | None, str, str]] = [
    (
        "remove a column",
        lambda s: s.remove(s.get_field_index("venue")),
        None,
        "schema",
        "keep column 'venue'",
    ),
    (
        "change a type",
        lambda s: replaced(s, "volume", pa.field("volume", pa.int32())),
        None,
        "schema",
        "keep column 'volume' as int64, got int32",
    ),
    (
        "make a column not null",
        lambda s: replaced(s, "volume", pa.field("volume", pa.int64(), nullable=False)),
        None,
        "schema",
        "'volume' as int64, got int64 not null",
    ),
    (
        "add a column that is not nullable",
        lambda s: s.append(pa.field("extra", pa.int64(), nullable=False)),
        None,
        "schema",
        "new column 'extra' must be nullable",
    ),
    (
        "rename the key",
        lambda s: replaced(s, "key", pa.field("symbol", pa.string())),
        None,
        "schema",
        "keep the key column 'key'",
    ),
    (
        "change the key's type",
        lambda s: replaced(s, "key", pa.field("key", pa.large_string())),
        None,
        "schema",
        "the key column 'key' as string, got large_string",
    ),
    (
        "move a column",
        lambda s: pa.schema([s.field(0), s.field(1), s.field(3), s.field(2)]),
        None,
        "schema",
        "keep column 'notional' at position 2",
    ),
    (
        "insert a column before the store's",
        lambda s: s.insert(1, NULLABLE),
        None,
        "schema",
        "keep column 'volume' at position 1",
    ),
    ("add a reserved column", lambda s: s.append(pa.field("_slot", pa.int32())), None, "schema", "'_slot'"),
    (
        "add a column of another kind",
        lambda s: s.append(pa.field("tags", pa.list_(pa.string()))),
        None,
        "schema",
        "column 'tags' has type list<item: string>",
    ),
    (
        "add a column twice",
        lambda s: s.append(pa.field("venue", pa.string())),
        None,
        "schema",
        r"distinct, got \['key', 'volume', 'notional', 'venue', 'venue'\]",
    ),
    (
        "give a general store a merge",
        lambda s: s.append(NULLABLE),
        {"extra": "sum"},
        "merge",
        "must be None: the store is not mergeable",
    ),
    ("not a schema", lambda s: "key: string", None, "schema", "must be a pyarrow.Schema, got str"),
]
REFUSED_MERGES: list[tuple[str, Change, Mapping[str, str] | None, str, str]] = [
    (
        "no merge for a new column",
        lambda s: s.append(pa.field("high", pa.float64())),
        None,
        "merge",
        "new column 'high'",
    ),
    (
        "a merge that misses a new column",
        lambda s: with_columns(s, *NEW_COLUMNS),
        {"high": "max"},
        "merge",
        "new column 'trades'",
    ),
    (
        "a merge that changes an operation",
        lambda s: s.append(pa.field("high", pa.float64())),
        {"high": "max", "low": "max"},
        "merge",
        "keep column 'low''s operation 'min', got 'max'",
    ),
    (
        "a merge of a column the schema lacks",
        lambda s: s.append(pa.field("high", pa.float64())),
        {"high": "max", "other": "sum"},
        "merge",
        "'other' is not one",
    ),
    (
        "a merge of the key",
        lambda s: s.append(pa.field("high", pa.float64())),
        {"high": "max", "key": "max"},
        "merge",
        "'key' is not one",
    ),
    (
        "an unknown operation",
        lambda s: s.append(pa.field("high", pa.float64())),
        {"high": "avg"},
        "merge",
        "'high': 'avg'",
    ),
]


@pytest.mark.parametrize(
    ("build", "change", "merge", "field", "message"),
    [(general_store, *case[1:]) for case in REFUSED]
    + [(mergeable_store, *case[1:]) for case in REFUSED_MERGES],
    ids=[case[0] for case in REFUSED + REFUSED_MERGES],
)
def test_any_other_change_is_refused_and_writes_nothing(
    store_url: str,
    store_options: dict[str, str] | None,
    build: Callable[[str, dict[str, str] | None], StateStore],
    change: Change,
    merge: Mapping[str, str] | None,
    field: str,
    message: str,
) -> None:
    """Each change but appending nullable columns is InvalidInput naming the argument and the column,
    with nothing written: the same objects (no new ``_log/`` object), the same generation."""
    store = build(store_url, store_options)
    schema, generation, objects = store.schema, store.generation, object_listing(store)
    with pytest.raises(InvalidInput, match=message) as error:
        store.evolve(change(store.schema), merge)
    assert error.value.field == field
    assert object_listing(store) == objects  # no new _log/ object, nothing else either
    reopened = StateStore.open(store_url, store_options)
    assert store.generation == reopened.generation == generation
    assert reopened.schema.equals(schema) and reopened.layout.added == ()


def test_the_stores_own_schema_writes_nothing(store_url: str, store_options: dict[str, str] | None) -> None:
    """The same schema (a mergeable store's merge repeated, or none given) returns the store as it is."""
    store = mergeable_store(store_url, store_options)
    objects, layout = object_listing(store), store.layout
    assert store.evolve(MERGEABLE_SCHEMA) is store
    assert store.evolve(MERGEABLE_SCHEMA, {"volume": "sum"}) is store
    assert store.layout == layout and store.generation == 1
    assert object_listing(store) == objects


def test_an_evolution_is_recorded_in_the_log_and_its_checkpoints(tmp_path: Path) -> None:
    """The evolve commit sets the whole metadata, with the added columns; a store that never evolved
    writes no ``added`` field; a checkpoint carries it."""
    store = general_store(str(tmp_path / "s"), None)
    assert all("added" not in json.loads(text).get("metadata", {}) for text in log_documents(store).values())
    store.evolve(with_columns(store.schema, pa.field("extra", pa.int64()), pa.field("label", pa.string())))
    document = json.loads(store.objects.read(f"_log/{store.generation:020d}.json"))
    assert document["operation"] == "evolve" and document["parent"] == 1
    assert document["metadata"]["added"] == ["extra", "label"]
    assert "add" not in document and "remove" not in document
    newest = Log(store.objects).newest()
    assert Generation.from_checkpoint(newest.to_checkpoint(), "checkpoint").layout == store.layout
    store.evolve(with_columns(store.schema, pa.field("more", pa.bool_())))
    assert StateStore.open(store.url).layout.added == ("extra", "label", "more")


# --- conflicts ------------------------------------------------------------------------------------------


def test_a_batch_prepared_before_an_evolution_conflicts(
    store_url: str, store_options: dict[str, str] | None
) -> None:
    """A job wrote its files in the old schema; the store evolved before it committed: its commit is a
    Conflict (an evolution changes the layout) and commits nothing; reopened, it writes the new column."""
    store = general_store(store_url, store_options)
    job = StateStore.open(store_url, store_options)
    files = job.write(0, state_table(5, "str"))
    store.evolve(with_columns(store.schema, NULLABLE))
    documents = log_documents(store)
    with pytest.raises(Conflict, match="through an evolve commit"):
        job.commit({0: files}, version=1, function_digest=job.function_digest, n_channels=2)
    assert log_documents(store) == documents
    job = StateStore.open(store_url, store_options)
    rows = state_table(5, "str").append_column("extra", pa.array(range(5), pa.int64()))
    job.commit({0: job.write(0, rows)}, version=1, function_digest=job.function_digest, n_channels=2)
    assert job.read_keys(0, rows["key"]).sort_by("key").equals(rows.sort_by("key"))


def test_an_evolution_that_a_commit_overtakes_conflicts(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Another writer commits a batch while the evolution is prepared: the evolution is a Conflict and
    commits nothing; run again, it goes through on top of the batch."""
    store = general_store(str(tmp_path / "s"), None)
    job = StateStore.open(store.url)
    original = Layout.evolved

    def racing(self: Layout, *args: Any) -> Layout:
        layout = original(self, *args)
        if job.generation == 1:
            job.commit(
                {1: job.write(1, state_table(3, "str"))},
                version=1,
                function_digest=job.function_digest,
                n_channels=2,
            )
        return layout

    monkeypatch.setattr(Layout, "evolved", racing)
    schema = with_columns(store.schema, NULLABLE)
    with pytest.raises(Conflict, match="moved on to generation 2 through a write commit"):
        store.evolve(schema)
    reopened = StateStore.open(store.url)
    assert reopened.generation == 2 and reopened.layout.added == ()
    store.evolve(schema)
    assert store.generation == 3 and StateStore.open(store.url).layout.added == ("extra",)


# --- damage ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize("evolved", [False, True], ids=["never evolved", "evolved"])
def test_a_file_lacking_a_column_the_store_always_had_is_corrupt(
    store_url: str, store_options: dict[str, str] | None, evolved: bool
) -> None:
    """A listed file replaced by one without ``venue``, a column of the store's creation: every reader
    refuses it as Corrupt naming the file, whether or not the store gained other columns since."""
    store = general_store(store_url, store_options)
    if evolved:
        store.evolve(with_columns(store.schema, NULLABLE))
    commit_rows(store, {0: [{"key": "ticker-1", "volume": 1, DELETED_COLUMN: False}]})  # channel 0 is due
    narrow = state_table(20, "str").drop_columns(["venue"])
    layout = checked_layout("key", "str", BITS, 4, narrow.schema)
    [other] = write_channel_files(store.objects, 0, narrow, layout, kind="delta")
    entry = store.files(0)[0]
    store.objects.write(entry.path, store.objects.read(other.path))
    readers: list[Callable[[], Any]] = [
        lambda: store.read_channel(0),
        lambda: store.read_channel(0, ["key"]),
        lambda: store.read_keys(0, pa.array(["ticker-1"])),
        store.verify,
        lambda: store.compact(EVERY_DELTA),
    ]
    for reader in readers:
        with pytest.raises(Corrupt, match="does not have the store's schema") as error:
            reader()
        assert error.value.path == entry.path


def test_a_null_in_an_added_column_does_not_change_a_rows_hash() -> None:
    """The row hash of a row read from a file without the added column equals that of the same row
    written with a null there (so entries stay true); a value there, or a null in a column the store
    was created with, changes it."""
    table = state_table(50, "str")
    old = checked_layout("key", "str", BITS, 4, table.schema)
    new = old.evolved(with_columns(table.schema, NULLABLE))
    rows = table.append_column(SLOT_COLUMN, pa.array([0] * 50, pa.int32()))
    _, before = old.hashes(rows)
    _, lacking = new.hashes(new.normalized(rows))
    assert new.normalized(rows).column("extra").null_count == 50
    assert (before == lacking).all()
    valued = rows.append_column("extra", pa.array([None, 1] * 25, pa.int64()))
    _, after = new.hashes(new.normalized(valued))
    assert (after[::2] == before[::2]).all() and (after[1::2] != before[1::2]).all()
    created = checked_layout("key", "str", BITS, 4, with_columns(table.schema, NULLABLE))
    _, folded = created.hashes(created.normalized(valued))
    assert (folded[::2] != before[::2]).all()
