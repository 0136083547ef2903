"""The keyed state store (DESIGN §6, §9, §10), checked against independent oracles.

The oracle of ``apply`` is the target function itself: after applying ``plan_migration(a, b)`` every
row must sit on ``b.lookup(key)``, and the content (all rows, sorted) must equal the old content.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import repart.state.migrate as migrate_module
from repart.errors import Conflict, Corrupt, InvalidInput, NotFound
from repart.migration import plan_migration
from repart.partitioning import ConsistentSpec, PartitionFunction, initial_function
from repart.partitioning.domain import KeyType
from repart.partitioning.hashing import hash_keys, slots_of_hashes
from repart.state.batches import AbsorbedBatch, ChannelUpdate, absorbed_batch
from repart.state.files import read_verified
from repart.state.partial import SourceFile
from repart.state.store import FileEntry, StateStore, write_channel_files
from tests.factories import (
    REGION,
    SMALL_SLOT_BITS,
    all_files,
    check_oracle,
    new_store,
    state_table,
)


def listing(root: Path) -> dict[str, float]:
    return {
        str(path.relative_to(root)): path.stat().st_mtime for path in root.rglob("*") if path.name != ".lock"
    }


def functions(kind: str, key_type: KeyType, table: pa.Table) -> tuple[PartitionFunction, PartitionFunction]:
    keys = table.column("key").to_pylist()
    a = PartitionFunction(
        n_channels=4, key_type=key_type, slot_bits=SMALL_SLOT_BITS, explicit={keys[0]: 3, keys[1]: 0}
    )
    if kind == "grow":
        b = PartitionFunction(
            n_channels=6, key_type=key_type, slot_bits=SMALL_SLOT_BITS, explicit={keys[0]: 5, keys[2]: 1}
        )
    elif kind == "shrink":
        a, b = initial_function(6, key_type, SMALL_SLOT_BITS), initial_function(4, key_type, SMALL_SLOT_BITS)
    elif kind == "explicit-only":
        b = PartitionFunction(
            n_channels=4, key_type=key_type, slot_bits=SMALL_SLOT_BITS, explicit={keys[0]: 2, keys[3]: 1}
        )
    else:  # slot-only: overrides moving every slot of two slot groups off their channels, plus strays
        overrides = {slot: (int(a.table[slot]) + 1) % 4 for slot in [*range(0, 128), 500, 501, 777]}
        b = PartitionFunction(
            n_channels=4,
            key_type=key_type,
            slot_bits=SMALL_SLOT_BITS,
            explicit=a.explicit,
            slot_overrides=overrides,
        )
    return a, b


@pytest.mark.parametrize("key_type", ["str", "int"])
@pytest.mark.parametrize("kind", ["grow", "shrink", "explicit-only", "slot-only"])
def test_apply_moves_every_row_to_the_target_function(
    tmp_path: Path, kind: str, key_type: KeyType, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = state_table(3000, key_type)
    a, b = functions(kind, key_type, table)
    plan = plan_migration(a, b)
    store = new_store(tmp_path / "s", a, table)
    before = {channel: store.files(channel) for channel in range(a.n_channels)}
    checksum = store.checksum()
    read: list[str] = []
    original_open = SourceFile.open

    def recording_read(root: Any, entry: FileEntry, *args: Any) -> Any:
        read.append(entry.path)
        return read_verified(root, entry, *args)

    def recording_open(root: Any, entry: FileEntry, *args: Any) -> SourceFile:
        read.append(entry.path)
        return original_open(root, entry, *args)

    monkeypatch.setattr(migrate_module, "read_verified", recording_read)
    monkeypatch.setattr(SourceFile, "open", recording_open)
    result = store.apply(plan, plan_id=11, region=REGION, from_version=1, to_version=2)
    check_oracle(store, table, b)
    assert (store.version, store.function_digest, store.n_channels) == (2, b.digest, b.n_channels)
    assert store.checksum() == checksum and store.applied_plans == (11,)
    old_channels = a.lookup_many(table.column("key").to_pylist())
    new_channels = b.lookup_many(table.column("key").to_pylist())
    assert result.moved_rows == int((old_channels != new_channels).sum()) > 0
    losing = set(plan.channels_losing_keys)
    old_paths = {entry.path: channel for channel, entries in before.items() for entry in entries}
    assert {old_paths[path] for path in read if path in old_paths} <= losing  # the rest: read back
    for channel in set(range(min(a.n_channels, b.n_channels))) - losing:
        kept = {entry.path for entry in before[channel]}
        assert kept <= {entry.path for entry in store.files(channel)}
    if kind == "slot-only":
        assert result.relocated_files > 0
    relocated = [
        entry for entry in all_files(store) if entry.path not in {e.path for f in before.values() for e in f}
    ]
    links = [entry for entry in relocated if os.stat(store.root / entry.path).st_nlink > 1]
    assert len(links) == result.relocated_files


def test_relocated_files_are_hard_links_of_the_source(tmp_path: Path) -> None:
    table = state_table(2000, "str")
    a, b = functions("slot-only", "str", table)
    store = new_store(tmp_path / "s", a, table)
    old = {(entry.channel, entry.slot_group): entry for entry in all_files(store)}
    result = store.apply(plan_migration(a, b), plan_id=1, region=REGION, from_version=1, to_version=2)
    assert result.relocated_files >= 1
    linked = 0
    for entry in all_files(store):
        for (channel, group), source in old.items():
            if group == entry.slot_group and channel != entry.channel and entry.checksum == source.checksum:
                assert os.path.samefile(store.root / entry.path, store.root / source.path)
                linked += 1
    assert linked == result.relocated_files


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    key_type=st.sampled_from(["str", "int"]),
    n_a=st.integers(1, 5),
    n_b=st.integers(1, 5),
    rows=st.integers(0, 400),
    groups=st.sampled_from([1, 4, 64]),
    data=st.data(),
)
def test_apply_matches_the_target_function_on_random_states(
    tmp_path_factory: pytest.TempPathFactory,
    key_type: KeyType,
    n_a: int,
    n_b: int,
    rows: int,
    groups: int,
    data: st.DataObject,
) -> None:
    table = state_table(rows, key_type, seed=rows)
    keys = table.column("key").to_pylist()

    def random_function(n: int) -> PartitionFunction:
        explicit = data.draw(st.dictionaries(st.sampled_from(keys), st.integers(0, n - 1))) if keys else {}
        overrides = data.draw(
            st.dictionaries(st.integers(0, 2**SMALL_SLOT_BITS - 1), st.integers(0, n - 1), max_size=50)
        )
        method: Literal["jump", "ring"] = data.draw(st.sampled_from(["jump", "ring"]))
        return PartitionFunction(
            n_channels=n,
            key_type=key_type,
            slot_bits=SMALL_SLOT_BITS,
            explicit=explicit,
            slot_overrides=overrides,
            consistent=ConsistentSpec(method=method),
        )

    a, b = random_function(n_a), random_function(n_b)
    store = new_store(tmp_path_factory.mktemp("s"), a, table, slot_groups=groups)
    plan = plan_migration(a, b)
    # the vectorized destination is MigrationPlan.destination
    slots = slots_of_hashes(hash_keys(keys, key_type), SMALL_SLOT_BITS).tolist() if keys else []
    result = store.apply(plan, plan_id=1, region=REGION, from_version=1, to_version=2)
    check_oracle(store, table, b)
    moved = sum(
        plan.destination(key, slot, a.lookup(key)) != a.lookup(key)
        for key, slot in zip(keys, slots, strict=True)
    )
    assert result.moved_rows == moved


def test_applying_a_plan_twice_is_a_no_op(tmp_path: Path) -> None:
    table = state_table(500, "str")
    a, b = functions("grow", "str", table)
    plan = plan_migration(a, b)
    store = new_store(tmp_path / "s", a, table)
    store.apply(plan, plan_id=3, region=REGION, from_version=1, to_version=2)
    files = listing(store.root)
    again = StateStore.open(store.root).apply(plan, plan_id=3, region=REGION, from_version=1, to_version=2)
    assert again.already_applied and again.moved_rows == 0 and again.generation == store.generation
    assert listing(store.root) == files
    with pytest.raises(InvalidInput, match="plan 3 was applied to this store with another content"):
        store.apply(plan.reverse(), plan_id=3, region=REGION, from_version=2, to_version=3)


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"region": "other"}, "plan 9 is for region 'other' but the store .* holds region 'trades'"),
        ({"from_version": 5}, r"starts from version 5 but the store .* holds version 1 \(generation 1"),
        ({"reverse": True}, r"starts from function .* but the store .* holds version 1"),
    ],
)
def test_a_plan_for_another_region_or_generation_is_refused(
    tmp_path: Path, change: dict[str, Any], message: str
) -> None:
    table = state_table(300, "int")
    a, b = functions("grow", "int", table)
    plan = plan_migration(a, b)
    store = new_store(tmp_path / "s", a, table)
    files = listing(store.root)
    arguments: dict[str, Any] = {"region": REGION, "from_version": 1, "to_version": 2}
    arguments.update({key: value for key, value in change.items() if key != "reverse"})
    with pytest.raises(InvalidInput, match=message):
        store.apply(plan.reverse() if change.get("reverse") else plan, plan_id=9, **arguments)
    assert listing(store.root) == files
    assert store.generation == 1 and store.version == 1


def test_a_state_that_does_not_match_the_plan_fails_verification(tmp_path: Path) -> None:
    """State routed by another function than the store's: rows stay on a channel the target lacks."""
    table = state_table(600, "str")
    a, b = initial_function(4, "str", SMALL_SLOT_BITS), initial_function(2, "str", SMALL_SLOT_BITS)
    ring = PartitionFunction(
        n_channels=4, key_type="str", slot_bits=SMALL_SLOT_BITS, consistent=ConsistentSpec("ring")
    )
    store = new_store(tmp_path / "s", a, table, routed_by=ring)
    manifest = (store.root / "MANIFEST").read_text()
    with pytest.raises(Corrupt, match=r"channel [23] keeps \d+ rows after the plan, but the target"):
        store.apply(plan_migration(a, b), plan_id=1, region=REGION, from_version=1, to_version=2)
    assert (store.root / "MANIFEST").read_text() == manifest
    assert StateStore.open(store.root).generation == 1 and store.vacuum() != []


def test_commit_refuses_another_layout(tmp_path: Path) -> None:
    table = state_table(200, "str")
    a, b = functions("grow", "str", table)
    store = new_store(tmp_path / "s", a, table)
    entries = {0: store.files(0)}
    with pytest.raises(InvalidInput, match=r"version 2 has N=6 channels but the store .* is laid out for 4"):
        store.commit(entries, version=2, function_digest=b.digest, n_channels=6)
    with pytest.raises(
        InvalidInput, match=r"version 2 .* is not the layout of the store: it holds version 1"
    ):
        store.commit(entries, version=2, function_digest=b.digest, n_channels=4)
    with pytest.raises(InvalidInput, match=r"replaced\[1\] must hold file entries of channel 1, got"):
        store.commit({1: store.files(0)}, version=1, function_digest=a.digest, n_channels=4)
    stale = StateStore.open(store.root)
    store.commit({0: []}, version=1, function_digest=a.digest, n_channels=4)
    assert store.files(0) == [] and store.rows() < table.num_rows
    with pytest.raises(Conflict, match="moved on to generation 2 since this handle read generation 1"):
        stale.commit({1: []}, version=1, function_digest=a.digest, n_channels=4)


def test_commit_refuses_files_of_another_schema(tmp_path: Path) -> None:
    table = state_table(200, "str")
    a = initial_function(2, "str", SMALL_SLOT_BITS)
    store = new_store(tmp_path / "s", a, table)
    other = table.drop_columns(["venue"])
    entries = write_channel_files(
        store.root, 0, other, key_col="key", key_type="str", slot_bits=SMALL_SLOT_BITS, slot_groups=16
    )
    with pytest.raises(InvalidInput, match=r"replaced\[0\] must list files with the store's schema"):
        store.commit({0: entries}, version=1, function_digest=a.digest, n_channels=2)


def test_open_names_a_missing_or_corrupt_manifest(tmp_path: Path) -> None:
    table = state_table(100, "str")
    store = new_store(tmp_path / "s", initial_function(2, "str", SMALL_SLOT_BITS), table)
    manifest = store.root / "MANIFEST"
    text = manifest.read_text()
    manifest.write_text("{not json")
    with pytest.raises(Corrupt, match=r"/MANIFEST: the manifest is corrupt") as corrupt:
        StateStore.open(store.root)
    assert corrupt.value.path == str(manifest)
    manifest.write_text(text.replace('"format":2', '"format":3'))
    with pytest.raises(Corrupt, match=r"/MANIFEST: the document is in format 3, which this version of"):
        StateStore.open(store.root)
    manifest.write_text(text.replace('"format":2', '"format":"2"'))
    with pytest.raises(Corrupt, match=r"/MANIFEST: the manifest is corrupt: format must be one of 1, 2"):
        StateStore.open(store.root)
    manifest.unlink()
    with pytest.raises(Corrupt, match=r"/MANIFEST: the manifest is missing, but the directory holds a state"):
        StateStore.open(store.root)
    manifest.write_text(text)
    generation = store.root / "generations" / "00000001.json"
    generation.write_text(generation.read_text().replace('"region":"trades"', '"region":"trade5"'))
    with pytest.raises(Corrupt, match=r"/00000001.json: the generation file does not match the SHA-256"):
        StateStore.open(store.root)
    generation.unlink()
    with pytest.raises(Corrupt, match=r"/00000001.json: the generation file named by the manifest .* cannot"):
        StateStore.open(store.root)
    with pytest.raises(NotFound, match=r"no state store at .*nowhere.*create one"):
        StateStore.open(tmp_path / "nowhere")


def test_verify_names_a_damaged_file(tmp_path: Path) -> None:
    table = state_table(400, "int")
    store = new_store(tmp_path / "s", initial_function(2, "int", SMALL_SLOT_BITS), table)
    victim = store.files(1)[0]
    replacement = write_channel_files(
        tmp_path / "other",
        1,
        table.slice(0, 5),
        key_col="key",
        key_type="int",
        slot_bits=SMALL_SLOT_BITS,
        slot_groups=16,
    )[0]
    os.replace(tmp_path / "other" / replacement.path, store.root / victim.path)
    with pytest.raises(
        Corrupt, match=f"{victim.path}: state file does not match its generation entry"
    ) as error:
        store.verify()
    assert error.value.path == str(store.root / victim.path)
    assert [damage.path for damage in store.damaged_files()] == [error.value.path]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"slot_groups": 3}, r"slot_groups must be a power of two in \[1, 1024\], got 3"),
        ({"slot_groups": 2048}, r"slot_groups must be an integer in \[1, 1024\], got 2048"),
        ({"slot_bits": 4}, r"slot_bits must be an integer in \[10, 20\], got 4"),
        ({"key_type": "float"}, "key_type must be one of str, int, got 'float'"),
        ({"key_col": "nope"}, "key_col must name a column of the schema"),
        ({"key_type": "int"}, "key column 'key' has type string; 'int' keys need a signed integer type"),
        ({"n_channels": 0}, r"n_channels must be an integer in \[1, 65536\], got 0"),
        ({"function_digest": "abc"}, "function_digest must be a SHA-256 digest"),
        ({"region": ""}, "region must be a name of 1-128 letters"),
        ({"region": "a/b"}, "region must be a name of 1-128 letters"),
        ({"version": -1}, r"version must be an integer in \[0, "),
        ({"schema": pa.schema([("key", pa.string()), ("_slot", pa.int32())])}, "'_slot', reserved"),
        ({"schema": pa.schema([("key", pa.string()), ("d", pa.decimal128(5, 2))])}, "column 'd' has type"),
    ],
)
def test_create_validates_every_argument(tmp_path: Path, change: dict[str, Any], message: str) -> None:
    arguments: dict[str, Any] = {
        "region": REGION,
        "version": 1,
        "function_digest": "0" * 64,
        "n_channels": 2,
        "slot_bits": SMALL_SLOT_BITS,
        "key_type": "str",
        "key_col": "key",
        "schema": pa.schema([("key", pa.string()), ("v", pa.int64())]),
    }
    with pytest.raises(InvalidInput, match=message):
        StateStore.create(tmp_path / "s", **{**arguments, **change})
    assert not (tmp_path / "s" / "MANIFEST").exists()


def test_create_refuses_a_non_empty_root_but_finishes_a_killed_create(tmp_path: Path) -> None:
    def create() -> StateStore:
        return StateStore.create(
            tmp_path,
            region=REGION,
            version=1,
            function_digest="0" * 64,
            n_channels=2,
            slot_bits=SMALL_SLOT_BITS,
            key_type="str",
            key_col="key",
            schema=pa.schema([("key", pa.string())]),
        )

    (tmp_path / "generations").mkdir()
    (tmp_path / "generations" / "00000000.json").write_text("{half")  # killed before the manifest
    (tmp_path / ".lock").touch()
    assert create().generation == 0
    with pytest.raises(InvalidInput, match=r"root already holds a state store: .*; open it instead"):
        create()
    assert StateStore.open(tmp_path).rows() == 0


def test_write_channel_files_lays_out_slot_groups(tmp_path: Path) -> None:
    table = state_table(1000, "str")
    entries = write_channel_files(
        tmp_path, 3, table, key_col="key", key_type="str", slot_bits=SMALL_SLOT_BITS, slot_groups=8
    )
    assert sorted(entry.slot_group for entry in entries) == list(range(8))
    assert sum(entry.rows for entry in entries) == 1000
    assert all(FileEntry.from_dict(entry.to_dict()) == entry for entry in entries)
    with pytest.raises(InvalidInput, match="key_col must name a column"):
        write_channel_files(
            tmp_path, 0, table, key_col="k", key_type="str", slot_bits=SMALL_SLOT_BITS, slot_groups=8
        )
    nulls = pa.table({"key": pa.array(["a", None])})
    with pytest.raises(InvalidInput, match="holds nulls"):
        write_channel_files(
            tmp_path, 0, nulls, key_col="key", key_type="str", slot_bits=SMALL_SLOT_BITS, slot_groups=8
        )


def test_read_channel_and_columns(tmp_path: Path) -> None:
    table = state_table(300, "str")
    store = new_store(tmp_path / "s", initial_function(3, "str", SMALL_SLOT_BITS), table)
    assert store.read_channel(1, ["volume"]).column_names == ["volume"]
    with pytest.raises(InvalidInput, match=r"columns must be state columns .*, got \['nope'\]"):
        store.read_channel(1, ["nope"])
    with pytest.raises(InvalidInput, match=r"channel must be an integer in \[0, 2\], got 3"):
        store.read_channel(3)
    assert sum(store.read_channel(c).num_rows for c in range(3)) == 300


def test_vacuum_removes_unreferenced_files_and_keeps_the_store_readable(tmp_path: Path) -> None:
    table = state_table(800, "str")
    a, b = functions("grow", "str", table)
    store = new_store(tmp_path / "s", a, table)
    old_paths = {entry.path for entry in all_files(store)}
    store.apply(plan_migration(a, b), plan_id=1, region=REGION, from_version=1, to_version=2)
    orphan = write_channel_files(
        store.root,
        0,
        table.slice(0, 3),
        key_col="key",
        key_type="str",
        slot_bits=SMALL_SLOT_BITS,
        slot_groups=16,
    )
    (store.root / "generations" / "00000009.json").write_text("{}")
    removed = store.vacuum(keep_generations=1)
    assert orphan[0].path in removed and "generations/00000009.json" in removed
    assert "generations/00000000.json" in removed and "generations/00000001.json" in removed
    current = {entry.path for entry in all_files(store)}
    assert set(removed).isdisjoint(current) and (old_paths - current) <= set(removed)
    check_oracle(StateStore.open(store.root), table, b)
    assert store.vacuum(keep_generations=1) == []
    with pytest.raises(InvalidInput, match="keep_generations must be an integer in"):
        store.vacuum(keep_generations=0)


def test_int32_key_columns_compare_as_int64_keys(tmp_path: Path) -> None:
    table = state_table(1500, "int")
    table = table.set_column(0, "key", table.column("key").cast(pa.int32()))
    a, b = functions("explicit-only", "int", table)
    store = new_store(tmp_path / "s", a, table)
    result = store.apply(plan_migration(a, b), plan_id=1, region=REGION, from_version=1, to_version=2)
    check_oracle(store, table, b)
    keys = table.column("key").to_pylist()
    assert result.moved_rows == sum(a.lookup(key) != b.lookup(key) for key in keys) > 0
    assert store.schema.field("key").type == pa.int32()


@pytest.mark.parametrize("damage", ["deleted", "truncated"])
def test_a_deleted_or_truncated_data_file_is_corrupt_naming_the_file(tmp_path: Path, damage: str) -> None:
    table = state_table(3000, "str")
    a, b = functions("grow", "str", table)
    store = new_store(tmp_path / "s", a, table)
    plan = plan_migration(a, b)
    victim = next(entry for c in plan.channels_losing_keys for entry in store.files(c))
    path = store.root / victim.path
    if damage == "deleted":
        path.unlink()
    else:
        path.write_bytes(path.read_bytes()[: victim.bytes - 100])
    manifest = (store.root / "MANIFEST").read_text()
    for attempt in (
        lambda: store.read_channel(victim.channel),
        lambda: store.apply(plan, plan_id=1, region=REGION, from_version=1, to_version=2),
        store.verify,
    ):
        with pytest.raises(
            Corrupt, match="missing" if damage == "deleted" else "Parquet magic bytes"
        ) as error:
            attempt()
        assert error.value.path == str(path) and str(error.value).startswith(f"{path}: state file")
    assert (store.root / "MANIFEST").read_text() == manifest
    assert [damaged.path for damaged in store.damaged_files()] == [str(path)]


def test_a_deleted_manifest_is_corrupt_and_no_store_is_created_over_it(tmp_path: Path) -> None:
    table = state_table(300, "str")
    function = initial_function(3, "str", SMALL_SLOT_BITS)
    store = new_store(tmp_path / "s", function, table)
    manifest = store.root / "MANIFEST"
    manifest.unlink()
    with pytest.raises(
        Corrupt, match="the manifest is missing, but the directory holds a state store"
    ) as error:
        StateStore.open(store.root)
    assert error.value.path == str(manifest)
    with pytest.raises(Corrupt, match="the manifest is missing") as error:
        StateStore.create(
            store.root,
            region=REGION,
            version=1,
            function_digest=function.digest,
            n_channels=3,
            slot_bits=SMALL_SLOT_BITS,
            key_type="str",
            key_col="key",
            schema=table.schema,
        )
    assert error.value.path == str(manifest) and not manifest.exists()


def channel_updates(store: StateStore, rows: int) -> list[ChannelUpdate]:
    return [
        ChannelUpdate(channel, rows, sum(e.rows for e in store.files(channel)), 1000 + channel, 0.25)
        for channel in range(store.n_channels)
    ]


def test_a_commit_records_its_batch_and_refuses_an_absorbed_one(tmp_path: Path) -> None:
    table = state_table(600, "str")
    a, b = functions("grow", "str", table)
    store = new_store(tmp_path / "s", a, table)
    assert store.last_batch is None and not store.absorbed(0)
    batch = absorbed_batch(7, list(reversed(channel_updates(store, 5))))
    store.commit({}, version=1, function_digest=a.digest, n_channels=4, batch=batch)
    assert store.last_batch == batch and [u.channel for u in batch.channels] == [0, 1, 2, 3]
    assert store.absorbed(7) and store.absorbed(3) and not store.absorbed(8)
    reopened = StateStore.open(store.root)
    assert reopened.last_batch == batch and reopened.generation == 2
    files = listing(store.root)
    with pytest.raises(Conflict, match=r"batch 7 is already in the state store .* holds batches up to 7"):
        store.commit({}, version=1, function_digest=a.digest, n_channels=4, batch=absorbed_batch(7, []))
    assert listing(store.root) == files
    store.apply(plan_migration(a, b), plan_id=1, region=REGION, from_version=1, to_version=2)
    assert StateStore.open(store.root).last_batch == batch  # later generations carry the record along
    store.commit({}, version=2, function_digest=b.digest, n_channels=6)
    assert StateStore.open(store.root).last_batch == batch


@settings(max_examples=50, deadline=None)
@given(
    batch_id=st.integers(0, 2**63 - 1),
    rows=st.lists(
        st.tuples(
            st.integers(0, 2**31),
            st.integers(0, 2**40),
            st.integers(0, 2**40),
            st.floats(0, 1e6, allow_nan=False),
        ),
        max_size=8,
    ),
)
def test_a_batch_record_round_trips_through_its_document(batch_id: int, rows: list[tuple[int, ...]]) -> None:
    updates = [ChannelUpdate(c, n, s, n + s, float(t)) for c, (n, s, _, t) in enumerate(rows)]
    batch = absorbed_batch(batch_id, updates)
    assert AbsorbedBatch.from_dict(json.loads(json.dumps(batch.to_dict()))) == batch


def test_a_bad_batch_record_names_its_field() -> None:
    with pytest.raises(InvalidInput, match=r"batch.channels\[0\] must be a \[channel, input_rows"):
        AbsorbedBatch.from_dict({"id": 1, "channels": [[0, 1]]})
    with pytest.raises(InvalidInput, match=r"batch.id must be an integer in \[0, "):
        AbsorbedBatch.from_dict({"id": -1, "channels": []})
    with pytest.raises(InvalidInput, match=r"channels must report each channel once, got \[2, 2\]"):
        absorbed_batch(3, [ChannelUpdate(2, 1, 1, 1, 0.0), ChannelUpdate(2, 1, 1, 1, 0.0)])
