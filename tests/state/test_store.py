"""The keyed state store (DESIGN §6, §9, §10), checked against independent oracles.

The oracle of ``apply`` is the target function itself: after applying ``plan_migration(a, b)`` every
row must sit on ``b.lookup(key)``, and the content (all rows, sorted) must equal the old content. What
a commit wrote is read from the objects the store holds before and after it. The functional tests run
on a local directory and on a local S3 endpoint (``store_backend``) where the behaviour does not
depend on the backend.
"""

from __future__ import annotations

import json
import pickle
from collections.abc import Callable
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import repart.state.migrate as migrate_module
import repart.state.store as store_module
from repart.errors import Conflict, Corrupt, InvalidInput, NotFound
from repart.migration import plan_migration
from repart.partitioning import ConsistentSpec, PartitionFunction, initial_function
from repart.partitioning.documents import canonical_json, sha256_hex
from repart.partitioning.domain import KeyType
from repart.partitioning.hashing import hash_keys, slots_of_hashes
from repart.state.batches import AbsorbedBatch, ChannelUpdate, absorbed_batch
from repart.state.files import checked_layout, read_verified, write_channel_files
from repart.state.migrate import migrate_files
from repart.state.partial import SourceFile
from repart.state.store import FileEntry, StateStore
from tests.factories import (
    CHURNED_FUNCTION,
    CONSISTENT_SPECS,
    REGION,
    SMALL_SLOT_BITS,
    all_files,
    check_oracle,
    churned_store,
    empty_store,
    legacy_store,
    log_documents,
    new_store,
    object_listing,
    s3_bucket,
    sorted_rows,
    state_table,
)


def commit_path(generation: int) -> str:
    return f"_log/{generation:020d}.json"


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


def relocated_entries(before: list[FileEntry], after: list[FileEntry]) -> list[FileEntry]:
    """The entries of ``after`` that are an entry of ``before`` listed under another channel instead
    (everything else equal), the source entry gone (``before`` lists each file once)."""
    sources = {entry.path: entry for entry in before}
    identities = {entry.identity for entry in after}
    return [
        entry
        for entry in after
        if (source := sources.get(entry.path)) is not None
        and entry.channel != source.channel
        and replace(entry, channel=source.channel) == source
        and source.identity not in identities
    ]


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

    def recording_read(objects: Any, entry: FileEntry, *args: Any) -> Any:
        read.append(entry.path)
        return read_verified(objects, entry, *args)

    def recording_open(objects: Any, entry: FileEntry, *args: Any) -> SourceFile:
        read.append(entry.path)
        return original_open(objects, entry, *args)

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
    old_entries = [entry for entries in before.values() for entry in entries]
    old_paths = {entry.path: entry.channel for entry in old_entries}
    assert {old_paths[path] for path in read if path in old_paths} <= losing  # the rest: read back
    for channel in set(range(min(a.n_channels, b.n_channels))) - losing:
        kept = {entry.path for entry in before[channel]}
        assert kept <= {entry.path for entry in store.files(channel)}
    after = all_files(store)
    assert len(relocated_entries(old_entries, after)) == result.relocated_files
    if kind == "slot-only":
        assert result.relocated_files > 0
    sizes = {entry.path: entry.bytes for entry in old_entries}
    assert all(entry.bytes == sizes[entry.path] for entry in after if entry.path in sizes)  # not rewritten
    written = {entry.path: entry.bytes for entry in after if entry.path not in sizes}
    document = store.objects.size(commit_path(store.generation))
    assert document is not None and result.written_bytes == sum(written.values()) + document


def test_relocated_files_are_the_source_files_listed_under_their_new_channel(
    store_url: str, store_options: dict[str, str] | None
) -> None:
    """Two whole slot groups change channel: their files are listed under the new channel, same
    path, rows, checksum and seq, and no data file is written."""
    table = state_table(2000, "str")
    a, b = functions("slot-only", "str", table)
    store = new_store(store_url, a, table, options=store_options)
    old = all_files(store)
    data = {path for path in object_listing(store) if path.startswith("data/")}
    result = store.apply(plan_migration(a, b), plan_id=1, region=REGION, from_version=1, to_version=2)
    relocated = relocated_entries(old, all_files(store))
    assert len(relocated) == result.relocated_files >= 2
    assert {entry.slot_group for entry in relocated} >= {0, 1}  # slots 0-127: groups 0 and 1 of 16
    sources = {entry.path: entry for entry in old}
    for entry in relocated:  # the file holds exactly rows the target function sends there
        rows, _ = read_verified(store.objects, entry, store.layout)
        assert {b.lookup(key) for key in rows.column("key").to_pylist()} == {entry.channel}
        assert rows.num_rows == sources[entry.path].rows
    assert {path for path in object_listing(store) if path.startswith("data/")} - data == {
        entry.path for entry in all_files(store) if entry.path not in sources
    }
    check_oracle(store, table, b, store_options)


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
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
        return PartitionFunction(
            n_channels=n,
            key_type=key_type,
            slot_bits=SMALL_SLOT_BITS,
            explicit=explicit,
            slot_overrides=overrides,
            consistent=data.draw(st.sampled_from(CONSISTENT_SPECS)),
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


def test_applying_a_plan_twice_is_a_no_op(store_url: str, store_options: dict[str, str] | None) -> None:
    table = state_table(500, "str")
    a, b = functions("grow", "str", table)
    plan = plan_migration(a, b)
    store = new_store(store_url, a, table, slot_groups=4, options=store_options)
    store.apply(plan, plan_id=3, region=REGION, from_version=1, to_version=2)
    files = object_listing(store)
    again = StateStore.open(store_url, store_options).apply(
        plan, plan_id=3, region=REGION, from_version=1, to_version=2
    )
    assert again.already_applied and again.moved_rows == 0 and again.generation == store.generation == 2
    assert again.written_bytes == 0
    assert object_listing(store) == files
    with pytest.raises(InvalidInput, match="plan 3 was applied to this store with another content") as error:
        store.apply(plan.reverse(), plan_id=3, region=REGION, from_version=2, to_version=3)
    assert error.value.field == "plan"
    assert object_listing(store) == files


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        (
            {"region": "other"},
            "region",
            "plan 9 is for region 'other' but the store .* holds region 'trades'",
        ),
        (
            {"from_version": 5},
            "from_version",
            r"starts from version 5 but the store .* holds version 1 \(generation 1",
        ),
        ({"reverse": True}, "plan", r"starts from function .* but the store .* holds version 1"),
    ],
)
def test_a_plan_for_another_region_or_generation_is_refused(
    tmp_path: Path, change: dict[str, Any], field: str, message: str
) -> None:
    table = state_table(300, "int")
    a, b = functions("grow", "int", table)
    plan = plan_migration(a, b)
    store = new_store(tmp_path / "s", a, table)
    files = object_listing(store)
    arguments: dict[str, Any] = {"region": REGION, "from_version": 1, "to_version": 2}
    arguments.update({key: value for key, value in change.items() if key != "reverse"})
    with pytest.raises(InvalidInput, match=message) as error:
        store.apply(plan.reverse() if change.get("reverse") else plan, plan_id=9, **arguments)
    assert error.value.field == field
    assert object_listing(store) == files
    assert store.generation == 1 and store.version == 1


def test_a_state_that_does_not_match_the_plan_fails_verification(tmp_path: Path) -> None:
    """State routed by another function than the store's: rows stay on a channel the target lacks.
    Nothing is committed; what the plan wrote is unlisted, and vacuum deletes it once old enough."""
    table = state_table(600, "str")
    a, b = initial_function(4, "str", SMALL_SLOT_BITS), initial_function(2, "str", SMALL_SLOT_BITS)
    ring = PartitionFunction(
        n_channels=4, key_type="str", slot_bits=SMALL_SLOT_BITS, consistent=ConsistentSpec("ring")
    )
    store = new_store(tmp_path / "s", a, table, routed_by=ring)
    log = log_documents(store)
    with pytest.raises(Corrupt, match=r"channel [23] keeps \d+ rows after the plan, but the target"):
        store.apply(plan_migration(a, b), plan_id=1, region=REGION, from_version=1, to_version=2)
    assert log_documents(store) == log
    assert StateStore.open(store.url).generation == 1
    listed = {entry.path for entry in store.all_files()}
    unlisted = sorted(
        path for path in object_listing(store) if path.startswith("data/") and path not in listed
    )
    later = datetime.now(UTC) + timedelta(hours=2)
    assert store.vacuum(timedelta(hours=1), now=later).deleted == tuple(unlisted)
    check_oracle(StateStore.open(store.url), table, ring)


def test_commit_refuses_another_layout_and_entries_it_did_not_write(tmp_path: Path) -> None:
    table = state_table(200, "str")
    a, b = functions("grow", "str", table)
    store = new_store(tmp_path / "s", a, table, slot_groups=4)
    entries = {0: store.write(0, table.slice(0, 4), kind="delta")}
    log = log_documents(store)
    refusals: list[tuple[dict[str, Any], str, str]] = [
        (
            {"added": entries, "version": 2, "function_digest": b.digest, "n_channels": 6},
            "n_channels",
            r"version 2 has N=6 channels but the store .* is laid out for 4 channels; apply the",
        ),
        (
            {"added": entries, "version": 2, "function_digest": b.digest, "n_channels": 4},
            "version",
            r"version 2 .* is not the layout of the store: it holds version 1 .*generation 1",
        ),
        (
            {"added": {1: entries[0]}, "version": 1, "function_digest": a.digest, "n_channels": 4},
            "added[1]",
            r"added\[1\] must hold file entries of channel 1, got FileEntry",
        ),
        (
            {"added": {4: entries[0]}, "version": 1, "function_digest": a.digest, "n_channels": 4},
            "added.channel",
            r"added.channel must be an integer in \[0, 3\], got 4",
        ),
        (
            {
                "added": {0: [replace(entries[0][0], bytes=entries[0][0].bytes + 1)]},
                "version": 1,
                "function_digest": a.digest,
                "n_channels": 4,
            },
            "added[0]",
            r"added\[0\] must list written files of the size their entry states: data/\w+\.parquet has",
        ),
    ]
    for arguments, field, message in refusals:
        with pytest.raises(InvalidInput, match=message) as error:
            store.commit(**arguments)
        assert error.value.field == field
    assert log_documents(store) == log and store.generation == 1
    store.objects.delete([entries[0][0].path])
    with pytest.raises(InvalidInput, match=r"added\[0\] must list written files") as error:
        store.commit(entries, version=1, function_digest=a.digest, n_channels=4)
    assert log_documents(store) == log


def test_commit_refuses_files_of_another_schema(tmp_path: Path) -> None:
    table = state_table(200, "str")
    a = initial_function(2, "str", SMALL_SLOT_BITS)
    store = new_store(tmp_path / "s", a, table, slot_groups=4)
    other = table.drop_columns(["venue"])
    layout = checked_layout("key", "str", SMALL_SLOT_BITS, 4, other.schema)
    entries = write_channel_files(store.objects, 0, other, layout, kind="delta")
    log = log_documents(store)
    with pytest.raises(InvalidInput, match=r"added\[0\] must list files with the store's schema"):
        store.commit({0: entries}, version=1, function_digest=a.digest, n_channels=2)
    assert log_documents(store) == log


def test_commits_that_overlap_conflict_and_the_others_go_through(
    store_url: str, store_options: dict[str, str] | None
) -> None:
    """Two handles on one generation: commits that only add files both go through; of two that absorb
    a batch, or of a commit and a plan's apply, the one that comes second is refused (Conflict) and
    commits nothing."""
    table = state_table(400, "str")
    a, b = functions("grow", "str", table)
    store = new_store(store_url, a, table, slot_groups=4, options=store_options)
    first, second = StateStore.open(store_url, store_options), StateStore.open(store_url, store_options)
    channels = a.lookup_many(table.column("key").to_pylist())
    expected = {row["key"]: row for row in table.to_pylist()}
    for handle, channel in ((first, 0), (second, 1)):  # each raises the volume of its channel's keys
        mine = table.filter(pa.array(channels == channel)).slice(0, 20)
        raised = mine.set_column(1, "volume", pa.array([v + 1000 for v in mine["volume"].to_pylist()]))
        expected.update({row["key"]: row for row in raised.to_pylist()})
        handle.commit(
            {channel: handle.write(channel, raised)}, version=1, function_digest=a.digest, n_channels=4
        )
    assert (first.generation, second.generation) == (2, 3)  # the second rebased onto the first
    reopened = StateStore.open(store_url, store_options)
    assert sorted_rows(reopened.read()).equals(sorted_rows(pa.Table.from_pylist(list(expected.values()))))

    first.commit({}, version=1, function_digest=a.digest, n_channels=4, batch=absorbed_batch(1, []))
    log = log_documents(store)
    with pytest.raises(Conflict, match=r"moved on to generation 4 through a commit that absorbed batch 1"):
        second.commit({}, version=1, function_digest=a.digest, n_channels=4, batch=absorbed_batch(2, []))
    assert log_documents(store) == log

    StateStore.open(store_url, store_options).apply(
        plan_migration(a, b), plan_id=1, region=REGION, from_version=1, to_version=2
    )
    log = log_documents(store)
    late = {0: first.write(0, table.slice(0, 2))}
    with pytest.raises(Conflict, match=r"moved on to generation 5 through a.* apply commit"):
        first.commit(late, version=1, function_digest=a.digest, n_channels=4)
    assert log_documents(store) == log
    final = StateStore.open(store_url, store_options)
    assert final.last_batch is not None and final.last_batch.batch_id == 1 and final.version == 2
    assert sorted_rows(final.read()).equals(sorted_rows(pa.Table.from_pylist(list(expected.values()))))


def test_a_batch_committed_while_a_plan_is_prepared_makes_the_apply_conflict(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The batch's delta was written in the old layout: the apply, which read the generation before
    it, must not commit over it."""
    table = state_table(400, "str")
    a, b = functions("grow", "str", table)
    store = new_store(tmp_path / "s", a, table, slot_groups=4)
    job = StateStore.open(store.url)
    channels = a.lookup_many(table.column("key").to_pylist())
    mine = table.filter(pa.array(channels == 0)).slice(0, 3)
    raised = mine.set_column(1, "volume", pa.array([v + 1000 for v in mine["volume"].to_pylist()]))
    original = migrate_files

    def racing(*args: Any, **kwargs: Any) -> Any:
        migration = original(*args, **kwargs)
        delta = job.write(0, raised)
        job.commit({0: delta}, version=1, function_digest=a.digest, n_channels=4, batch=absorbed_batch(1, []))
        return migration

    monkeypatch.setattr(store_module, "migrate_files", racing)
    with pytest.raises(Conflict, match=r"moved on to generation 2 through a write commit"):
        store.apply(plan_migration(a, b), plan_id=1, region=REGION, from_version=1, to_version=2)
    reopened = StateStore.open(store.url)
    assert (reopened.generation, reopened.version, reopened.applied_plans) == (2, 1, ())
    monkeypatch.setattr(store_module, "migrate_files", original)
    reopened.apply(plan_migration(a, b), plan_id=1, region=REGION, from_version=1, to_version=2)
    expected = {row["key"]: row for row in table.to_pylist()} | {
        row["key"]: row for row in raised.to_pylist()
    }
    state = reopened.read()  # the batch's rows moved with their keys, and still win over the base
    assert sorted_rows(state).equals(sorted_rows(pa.Table.from_pylist(list(expected.values()))))
    assert state.column("channel").to_pylist() == [b.lookup(key) for key in state.column("key").to_pylist()]
    reopened.verify()


def test_a_commit_of_a_later_format_is_corrupt_naming_it(tmp_path: Path) -> None:
    table = state_table(100, "str")
    a = initial_function(2, "str", SMALL_SLOT_BITS)
    store = new_store(tmp_path / "s", a, table, slot_groups=4)
    store.commit({}, version=1, function_digest=a.digest, n_channels=2, batch=absorbed_batch(1, []))
    document = json.loads(store.objects.read(commit_path(2)))
    document["format"] = 4
    body = {key: value for key, value in document.items() if key != "checksum"}
    document["checksum"] = sha256_hex(canonical_json(body))
    store.objects.write(commit_path(2), canonical_json(document).encode("utf-8"))
    with pytest.raises(Corrupt, match="format 4") as error:
        StateStore.open(store.url)
    assert error.value.path == commit_path(2)


def test_a_legacy_store_with_a_damaged_manifest_or_generation_is_corrupt_naming_it(tmp_path: Path) -> None:
    table = state_table(100, "str")
    function = initial_function(2, "str", SMALL_SLOT_BITS)
    root = legacy_store(tmp_path / "s", function, table)
    manifest = root / "MANIFEST"
    text = manifest.read_text()
    assert StateStore.open(root).format == 2
    manifest.write_text("{not json")
    with pytest.raises(Corrupt, match=r"^MANIFEST: the manifest is corrupt") as corrupt:
        StateStore.open(root)
    assert corrupt.value.path == "MANIFEST"
    manifest.write_text(text.replace('"format":2', '"format":3'))
    with pytest.raises(Corrupt, match=r"^MANIFEST: the document is in format 3, which this version of"):
        StateStore.open(root)
    manifest.write_text(text.replace('"format":2', '"format":"2"'))
    with pytest.raises(Corrupt, match=r"^MANIFEST: the manifest is corrupt: format must be one of 1, 2"):
        StateStore.open(root)
    manifest.unlink()
    attempts: list[Callable[[], object]] = [
        lambda: StateStore.open(root),
        lambda: empty_store(root, function, table.schema),  # creating over it would lose its state
    ]
    for attempt in attempts:
        with pytest.raises(
            Corrupt, match=r"the manifest is missing, but the directory holds a state"
        ) as error:
            attempt()
        assert error.value.path == "MANIFEST"
    assert not manifest.exists() and not (root / "_log").exists()
    manifest.write_text(text)
    generation = root / "generations" / "00000001.json"
    generation.write_text(generation.read_text().replace('"region":"trades"', '"region":"trade5"'))
    with pytest.raises(
        Corrupt, match=r"^generations/00000001.json: the generation file does not match the SHA"
    ):
        StateStore.open(root)
    generation.unlink()
    with pytest.raises(
        Corrupt, match=r"^generations/00000001.json: the generation file named by the manifest cannot"
    ):
        StateStore.open(root)


def test_no_store_is_not_found(tmp_path: Path, s3_endpoint: str, s3_options: dict[str, str]) -> None:
    with pytest.raises(NotFound, match=r"no state store at .*nowhere.*create one"):
        StateStore.open(tmp_path / "nowhere")
    with pytest.raises(NotFound, match=r"no state store at s3://.*/nowhere"):
        StateStore.open(f"s3://{s3_bucket(s3_endpoint)}/nowhere", s3_options)
    with pytest.raises(NotFound, match=r"bucket of s3://repart-no-such-bucket/state does not exist"):
        StateStore.open("s3://repart-no-such-bucket/state", s3_options)


def test_a_deleted_commit_document_is_corrupt_and_no_store_is_created_over_it(tmp_path: Path) -> None:
    table = state_table(300, "str")
    function = initial_function(3, "str", SMALL_SLOT_BITS)
    store = new_store(tmp_path / "s", function, table)
    store.commit({}, version=1, function_digest=function.digest, n_channels=3, batch=absorbed_batch(1, []))
    store.objects.delete([commit_path(1)])
    files = object_listing(store)
    with pytest.raises(Corrupt, match="commit document") as error:
        StateStore.open(store.url)
    assert error.value.path == commit_path(1)
    with pytest.raises(
        InvalidInput, match=r"state already holds a state store: .*; open it instead"
    ) as invalid:
        empty_store(store.url, function, table.schema)
    assert invalid.value.field == "state"
    assert object_listing(store) == files


def test_verify_names_a_damaged_file(store_url: str, store_options: dict[str, str] | None) -> None:
    table = state_table(400, "int")
    store = new_store(store_url, initial_function(2, "int", SMALL_SLOT_BITS), table, 4, options=store_options)
    victim = store.files(1)[0]
    (other,) = store.write(1, table.slice(0, 5), kind="delta")  # a valid file of other rows
    store.objects.write(victim.path, store.objects.read(other.path))
    with pytest.raises(
        Corrupt, match=f"^{victim.path}: state file does not match its generation entry"
    ) as error:
        store.verify()
    assert error.value.path == victim.path
    assert [damage.path for damage in store.damaged_files()] == [victim.path]


@pytest.mark.parametrize(
    ("change", "field", "message"),
    [
        ({"slot_groups": 3}, "slot_groups", r"slot_groups must be a power of two in \[1, 1024\], got 3"),
        ({"slot_groups": 2048}, "slot_groups", r"slot_groups must be an integer in \[1, 1024\], got 2048"),
        ({"slot_bits": 4}, "slot_bits", r"slot_bits must be an integer in \[10, 20\], got 4"),
        ({"key_type": "float"}, "key_type", "key_type must be one of str, int, got 'float'"),
        ({"key_col": "nope"}, "key_col", "key_col must name a column of the schema"),
        ({"key_type": "int"}, "schema", "key column 'key' has type string; 'int' keys need a signed"),
        ({"n_channels": 0}, "n_channels", r"n_channels must be an integer in \[1, 65536\], got 0"),
        ({"function_digest": "abc"}, "function_digest", "function_digest must be a SHA-256 digest"),
        ({"region": ""}, "region", "region must be a name of 1-128 letters"),
        ({"region": "a/b"}, "region", "region must be a name of 1-128 letters"),
        ({"version": -1}, "version", r"version must be an integer in \[0, "),
        (
            {"schema": pa.schema([("key", pa.string()), ("_slot", pa.int32())])},
            "schema",
            "'_slot', reserved",
        ),
        (
            {"schema": pa.schema([("key", pa.string()), ("_deleted", pa.bool_())])},
            "schema",
            "'_deleted', reserved",
        ),
        (
            {"schema": pa.schema([("key", pa.string()), ("d", pa.decimal128(5, 2))])},
            "schema",
            "column 'd' has type",
        ),
        ({"merge": {"v": "avg"}}, "merge", r"merge must name every state column \['v'\] once with one of"),
        ({"merge": {"v": "sum", "w": "max"}}, "merge", r"merge must name every state column \['v'\]"),
        ({"location": "ftp://host/state"}, "state", r"state must be a path or a URL with scheme file://"),
        ({"location": "s3:///state"}, "state", r"state must name a bucket or container"),
    ],
)
def test_create_validates_every_argument(
    tmp_path: Path, change: dict[str, Any], field: str, message: str
) -> None:
    arguments: dict[str, Any] = {
        "location": tmp_path / "s",
        "region": REGION,
        "version": 1,
        "function_digest": "0" * 64,
        "n_channels": 2,
        "slot_bits": SMALL_SLOT_BITS,
        "key_type": "str",
        "key_col": "key",
        "schema": pa.schema([("key", pa.string()), ("v", pa.int64())]),
    }
    arguments.update(change)
    with pytest.raises(InvalidInput, match=message) as error:
        StateStore.create(arguments.pop("location"), **arguments)
    assert error.value.field == field
    assert not (tmp_path / "s").exists()


def test_a_remote_store_without_credentials_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    for variable in (
        "AWS_ACCESS_KEY_ID",
        "AWS_WEB_IDENTITY_TOKEN_FILE",
        "AWS_CONTAINER_CREDENTIALS_RELATIVE_URI",
    ):
        monkeypatch.delenv(variable, raising=False)
    with pytest.raises(InvalidInput, match="credentials are missing for s3://bucket/state") as error:
        StateStore.open("s3://bucket/state")
    assert error.value.field == "credentials"


def create(location: Path | str) -> StateStore:
    return StateStore.create(
        location,
        region=REGION,
        version=1,
        function_digest="0" * 64,
        n_channels=2,
        slot_bits=SMALL_SLOT_BITS,
        key_type="str",
        key_col="key",
        schema=pa.schema([("key", pa.string())]),
    )


def test_create_refuses_a_location_that_holds_a_store_or_other_files(
    store_url: str, store_options: dict[str, str] | None, tmp_path: Path
) -> None:
    layout: dict[str, Any] = {
        "region": REGION,
        "version": 1,
        "function_digest": "0" * 64,
        "n_channels": 2,
        "slot_bits": SMALL_SLOT_BITS,
        "key_type": "str",
        "key_col": "key",
        "schema": pa.schema([("key", pa.string())]),
        "options": store_options,
    }
    store = StateStore.create(store_url, **layout)
    assert store.generation == 0 and store.rows() == 0 and store.format == 3
    files = object_listing(store)
    with pytest.raises(InvalidInput, match=r"state already holds a state store: .*; open it instead"):
        StateStore.create(store_url, **layout)
    assert object_listing(store) == files
    other = tmp_path / "other"
    other.mkdir()
    (other / "notes.txt").write_text("mine")
    with pytest.raises(InvalidInput, match=r"state must be a new or empty directory: .* holds other files"):
        create(other)
    assert sorted(path.name for path in other.iterdir()) == ["notes.txt"]


def test_a_create_killed_before_its_commit_can_be_run_again(tmp_path: Path) -> None:
    (tmp_path / "s" / "_log").mkdir(parents=True)
    (tmp_path / "s" / "_log" / ".00000000000000000000.json.x81kq0").write_text('{"format":3,"gen')
    assert create(tmp_path / "s").generation == 0
    assert StateStore.open(tmp_path / "s").rows() == 0


def test_write_lays_out_base_files_by_slot_group_and_a_delta_as_one_file(tmp_path: Path) -> None:
    table = state_table(1000, "str")
    function = initial_function(4, "str", SMALL_SLOT_BITS)
    store = empty_store(tmp_path / "s", function, table.schema, slot_groups=8)
    entries = store.write(3, table, kind="base")
    groups = slots_of_hashes(hash_keys(table.column("key").to_pylist(), "str"), SMALL_SLOT_BITS) >> 7
    expected = dict(zip(*np.unique(groups, return_counts=True), strict=True))
    assert {entry.slot_group: entry.rows for entry in entries} == expected and len(expected) == 8
    assert all((e.channel, e.kind, e.seq, e.filter) == (3, "base", 0, None) for e in entries)
    assert all(FileEntry.from_dict(entry.to_dict()) == entry for entry in entries)
    (delta,) = store.write(3, table, kind="delta")
    assert (delta.slot_group, delta.rows, delta.kind) == (None, 1000, "delta")
    assert store.all_files() == () and StateStore.open(store.url).all_files() == ()  # nothing committed
    store.commit({3: entries}, version=1, function_digest=function.digest, n_channels=4)
    assert all(entry.seq == 1 for entry in store.files(3))  # the commit stamps its generation
    assert store.read_channel(3).sort_by("key").equals(table.sort_by("key"))

    for arguments, field, message in [
        ((4, table), "channel", r"channel must be an integer in \[0, 3\], got 4"),
        ((0, table.drop_columns(["venue"])), "table", r"table must hold the state's columns"),
        ((0, pa.table({"key": pa.array(["a", None])})), "key_col", "holds nulls"),
        ((0, table.to_pylist()), "table", "table must be a pyarrow.Table, got list"),
    ]:
        with pytest.raises(InvalidInput, match=message) as error:
            store.write(*arguments)
        assert error.value.field == field


def test_read_channel_and_columns(store_url: str, store_options: dict[str, str] | None) -> None:
    table = state_table(300, "str")
    function = initial_function(3, "str", SMALL_SLOT_BITS)
    store = new_store(store_url, function, table, slot_groups=4, options=store_options)
    assert store.read_channel(1, ["volume"]).column_names == ["volume"]
    with pytest.raises(InvalidInput, match=r"columns must be state columns .*, got \['nope'\]"):
        store.read_channel(1, ["nope"])
    with pytest.raises(InvalidInput, match=r"channel must be an integer in \[0, 2\], got 3"):
        store.read_channel(3)
    channels = np.array([function.lookup(key) for key in table.column("key").to_pylist()])
    for channel in range(3):
        expected = table.filter(pa.array(channels == channel)).sort_by("key")
        assert store.read_channel(channel).sort_by("key").equals(expected)
    shipped = pickle.loads(pickle.dumps(store))  # a handle ships to executors
    assert shipped.read().sort_by("key").equals(store.read().sort_by("key"))


def test_vacuum_deletes_unlisted_files_by_age_and_keeps_the_store_readable(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A migrated and compacted store with a writer's orphan: nothing is deleted while young, then
    exactly the data files the newest generation does not list. (The age rule itself, per generation
    and log document, is tests/state/test_log.py's.)"""
    table = state_table(1500, "str")
    four = CHURNED_FUNCTION
    store = churned_store(tmp_path / "s", 1500, monkeypatch)
    reader = StateStore.open(store.url)  # a slow reader on generation 3
    assert store.compact().compacted
    store.commit({}, version=3, function_digest=four.digest, n_channels=4, batch=absorbed_batch(1, []))
    (orphan,) = store.write(0, table.slice(0, 3), kind="delta")  # a writer's file, never committed
    everything = object_listing(store)

    young = store.vacuum(timedelta(hours=1))  # everything is younger than an hour
    assert young == store_module.VacuumResult((), len(everything), 3600.0)
    assert object_listing(store) == everything
    assert sorted_rows(reader.read()).equals(sorted_rows(table))

    listed = {entry.path for entry in store.all_files()}
    unlisted = sorted(path for path in everything if path.startswith("data/") and path not in listed)
    assert orphan.path in unlisted and len(unlisted) > 1
    later = datetime.now(UTC) + timedelta(hours=2)
    result = store.vacuum(timedelta(hours=1), now=later)
    assert result.deleted == tuple(unlisted)
    assert result.kept_objects == len(everything) - len(unlisted)
    assert set(object_listing(store)) == set(everything) - set(unlisted)
    check_oracle(StateStore.open(store.url), table, four)
    assert store.vacuum(timedelta(hours=1), now=later).deleted == ()
    for retain in (-1, timedelta(days=-1), 10 * 366 * 86400.0):
        with pytest.raises(InvalidInput, match=r"retain must be a number in \[0, ") as error:
            store.vacuum(retain)
        assert error.value.field == "retain"


def test_vacuum_deletes_what_a_compaction_replaced_once_older_than_the_retention(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = churned_store(tmp_path / "s", 1500, monkeypatch)
    replaced = {entry.path for entry in store.all_files()}
    assert store.compact().compacted
    replaced -= {entry.path for entry in store.all_files()}
    result = store.vacuum(timedelta(hours=1), now=datetime.now(UTC) + timedelta(hours=2))
    assert set(result.deleted) == replaced


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
def test_a_deleted_or_truncated_data_file_is_corrupt_naming_the_file(
    store_url: str, store_options: dict[str, str] | None, damage: str
) -> None:
    table = state_table(3000, "str")
    a, b = functions("grow", "str", table)
    store = new_store(store_url, a, table, slot_groups=4, options=store_options)
    plan = plan_migration(a, b)
    victim = next(entry for c in plan.channels_losing_keys for entry in store.files(c))
    if damage == "deleted":
        store.objects.delete([victim.path])
    else:
        store.objects.write(victim.path, store.objects.read(victim.path)[: victim.bytes - 100])
    log = log_documents(store)
    for attempt in (
        lambda: store.read_channel(victim.channel),
        lambda: store.apply(plan, plan_id=1, region=REGION, from_version=1, to_version=2),
        store.verify,
    ):
        with pytest.raises(
            Corrupt, match="missing" if damage == "deleted" else "Parquet magic bytes"
        ) as error:
            attempt()
        assert error.value.path == victim.path and str(error.value).startswith(f"{victim.path}: state file")
    assert log_documents(store) == log
    assert [damaged.path for damaged in store.damaged_files()] == [victim.path]


def channel_updates(store: StateStore, rows: int) -> list[ChannelUpdate]:
    return [
        ChannelUpdate(channel, rows, sum(e.rows for e in store.files(channel)), 1000 + channel, 0.25)
        for channel in range(store.n_channels)
    ]


def test_a_commit_records_its_batch_and_refuses_an_absorbed_one(tmp_path: Path) -> None:
    table = state_table(600, "str")
    a, b = functions("grow", "str", table)
    store = new_store(tmp_path / "s", a, table, slot_groups=4)
    assert store.last_batch is None and not store.absorbed(0)
    batch = absorbed_batch(7, list(reversed(channel_updates(store, 5))))
    store.commit({}, version=1, function_digest=a.digest, n_channels=4, batch=batch)
    assert store.last_batch == batch and [u.channel for u in batch.channels] == [0, 1, 2, 3]
    assert store.absorbed(7) and store.absorbed(3) and not store.absorbed(8)
    reopened = StateStore.open(store.url)
    assert reopened.last_batch == batch and reopened.generation == 2
    files = object_listing(store)
    with pytest.raises(Conflict, match=r"batch 7 is already in the state store .* holds batches up to 7"):
        store.commit({}, version=1, function_digest=a.digest, n_channels=4, batch=absorbed_batch(7, []))
    assert object_listing(store) == files
    store.apply(plan_migration(a, b), plan_id=1, region=REGION, from_version=1, to_version=2)
    assert StateStore.open(store.url).last_batch == batch  # later generations carry it
    store.commit({}, version=2, function_digest=b.digest, n_channels=6)
    assert StateStore.open(store.url).last_batch == batch
    with pytest.raises(InvalidInput, match=r"batch_id must be an integer in \[0, ") as error:
        store.absorbed(-1)
    assert error.value.field == "batch_id"


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
