"""Deltas: what batches write over a channel's base files, resolved by readers (``repart.state.resolve``).

Every test writes through the store's own interface (``write`` and ``commit``, ``compact``, ``apply``)
and checks what it reads against an oracle written out here from the operations alone:

- a general store replays its batches into a plain dict: an upsert sets a key's row, a deletion (a
  tombstone) removes the key; the store must read exactly that, each key on its function's channel;
- a mergeable store (sum, count, min and max columns) must read, per channel, a pyarrow group_by over
  every input row routed there (counts as row counts), however the rows were split into batches;
- a migration or a compaction must leave the resolved state exactly as it was, the newest row of each
  key winning on its new channel; a consolidation merges each split key's partials off its candidates
  into its home (in a general store each channel's newest live row, tombstones and older rows left
  out), merged here in plain Python.

Hypothesis runs on a local directory; the two hand-built tests run on the S3 endpoint too.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from repart.migration import plan_migration
from repart.partitioning import PartitionFunction
from repart.partitioning.domain import Key, KeyType
from repart.partitioning.hashing import hash_keys, slots_of_hashes
from repart.partitioning.split.function import SplitEntry, SplitFunction
from repart.protocol.merge import MergeSpec
from repart.state.compact import CompactionPolicy
from repart.state.files import DELETED_COLUMN, FileKindName, read_entry
from repart.state.store import StateStore
from tests.factories import REGION, SMALL_SLOT_BITS

BITS = SMALL_SLOT_BITS
UNIVERSE = 24
KEYS: dict[KeyType, list[Key]] = {
    "str": [f"k{i}" for i in range(UNIVERSE)],
    "int": [i * 7919 - 50_000 for i in range(UNIVERSE)],
}
#: Every channel with a delta is due: compaction folds every delta.
EVERY_DELTA = CompactionPolicy(max_delta_share=0.0)
Row = dict[str, Any]
#: One batch of a general store: each key it touches with (deleted, row); a tombstone's row is noise.
Batch = dict[Key, tuple[bool, Row]]
Function = PartitionFunction | SplitFunction


def examples(count: int) -> settings:
    """Hypothesis settings: ``count`` examples, no deadline (stores write files)."""
    return settings(
        max_examples=count, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
    )


def general_schema(key_type: KeyType) -> pa.Schema:
    return pa.schema(
        [
            ("key", pa.string() if key_type == "str" else pa.int64()),
            ("volume", pa.int64()),
            ("price", pa.float64()),
            ("venue", pa.string()),
        ]
    )


def create(
    location: str | Path,
    function: Function,
    schema: pa.Schema,
    *,
    merge: Mapping[str, str] | None = None,
    options: Mapping[str, str] | None = None,
) -> StateStore:
    """An empty store of region ``REGION`` at version 1 laid out by ``function`` (4 slot groups)."""
    return StateStore.create(
        location,
        region=REGION,
        version=1,
        function_digest=function.digest,
        n_channels=function.n_channels,
        slot_bits=BITS,
        key_type="str" if pa.types.is_string(schema.field("key").type) else "int",
        key_col="key",
        schema=schema,
        slot_groups=4,
        merge=merge,
        options=options,
    )


def commit(
    store: StateStore, function: Function, version: int, rows: Mapping[int, Sequence[Row]], kind: FileKindName
) -> None:
    """Write each channel's ``rows`` (a general store's with ``_deleted``) as one commit."""
    schema = (
        store.schema if store.merge is not None else store.schema.append(pa.field(DELETED_COLUMN, pa.bool_()))
    )
    added = {
        channel: store.write(channel, pa.Table.from_pylist(list(routed), schema=schema), kind=kind)
        for channel, routed in rows.items()
    }
    store.commit(added, version=version, function_digest=function.digest, n_channels=function.n_channels)


def write_batch(
    store: StateStore, function: PartitionFunction, version: int, batch: Batch, kind: FileKindName = "delta"
) -> None:
    """One batch of a general store: each key's row (or tombstone) on ``function``'s channel."""
    routed: dict[int, list[Row]] = {}
    for key, (deleted, row) in batch.items():
        routed.setdefault(function.lookup(key), []).append({"key": key, **row, DELETED_COLUMN: deleted})
    commit(store, function, version, routed, kind)


def replayed(state: Mapping[Key, Row], batch: Batch) -> dict[Key, Row]:
    """The oracle: ``state`` after ``batch``, as a plain dict."""
    after = dict(state)
    for key, (deleted, row) in batch.items():
        if deleted:
            after.pop(key, None)
        else:
            after[key] = dict(row)
    return after


def by_key(table: pa.Table) -> dict[Key, Row]:
    """The rows of ``table`` by key; asserts one row per key."""
    rows = table.to_pylist()
    found = {row.pop("key"): row for row in rows}
    assert len(found) == len(rows), "two rows of one key"
    return found


def check_general(store: StateStore, function: PartitionFunction, state: Mapping[Key, Row]) -> None:
    """``store`` reads exactly ``state``, every key on ``function``'s channel (``read`` is
    ``read_channel`` of every channel, with the channel)."""
    expected = {key: {**row, "channel": function.lookup(key)} for key, row in state.items()}
    assert by_key(store.read()) == expected


def check_keys(
    store: StateStore, function: PartitionFunction, state: Mapping[Key, Row], keys: Sequence[Key]
) -> None:
    """``read_keys`` of each channel returns the oracle's rows of those of ``keys`` that it holds."""
    key_type = store.schema.field("key").type
    for channel in range(function.n_channels):
        got = by_key(store.read_keys(channel, pa.array(list(keys), key_type)))
        assert got == {key: state[key] for key in keys if key in state and function.lookup(key) == channel}


def compacted(store: StateStore) -> None:
    """Compact every channel with deltas; then no delta is left, and no tombstone or stale row."""
    had_deltas = any(entry.kind == "delta" for entry in store.all_files())
    result = store.compact(EVERY_DELTA)
    assert result.compacted or not had_deltas  # (a channel with filters alone may be due too)
    assert all(entry.kind == "base" for entry in store.all_files())
    store.verify()


# --- general stores: newest wins, tombstones delete -----------------------------------------------------

rows_of = st.fixed_dictionaries(
    {
        "volume": st.one_of(st.none(), st.integers(-(2**63), 2**63 - 1)),
        "price": st.one_of(st.none(), st.floats(allow_nan=False)),
        "venue": st.one_of(st.none(), st.text(max_size=3)),
    }
)
operations = st.tuples(st.booleans(), rows_of)


def batches_of(key_type: KeyType, max_keys: int = 10) -> st.SearchStrategy[Batch]:
    return st.dictionaries(st.sampled_from(KEYS[key_type]), operations, max_size=max_keys)


@examples(20)
@given(
    key_type=st.sampled_from(["str", "int"]),
    n=st.integers(1, 4),
    data=st.data(),
)
def test_a_general_store_reads_the_replay_of_its_batches(
    tmp_path_factory: pytest.TempPathFactory, key_type: KeyType, n: int, data: st.DataObject
) -> None:
    """A base, then batches of upserts and tombstones (some compacted in between): after every commit
    the store reads the dict replay of the same operations; ``read_keys`` the replay restricted to the
    keys; a final compaction leaves the same state in base files alone."""
    function = PartitionFunction(n, key_type=key_type, slot_bits=BITS)
    store = create(tmp_path_factory.mktemp("s") / "store", function, general_schema(key_type))
    base = data.draw(st.dictionaries(st.sampled_from(KEYS[key_type]), rows_of, max_size=16), "base")
    state: dict[Key, Row] = {}
    if base:
        write_batch(store, function, 1, {key: (False, row) for key, row in base.items()}, kind="base")
        state = dict(base)
    check_general(store, function, state)
    for index in range(data.draw(st.integers(1, 5), "batches")):
        batch = data.draw(batches_of(key_type), f"batch {index}")
        write_batch(store, function, 1, batch)
        state = replayed(state, batch)
        check_general(store, function, state)
        if data.draw(st.booleans(), f"compact after batch {index}"):
            compacted(store)
            check_general(store, function, state)
    probe = data.draw(st.lists(st.sampled_from(KEYS[key_type]), max_size=8, unique=True), "probe")
    check_keys(store, function, state, probe)
    compacted(store)
    check_general(store, function, state)
    check_keys(store, function, state, probe)
    assert store.rows() == len(state)  # one row per live key: tombstones and older rows folded away
    check_general(StateStore.open(store.url), function, state)


def test_a_deleted_key_written_again_comes_back(store_url: str, store_options: dict[str, str] | None) -> None:
    """Base k0..k9; batch 1 updates k1, deletes k2 and k3, adds k10; batch 2 writes k2 again, updates k1
    again, deletes k10; batch 3 deletes k4 and k99 (never written). Expected state written out by hand;
    after compaction a batch still wins over the folded rows."""
    function = PartitionFunction(3, key_type="str", slot_bits=BITS)
    store = create(store_url, function, general_schema("str"), options=store_options)

    def row(volume: int) -> Row:
        return {"volume": volume, "price": volume / 4, "venue": f"v{volume}"}

    write_batch(store, function, 1, {f"k{i}": (False, row(i)) for i in range(10)}, kind="base")
    write_batch(store, function, 1, {"k1": (False, row(11)), "k2": (True, row(0)), "k3": (True, row(0))})
    write_batch(store, function, 1, {"k10": (False, row(10))})
    write_batch(store, function, 1, {"k2": (False, row(22)), "k1": (False, row(111)), "k10": (True, row(10))})
    write_batch(store, function, 1, {"k4": (True, row(4)), "k99": (True, row(99))})
    expected: dict[Key, Row] = {
        "k0": row(0),
        "k1": row(111),
        "k2": row(22),
        "k5": row(5),
        "k6": row(6),
        "k7": row(7),
        "k8": row(8),
        "k9": row(9),
    }
    assert any(entry.kind == "delta" for entry in store.all_files())
    check_general(store, function, expected)
    for channel in range(function.n_channels):
        assert by_key(store.read_channel(channel)) == {
            key: row for key, row in expected.items() if function.lookup(key) == channel
        }
    check_keys(store, function, expected, ["k1", "k2", "k3", "k4", "k10", "k99"])
    compacted(store)
    assert store.rows() == len(expected)
    check_general(store, function, expected)
    write_batch(store, function, 1, {"k1": (False, row(1111)), "k2": (True, row(2)), "k3": (False, row(3))})
    expected = {**expected, "k1": row(1111), "k3": row(3)}
    del expected["k2"]
    check_general(StateStore.open(store.url, store_options), function, expected)
    check_keys(store, function, expected, ["k1", "k2", "k3"])


# --- mergeable stores: partials merge -------------------------------------------------------------------

MERGE = {"total": "sum", "n": "count", "low": "min", "high": "max"}


def mergeable_schema(key_type: KeyType) -> pa.Schema:
    return pa.schema(
        [
            ("key", pa.string() if key_type == "str" else pa.int64()),
            ("total", pa.int64()),
            ("n", pa.int64()),
            ("low", pa.float64()),
            ("high", pa.float64()),
        ]
    )


def grouped(inputs: pa.Table, key_type: KeyType) -> pa.Table:
    """One row per key of input rows (key, x, price): x's sum, the row count, price's min and max."""
    table = inputs.group_by("key", use_threads=False).aggregate(
        [("x", "sum"), ("x", "count"), ("price", "min"), ("price", "max")]
    )
    columns = [table["key"], table["x_sum"], table["x_count"], table["price_min"], table["price_max"]]
    return pa.Table.from_arrays(columns, schema=mergeable_schema(key_type))


def input_rows(key_type: KeyType) -> st.SearchStrategy[list[Row]]:
    """Input rows: a key, x (never null: the count counts rows) and a price (sometimes null)."""
    return st.lists(
        st.fixed_dictionaries(
            {
                "key": st.sampled_from(KEYS[key_type]),
                "x": st.integers(-(10**12), 10**12),
                "price": st.one_of(st.none(), st.floats(allow_nan=False)),
            }
        ),
        max_size=30,
    )


@examples(20)
@given(key_type=st.sampled_from(["str", "int"]), n=st.integers(1, 4), data=st.data())
def test_a_mergeable_store_reads_the_group_by_of_every_input_row(
    tmp_path_factory: pytest.TempPathFactory, key_type: KeyType, n: int, data: st.DataObject
) -> None:
    """Each batch writes, per channel, the partials of its input rows routed there (the first batch as
    base files, maybe); each channel reads the group_by of all its input rows, before and after
    compaction, and ``read_keys`` and ``read_merged`` agree."""
    function = PartitionFunction(n, key_type=key_type, slot_bits=BITS)
    schema = mergeable_schema(key_type)
    store = create(tmp_path_factory.mktemp("s") / "store", function, schema, merge=MERGE)
    input_schema = pa.schema([schema.field("key"), ("x", pa.int64()), ("price", pa.float64())])
    everything = pa.Table.from_pylist([], schema=input_schema)
    for index in range(data.draw(st.integers(1, 5), "batches")):
        batch = pa.Table.from_pylist(data.draw(input_rows(key_type), f"batch {index}"), schema=input_schema)
        channels = np.array([function.lookup(key) for key in batch["key"].to_pylist()], dtype=np.int64)
        partials = {
            channel: grouped(batch.filter(pa.array(channels == channel)), key_type).to_pylist()
            for channel in np.unique(channels).tolist()
        }
        kind: FileKindName = "base" if index == 0 and data.draw(st.booleans(), "first as base") else "delta"
        commit(store, function, 1, partials, kind)
        everything = pa.concat_tables([everything, batch])
        if data.draw(st.booleans(), f"compact after batch {index}"):
            compacted(store)
    channels = np.array([function.lookup(key) for key in everything["key"].to_pylist()], dtype=np.int64)
    probe = data.draw(st.lists(st.sampled_from(KEYS[key_type]), max_size=8, unique=True), "probe")
    for compact in (False, True):
        if compact:
            compacted(store)
        for channel in range(n):
            expected = by_key(grouped(everything.filter(pa.array(channels == channel)), key_type))
            assert by_key(store.read_channel(channel)) == expected
            got = by_key(store.read_keys(channel, pa.array(probe, schema.field("key").type)))
            assert got == {key: row for key, row in expected.items() if key in probe}
        assert by_key(store.read_merged()) == by_key(grouped(everything, key_type))
    assert store.rows() == len(set(everything["key"].to_pylist()))


# --- migrations of stores holding deltas ----------------------------------------------------------------


def slots_of(keys: Sequence[Key], key_type: KeyType) -> list[int]:
    return [int(slot) for slot in slots_of_hashes(hash_keys(list(keys), key_type), BITS)]


@st.composite
def functions(draw: st.DrawFn, key_type: KeyType, like: PartitionFunction | None = None) -> PartitionFunction:
    """A function of 1 to 5 channels with explicit keys and overrides of the universe's slots; one like
    ``like`` keeps some of its explicit keys (pinned where their channel stays)."""
    n = draw(st.integers(1, 5))
    explicit: dict[Key, int] = {}
    if like is not None:
        kept = draw(st.sets(st.sampled_from(sorted(like.explicit, key=str)))) if like.explicit else set()
        explicit = {key: channel for key, channel in like.explicit.items() if key in kept and channel < n}
    explicit.update(draw(st.dictionaries(st.sampled_from(KEYS[key_type]), st.integers(0, n - 1), max_size=6)))
    overrides = draw(
        st.dictionaries(
            st.sampled_from(slots_of(KEYS[key_type], key_type)), st.integers(0, n - 1), max_size=8
        )
    )
    return PartitionFunction(
        n, key_type=key_type, slot_bits=BITS, explicit=explicit, slot_overrides=overrides
    )


@examples(20)
@given(key_type=st.sampled_from(["str", "int"]), data=st.data())
def test_migrations_of_stores_with_deltas_keep_the_resolved_state(
    tmp_path_factory: pytest.TempPathFactory, key_type: KeyType, data: st.DataObject
) -> None:
    """a → b → c with batches (and maybe compactions) under each: after each plan the store reads the
    replay of every batch, each key on the new function's channel, the newest row winning."""
    a = data.draw(functions(key_type), "a")
    store = create(tmp_path_factory.mktemp("s") / "store", a, general_schema(key_type))
    base = data.draw(st.dictionaries(st.sampled_from(KEYS[key_type]), rows_of, max_size=16), "base")
    state: dict[Key, Row] = {}
    if base:
        write_batch(store, a, 1, {key: (False, row) for key, row in base.items()}, kind="base")
        state = dict(base)
    function = a
    for version in (1, 2, 3):
        if version > 1:
            target = data.draw(
                st.one_of(functions(key_type, like=function), st.just(a)), f"function {version}"
            )
            result = store.apply(
                plan_migration(function, target),
                plan_id=version - 1,
                region=REGION,
                from_version=version - 1,
                to_version=version,
            )
            assert not result.already_applied
            function = target
            check_general(store, function, state)
            store.verify()
        for index in range(data.draw(st.integers(0, 3), f"batches of version {version}")):
            batch = data.draw(batches_of(key_type, 8), f"batch {index} of version {version}")
            write_batch(store, function, version, batch)
            state = replayed(state, batch)
        if data.draw(st.booleans(), f"compact in version {version}"):
            compacted(store)
        check_general(store, function, state)
    compacted(store)
    check_general(store, function, state)
    assert store.rows() == len(state)


def file_rows(store: StateStore, channel: int, key: Key) -> list[tuple[int, str, bool, int]]:
    """Every row of ``key`` that ``channel``'s entries let through: (seq, kind, deleted, volume), sorted
    (deleted is False in a mergeable store)."""
    columns = ["key", "volume"] if store.layout.mergeable else ["key", "volume", DELETED_COLUMN]
    found = []
    for entry in store.files(channel):
        for row in read_entry(store.objects, entry, store.layout, columns).to_pylist():
            if row["key"] == key:
                found.append((entry.seq, entry.kind, row.get(DELETED_COLUMN, False), row["volume"]))
    return sorted(found)


def test_a_migration_moves_base_and_deltas_of_a_key_together(
    store_url: str, store_options: dict[str, str] | None
) -> None:
    """Explicit moves restage a key's rows keeping their seq and kind, so the delta that updated it after
    the base still wins on its new channel, and a key deleted by a tombstone stays deleted; a pinned key
    stays with its rows; a scale-out moves slots (relisting files) with their deltas."""
    keys = [f"k{i}" for i in range(40)]
    a = PartitionFunction(4, key_type="str", slot_bits=BITS, explicit={"k1": 0, "k2": 0, "k3": 0})
    b = PartitionFunction(5, key_type="str", slot_bits=BITS, explicit={"k1": 2, "k2": 3, "k3": 0})
    plan = plan_migration(a, b)
    assert {(move.key, move.source, move.target) for move in plan.explicit_moves} == {
        ("k1", 0, 2),
        ("k2", 0, 3),
    }
    assert "k3" in plan.pinned_keys and len(plan.slot_moves)
    store = create(store_url, a, general_schema("str"), options=store_options)

    def row(volume: int) -> Row:
        return {"volume": volume, "price": None, "venue": None}

    base: Batch = {key: (False, row(i)) for i, key in enumerate(keys)}
    updates: Batch = {key: (False, row(1000 + i)) for i, key in enumerate(keys) if i % 3 == 1}
    updates.update({"k2": (True, row(0)), "k3": (False, row(1003))})  # k1 is updated (1 % 3 == 1)
    deletions: Batch = {key: (True, row(0)) for i, key in enumerate(keys) if i % 7 == 5}
    state: dict[Key, Row] = {}
    steps: list[tuple[Batch, FileKindName]] = [(base, "base"), (updates, "delta"), (deletions, "delta")]
    for batch, kind in steps:
        write_batch(store, a, 1, batch, kind)
        state = replayed(state, batch)
    assert state["k1"] == row(1001) and "k2" not in state
    for batch in (updates, deletions):  # some keys of each delta move with their slot
        assert any(a.lookup(key) != b.lookup(key) for key in batch if key not in a.explicit)
    moved = {key: file_rows(store, 0, key) for key in ("k1", "k2", "k3")}
    assert [seq for seq, *_ in moved["k1"]] == [1, 2] and moved["k2"][1][2]  # base, then the delta
    store.apply(plan, plan_id=1, region=REGION, from_version=1, to_version=2)
    check_general(store, b, state)
    assert file_rows(store, 2, "k1") == moved["k1"] and file_rows(store, 0, "k1") == []
    assert file_rows(store, 3, "k2") == moved["k2"] and file_rows(store, 0, "k2") == []
    assert file_rows(store, 0, "k3") == moved["k3"]
    store.verify()
    check_general(StateStore.open(store.url, store_options), b, state)


# --- consolidations of stores with deltas ---------------------------------------------------------------

SPLIT_MERGE = MergeSpec.parse("volume=sum,low=min,high=max")
SPLIT_SCHEMA = pa.schema(
    [("key", pa.string()), ("volume", pa.int64()), ("low", pa.float64()), ("high", pa.float64())]
)
HOT = ["h0", "h1", "h2"]
COLD = [f"c{i}" for i in range(8)]


def split_over(home: PartitionFunction, split: Mapping[Key, tuple[int, ...]]) -> SplitFunction:
    return SplitFunction(
        home,
        {key: SplitEntry(chosen, tuple([1 / len(chosen)] * len(chosen))) for key, chosen in split.items()},
    )


def split_a() -> SplitFunction:
    """h0 split over 0, 1, 2; h1 over 1, 3; h2 over 2, 3, 0 (their homes pinned), on 4 channels."""
    home = PartitionFunction(4, key_type="str", slot_bits=BITS, explicit={"h0": 0, "h1": 1, "h2": 2})
    return split_over(home, {"h0": (0, 1, 2), "h1": (1, 3), "h2": (2, 3, 0)})


def split_b(variant: str) -> SplitFunction:
    """``a`` changed: h0 leaves the head for channel 3; or candidates shrink (h0 loses 2, h1 goes home
    to 3, h2 loses 3); or a scale-in to 3 channels (h1 goes home to 1, h2 loses 3); or h0's home moves
    to 1 (its partial on 2 merges there) and the cold keys' slots move."""
    if variant == "leave":
        home = PartitionFunction(4, key_type="str", slot_bits=BITS, explicit={"h0": 3, "h1": 1, "h2": 2})
        return split_over(home, {"h1": (1, 3), "h2": (2, 3, 0)})
    if variant == "shrink":
        home = PartitionFunction(4, key_type="str", slot_bits=BITS, explicit={"h0": 0, "h1": 3, "h2": 2})
        return split_over(home, {"h0": (0, 1), "h2": (2, 0)})
    if variant == "scale-in":
        home = PartitionFunction(3, key_type="str", slot_bits=BITS, explicit={"h0": 0, "h1": 1, "h2": 2})
        return split_over(home, {"h0": (0, 1, 2), "h2": (2, 0)})
    overrides = {slot: (slot + 1) % 4 for slot in slots_of(COLD, "str")}
    home = PartitionFunction(
        4, key_type="str", slot_bits=BITS, explicit={"h0": 1, "h1": 1, "h2": 2}, slot_overrides=overrides
    )
    return split_over(home, {"h0": (1, 0), "h1": (1, 3), "h2": (2, 3, 0)})


def candidates_of(function: SplitFunction, key: Key) -> tuple[int, ...]:
    """The channels ``function`` routes ``key`` to, its home first: written out here."""
    entry = function.split.get(key)
    return entry.candidates if entry is not None else (function.home.lookup(key),)


def merged_row(rows: Sequence[Row]) -> Row:
    """The merge of partial rows in plain Python: volumes summed, the lowest low, the highest high."""
    lows = [row["low"] for row in rows if row["low"] is not None]
    highs = [row["high"] for row in rows if row["high"] is not None]
    return {
        "volume": sum(row["volume"] for row in rows),
        "low": min(lows, default=None),
        "high": max(highs, default=None),
    }


def partials_of(store: StateStore) -> dict[tuple[Key, int], Row]:
    """(key, channel) → the partial row the store reads; asserts one row per key on each channel."""
    rows = store.read().to_pylist()
    found = {(row.pop("key"), row.pop("channel")): row for row in rows}
    assert len(found) == len(rows), "a channel holds two rows of one key"
    return found


def merged_state(partials: Mapping[tuple[Key, int], Row]) -> dict[Key, Row]:
    by_key: dict[Key, list[Row]] = {}
    for (key, _), row in sorted(partials.items()):
        by_key.setdefault(key, []).append(row)
    return {key: merged_row(rows) for key, rows in by_key.items()}


def consolidated(
    a: SplitFunction, b: SplitFunction, partials: Mapping[tuple[Key, int], Row]
) -> dict[tuple[Key, int], Row]:
    """Where the live partials are after the plan a → b: a partial on one of the key's candidates in
    ``b`` stays as it is; those off them merge with the partial on its home in ``b`` (if any) there."""
    held: dict[Key, dict[int, Row]] = {}
    for (key, channel), row in partials.items():
        held.setdefault(key, {})[channel] = row
    split = set(a.split) | set(b.split)
    after: dict[tuple[Key, int], Row] = {}
    for key, rows in held.items():
        chosen = candidates_of(b, key)
        if key not in split:
            assert len(rows) == 1
            after[key, chosen[0]] = next(iter(rows.values()))
            continue
        off = [row for channel, row in sorted(rows.items()) if channel not in chosen]
        after.update({(key, channel): row for channel, row in rows.items() if channel in chosen})
        if off:
            pool = off + ([rows[chosen[0]]] if chosen[0] in rows else [])
            after[key, chosen[0]] = merged_row(pool)
    return after


split_rows = st.fixed_dictionaries(
    {
        "volume": st.integers(-(10**9), 10**9),
        "low": st.one_of(st.none(), st.floats(-1e6, 1e6)),
        "high": st.one_of(st.none(), st.floats(-1e6, 1e6)),
    }
)
#: A partial written to (key, the candidate of that index in ``a``), or a tombstone of it.
split_batches = st.dictionaries(
    st.tuples(st.sampled_from(HOT + COLD), st.integers(0, 2)),
    st.tuples(st.booleans(), split_rows),
    max_size=10,
)


@examples(30)
@given(
    variant=st.sampled_from(["leave", "shrink", "scale-in", "home"]),
    mergeable=st.booleans(),
    base=st.dictionaries(st.tuples(st.sampled_from(HOT + COLD), st.integers(0, 2)), split_rows, max_size=16),
    batches=st.lists(split_batches, max_size=4),
)
def test_consolidation_merges_the_newest_live_partials(
    tmp_path_factory: pytest.TempPathFactory,
    variant: str,
    mergeable: bool,
    base: dict[tuple[Key, int], Row],
    batches: list[dict[tuple[Key, int], tuple[bool, Row]]],
) -> None:
    """Split-mode partials written as base files, then batches of (key, channel) partials: in a general
    store upserts and tombstones, in a mergeable store partials that merge. A plan with consolidations
    merges each split key's live partials off its candidates into its home (by the store's own merge
    when it has one), leaves the others as they are, keeps the merged state of every key, and leaves no
    row of a consolidated key, live or not, on its consolidation sources."""
    a, b = split_a(), split_b(variant)
    plan = plan_migration(a, b)
    assert plan.consolidations
    merge = dict(SPLIT_MERGE.columns) if mergeable else None
    store = create(tmp_path_factory.mktemp("s") / "store", a, SPLIT_SCHEMA, merge=merge)
    partials: dict[tuple[Key, int], Row] = {}
    for index, batch in enumerate([{key: (False, row) for key, row in base.items()}, *batches]):
        placed = {
            (key, candidates_of(a, key)[choice % len(candidates_of(a, key))]): operation
            for (key, choice), operation in batch.items()
        }
        routed: dict[int, list[Row]] = {}
        for (key, channel), (deleted, row) in placed.items():
            if mergeable:
                routed.setdefault(channel, []).append({"key": key, **row})
                held = partials.get((key, channel))
                partials[key, channel] = row if held is None else merged_row([held, row])
                continue
            routed.setdefault(channel, []).append({"key": key, **row, DELETED_COLUMN: deleted})
            if deleted:
                partials.pop((key, channel), None)
            else:
                partials[key, channel] = row
        commit(store, a, 1, routed, "base" if index == 0 else "delta")
    assert partials_of(store) == partials
    oracle = merged_state(partials)
    assert by_key(store.read_merged(SPLIT_MERGE)) == oracle
    result = store.apply(
        plan,
        plan_id=1,
        region=REGION,
        from_version=1,
        to_version=2,
        merge=None if mergeable else SPLIT_MERGE,
    )
    assert not result.already_applied
    assert partials_of(store) == consolidated(a, b, partials)
    assert by_key(store.read_merged(SPLIT_MERGE)) == oracle
    for consolidation in plan.consolidations:
        key, source = consolidation.key, consolidation.source
        if source < b.n_channels:
            assert file_rows(store, source, key) == [], (key, source)
    store.verify()
    compacted(store)
    assert partials_of(store) == consolidated(a, b, partials)
    assert by_key(StateStore.open(store.url).read_merged(SPLIT_MERGE)) == oracle


def test_a_pool_of_deleted_partials_leaves_no_tombstone_for_a_later_plan(tmp_path: Path) -> None:
    """h0 is split over 0, 1, 2; its partial on 2 is deleted, the one on 1 live, none on 0. The plan
    to candidates 0, 1 pools 2 into 0 and finds no live partial: its rows on 2 (the row and its
    tombstone) must go, not stay on a channel outside its candidates. Else the next plan (h0 home to 1,
    a slot moved off channel 2) moves the tombstone alone to 1, where it deletes the live partial, and
    leaves the row it deleted on 2, alive again."""
    a0 = split_over(
        PartitionFunction(4, key_type="str", slot_bits=BITS, explicit={"h0": 0}), {"h0": (0, 1, 2)}
    )
    a1 = split_over(PartitionFunction(4, key_type="str", slot_bits=BITS, explicit={"h0": 0}), {"h0": (0, 1)})
    slot = next(slot for slot in range(2**BITS) if a1.home.table[slot] == 2)
    a2 = split_over(
        PartitionFunction(4, key_type="str", slot_bits=BITS, explicit={"h0": 1}, slot_overrides={slot: 3}), {}
    )
    live, deleted = {"volume": 5, "low": 1.0, "high": 2.0}, {"volume": 7, "low": 0.5, "high": 3.0}
    store = create(tmp_path / "store", a0, SPLIT_SCHEMA)
    partial = {"key": "h0", DELETED_COLUMN: False}
    commit(store, a0, 1, {1: [{**partial, **live}], 2: [{**partial, **deleted}]}, "base")
    commit(store, a0, 1, {2: [{**partial, **deleted, DELETED_COLUMN: True}]}, "delta")
    assert partials_of(store) == {("h0", 1): live}
    first, second = plan_migration(a0, a1), plan_migration(a1, a2)
    assert [(row.source, row.target) for row in first.consolidations] == [(2, 0)]
    assert [(row.source, row.target) for row in second.consolidations] == [(0, 1)]
    assert 2 in second.channels_losing_keys
    store.apply(first, plan_id=1, region=REGION, from_version=1, to_version=2, merge=SPLIT_MERGE)
    assert partials_of(store) == {("h0", 1): live}
    assert file_rows(store, 2, "h0") == [] and file_rows(store, 0, "h0") == []
    store.apply(second, plan_id=2, region=REGION, from_version=2, to_version=3, merge=SPLIT_MERGE)
    assert partials_of(store) == {("h0", 1): live}
    assert by_key(store.read_merged(SPLIT_MERGE)) == {"h0": live}
    store.verify()
