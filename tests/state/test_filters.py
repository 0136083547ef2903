"""Slot filters (``repart.state.filters``) and migrations that list files under other channels with
filters instead of copying rows.

Oracles: ``np.isin`` over the hidden slots for a filter; for a migration, the target function itself
(every row on ``b.lookup(key)``, the same rows as before: ``check_oracle``), the rows that change
channel counted from the two functions, a plain filter of the input table per channel, the objects the
store holds before and after (what was written), and the Parquet footer for which row groups hold
which slots.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import repart.state.files as files_module
from repart.errors import Corrupt, InvalidInput
from repart.migration import plan_migration
from repart.partitioning import PartitionFunction, initial_function
from repart.partitioning.consistent import ConsistentSpec
from repart.partitioning.domain import ConsistentMethod, KeyType
from repart.partitioning.hashing import hash_keys, slots_of_hashes
from repart.state.batches import absorbed_batch
from repart.state.filters import SlotFilter
from repart.state.partial import SourceFile
from repart.state.store import FileEntry, StateStore
from tests.factories import (
    REGION,
    SMALL_SLOT_BITS,
    all_files,
    check_oracle,
    empty_store,
    legacy_store,
    log_documents,
    new_store,
    object_listing,
    rewritten_commit,
    state_table,
)


@settings(max_examples=200, deadline=None)
@given(
    hidden=st.lists(st.integers(0, 1023), min_size=1, max_size=60),
    more=st.lists(st.integers(0, 1023), min_size=1, max_size=20),
    probes=st.lists(st.integers(-5, 1030), max_size=80),
)
def test_a_filter_hides_exactly_its_slots(hidden: list[int], more: list[int], probes: list[int]) -> None:
    slots = np.array(probes, dtype=np.int64)
    found = SlotFilter.of(np.array(hidden), 5)
    assert np.array_equal(found.hides(slots), np.isin(slots, hidden))
    assert found.slots.tolist() == sorted(set(hidden))
    assert all(last + 1 < first for (_, last), (first, _) in zip(found.runs, found.runs[1:], strict=False))
    assert SlotFilter.from_dict(json.loads(json.dumps(found.to_dict())), "f") == found
    wider = found.widened(np.array(more), 2)
    assert wider.rows == 7 and np.array_equal(wider.hides(slots), np.isin(slots, hidden + more))


@settings(max_examples=200, deadline=None)
@given(
    group=st.integers(0, 3),
    seen=st.sets(st.integers(0, 255), max_size=256),
    rows=st.integers(0, 9),
)
def test_a_complement_hides_every_slot_of_its_range_but_the_seen_ones(
    group: int, seen: set[int], rows: int
) -> None:
    first, last = group * 256, group * 256 + 255
    assume(rows == 0 or len(seen) < 256)  # with every slot seen there is nothing left to hide
    kept = np.array(sorted(seen), dtype=np.int64) + first
    found = SlotFilter.complement(kept, first, last, rows)
    if rows == 0:
        assert found is None
        return
    assert found is not None and found.rows == rows
    probes = np.arange(first - 3, last + 4, dtype=np.int64)
    inside = (probes >= first) & (probes <= last)
    assert np.array_equal(found.hides(probes), inside & ~np.isin(probes, kept))
    if kept.size:  # together with the filter hiding the seen slots: every slot of the range, once
        source = SlotFilter.of(kept, 1)
        assert np.array_equal(found.hides(probes) ^ source.hides(probes), inside)
    assert SlotFilter.from_dict(json.loads(json.dumps(found.to_dict())), "f") == found


@pytest.mark.parametrize(
    ("document", "message"),
    [
        ({"rows": 1, "slots": []}, r"f.slots must hold at least one run"),
        ({"rows": 1, "slots": [[5, 4]]}, r"f.slots\[0\] must be a run \[first, last\] with first <= last"),
        ({"rows": 1, "slots": [[5, 6], [6, 9]]}, r"f.slots\[1\] must be a run .* not adjacent"),
        ({"rows": 1, "slots": [[5, 6], [7, 9]]}, r"f.slots\[1\] must be a run .* not adjacent"),
        ({"rows": 1, "slots": [[8, 9], [1, 2]]}, r"f.slots\[1\] must be a run .* after the previous run"),
        ({"rows": 0, "slots": [[1, 2]]}, r"f.rows must be an integer in \[1, "),
        ({"rows": 1, "slots": [[1]]}, r"f.slots\[0\] must be a \[first, last\]"),
        ({"rows": 1, "slots": [[1, 2]], "extra": 1}, r"f has unknown field\(s\) \['extra'\]"),
    ],
)
def test_a_bad_filter_document_names_its_field(document: dict[str, Any], message: str) -> None:
    with pytest.raises(InvalidInput, match=message) as error:
        SlotFilter.from_dict(document, "f")
    assert error.value.field.startswith("f")


def scale_out_store(
    root: Path | str,
    monkeypatch: pytest.MonkeyPatch,
    table: pa.Table,
    n: int = 4,
    row_group: int = 64,
    options: dict[str, str] | None = None,
) -> StateStore:
    """A store of ``n`` jump channels, 4 slot groups, files of several ``row_group``-row row groups."""
    monkeypatch.setattr(files_module, "ROW_GROUP_ROWS", row_group)
    return new_store(root, initial_function(n, "str", SMALL_SLOT_BITS), table, slot_groups=4, options=options)


def data_objects(listing: dict[str, Any]) -> dict[str, Any]:
    return {path: value for path, value in listing.items() if path.startswith("data/")}


def test_a_scale_out_lists_files_under_the_new_channel_and_writes_no_data_file(
    store_url: str, store_options: dict[str, str] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """4 -> 5 with no key named: channel 4 gets no file of its own, only the files of channels 0-3
    listed again, each entry hiding exactly the slots the other one shows. The commit document is
    all the plan writes; the plan back lists every file as it was."""
    table = state_table(3000, "str")
    store = scale_out_store(store_url, monkeypatch, table, options=store_options)
    four, five = initial_function(4, "str", SMALL_SLOT_BITS), initial_function(5, "str", SMALL_SLOT_BITS)
    original = {entry.path: entry for entry in store.all_files()}
    before = object_listing(store)
    result = store.apply(plan_migration(four, five), plan_id=1, region=REGION, from_version=1, to_version=2)
    after = object_listing(store)

    document = f"_log/{store.generation:020d}.json"
    assert sorted(set(after) - set(before)) == [document]
    assert data_objects(after) == data_objects(before)  # no data file written, replaced or deleted
    assert result.written_bytes == after[document][0] > 0
    assert result.rewritten_files == result.relocated_files == 0

    keys = table.column("key").to_pylist()
    old, new = np.array([four.lookup(k) for k in keys]), np.array([five.lookup(k) for k in keys])
    assert result.moved_rows == result.taken_rows == int((old != new).sum()) > 0
    assert set(new[old != new].tolist()) == {4}

    by_path: dict[str, list[FileEntry]] = defaultdict(list)
    for entry in store.all_files():
        by_path[entry.path].append(entry)
    assert set(by_path) == set(original)
    assert store.files(4)
    for entry in store.files(4):
        source = original[entry.path]
        (other,) = [e for e in by_path[entry.path] if e.channel != 4]
        assert other.channel == source.channel and entry.slot_group == source.slot_group
        assert entry.filter is not None and other.filter is not None
        first, last = store.layout.slot_range(entry.slot_group)
        slots = np.arange(first, last + 1)
        assert np.array_equal(entry.filter.hides(slots), ~other.filter.hides(slots))
        assert entry.rows + other.rows == source.rows == entry.file_rows == other.file_rows
        assert (entry.checksum + other.checksum) % 2**64 == source.checksum
        assert (entry.bytes, entry.seq, entry.kind) == (source.bytes, source.seq, "base")
    for channel in range(5):  # what a reader sees, channel by channel: the input routed by b
        expected = table.filter(pa.array(new == channel)).sort_by("key")
        assert store.read_channel(channel).sort_by("key").equals(expected)
    store.verify()

    back = store.apply(plan_migration(five, four), plan_id=2, region=REGION, from_version=2, to_version=3)
    assert set(store.all_files()) == set(original.values())
    assert data_objects(object_listing(store)) == data_objects(before)
    assert back.written_bytes == store.objects.size(f"_log/{store.generation:020d}.json")
    check_oracle(store, table, four, store_options)


def test_a_scale_out_filters_files_and_reads_only_row_groups_with_moved_slots(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = state_table(20_000, "str")
    store = scale_out_store(tmp_path / "s", monkeypatch, table, n=16, row_group=32)
    a, b = initial_function(16, "str", SMALL_SLOT_BITS), initial_function(17, "str", SMALL_SLOT_BITS)
    before = {entry.path: entry for entry in all_files(store)}
    read: list[tuple[str, list[int]]] = []
    original = SourceFile.read

    def recording(source: SourceFile, groups: list[int]) -> Any:
        read.append((source.entry.path, groups))
        return original(source, groups)

    monkeypatch.setattr(SourceFile, "read", recording)
    result = store.apply(plan_migration(a, b), plan_id=1, region=REGION, from_version=1, to_version=2)
    check_oracle(store, table, b)
    keys = table.column("key").to_pylist()
    old, new = a.lookup_many(keys), b.lookup_many(keys)
    groups = slots_of_hashes(hash_keys(keys, "str"), SMALL_SLOT_BITS) >> (SMALL_SLOT_BITS - 2)
    losing_files = {(int(c), int(g)) for c, g in zip(old[old != new], groups[old != new], strict=True)}
    assert result.moved_rows == result.taken_rows == int((old != new).sum()) > 0
    assert result.rewritten_files == result.relocated_files == 0
    assert result.filtered_files == len(losing_files)
    filtered = [entry for entry in all_files(store) if entry.filter is not None and entry.channel < 16]
    assert {(entry.channel, entry.slot_group) for entry in filtered} == losing_files
    for entry in filtered:  # the same file, now with a filter hiding exactly the rows that left
        assert entry.path in before
        assert entry.filter is not None and entry.rows + entry.filter.rows == before[entry.path].rows
    assert {entry.path for entry in store.files(16)} <= set(before)  # listed, not copied
    assert sum(entry.rows for entry in store.files(16)) == int((new == 16).sum())
    moved_slots = set(np.flatnonzero(a.table != b.table).tolist())
    root = store.objects.local_root
    assert root is not None
    total_groups = 0
    for path, indices in read:
        file = pq.ParquetFile(root / path)
        footer, slot = file.metadata, file.schema_arrow.get_field_index("_slot")
        total_groups += footer.num_row_groups
        for index in indices:
            statistics = footer.row_group(index).column(slot).statistics
            assert moved_slots & set(range(statistics.min, statistics.max + 1))
    assert sum(len(indices) for _, indices in read) < total_groups / 3


def test_a_migration_that_misses_a_row_group_is_corrupt_before_the_commit(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The filters are checked against each file's _slot column, not against the row groups the
    migration chose: one row group left unread would hide rows that never moved."""
    table = state_table(20_000, "str")
    store = scale_out_store(tmp_path / "s", monkeypatch, table, n=16, row_group=32)
    a, b = initial_function(16, "str", SMALL_SLOT_BITS), initial_function(17, "str", SMALL_SLOT_BITS)
    original = SourceFile.groups_holding

    def one_short(source: SourceFile, wanted: Any) -> list[int]:
        groups: list[int] = original(source, wanted)
        return groups[1:] if len(groups) > 1 else groups

    monkeypatch.setattr(SourceFile, "groups_holding", one_short)
    generation, log = store.generation, log_documents(store)
    with pytest.raises(
        Corrupt,
        match=r"the filter of the file's entry under channel \d+ hides \d+ of its \d+ rows, but the entry",
    ) as error:
        store.apply(plan_migration(a, b), plan_id=1, region=REGION, from_version=1, to_version=2)
    assert error.value.path is not None and error.value.path.startswith("data/")
    assert log_documents(store) == log
    assert StateStore.open(store.url).generation == generation
    check_oracle(StateStore.open(store.url), table, a)


@pytest.mark.parametrize("key_type", ["str", "int"])
def test_pinned_and_explicit_keys_in_filtered_slots_are_restaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key_type: KeyType
) -> None:
    """A pinned key in a moved slot stays; an explicit key leaves its slot's neighbours behind. Only
    the rows of the slots holding those keys are written again."""
    monkeypatch.setattr(files_module, "ROW_GROUP_ROWS", 64)
    table = state_table(5000, key_type)
    keys = table.column("key").to_pylist()
    slots = slots_of_hashes(hash_keys(keys, key_type), SMALL_SLOT_BITS).tolist()
    crowded = [key for key, slot in zip(keys, slots, strict=True) if slots.count(slot) > 2][:2]
    a = PartitionFunction(
        n_channels=4, key_type=key_type, slot_bits=SMALL_SLOT_BITS, explicit={crowded[0]: 1}
    )
    pinned_slot = slots[keys.index(crowded[0])]
    b = PartitionFunction(
        n_channels=4,
        key_type=key_type,
        slot_bits=SMALL_SLOT_BITS,
        explicit={crowded[0]: 1, crowded[1]: (a.lookup(crowded[1]) + 2) % 4},
        slot_overrides={pinned_slot: (int(a.table[pinned_slot]) + 1) % 4},
    )
    store = new_store(tmp_path / "s", a, table, slot_groups=4)
    old_paths = {entry.path for entry in all_files(store)}
    result = store.apply(plan_migration(a, b), plan_id=1, region=REGION, from_version=1, to_version=2)
    check_oracle(store, table, b)
    assert result.filtered_files >= 1
    assert result.moved_rows == int((a.lookup_many(keys) != b.lookup_many(keys)).sum())
    written = {entry.path: entry for entry in all_files(store) if entry.path not in old_paths}
    named_slots = {pinned_slot, slots[keys.index(crowded[1])]}
    root = store.objects.local_root
    assert written and root is not None
    for path in written:
        assert set(pq.read_table(root / path, columns=["_slot"]).column(0).to_pylist()) <= named_slots
    document = store.objects.size(f"_log/{store.generation:020d}.json")
    assert document is not None
    assert result.written_bytes == sum(entry.bytes for entry in written.values()) + document


@settings(max_examples=15, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    key_type=st.sampled_from(["str", "int"]),
    counts=st.lists(st.integers(1, 6), min_size=2, max_size=5),
    rows=st.integers(0, 1500),
    groups=st.sampled_from([1, 4, 16]),
    data=st.data(),
)
def test_chains_of_plans_on_filtered_files_match_each_target(
    tmp_path_factory: pytest.TempPathFactory,
    monkeypatch: pytest.MonkeyPatch,
    key_type: KeyType,
    counts: list[int],
    rows: int,
    groups: int,
    data: st.DataObject,
) -> None:
    """Plan after plan: filters widen, files are listed under several channels and back, entries are
    dropped; every generation holds exactly the original rows, each on its channel, and reads, verify
    and a fresh open agree."""
    monkeypatch.setattr(files_module, "ROW_GROUP_ROWS", 16)
    table = state_table(rows, key_type, seed=rows)
    keys = table.column("key").to_pylist()

    def function(n: int) -> PartitionFunction:
        explicit = (
            data.draw(st.dictionaries(st.sampled_from(keys), st.integers(0, n - 1), max_size=8))
            if keys
            else {}
        )
        overrides = data.draw(
            st.dictionaries(st.integers(0, 2**SMALL_SLOT_BITS - 1), st.integers(0, n - 1), max_size=80)
        )
        return PartitionFunction(
            n_channels=n,
            key_type=key_type,
            slot_bits=SMALL_SLOT_BITS,
            explicit=explicit,
            slot_overrides=overrides,
        )

    current = function(counts[0])
    store = new_store(tmp_path_factory.mktemp("s"), current, table, slot_groups=groups)
    for step, n in enumerate(counts[1:], start=1):
        target = function(n)
        result = store.apply(
            plan_migration(current, target),
            plan_id=step,
            region=REGION,
            from_version=step,
            to_version=step + 1,
        )
        check_oracle(store, table, target)
        moved = int((current.lookup_many(keys) != target.lookup_many(keys)).sum()) if keys else 0
        assert result.moved_rows == moved
        identities = [entry.identity for entry in store.all_files()]
        assert len(identities) == len(set(identities))  # one entry per file and channel
        current = target
    assert StateStore.open(store.url).read().num_rows == rows


def filtered_store(root: Path, monkeypatch: pytest.MonkeyPatch) -> StateStore:
    """6000 rows taken 4 -> 5 (generation 2): filtered files, each also listed under channel 4."""
    store = scale_out_store(root, monkeypatch, state_table(6000, "str"))
    a, b = initial_function(4, "str", SMALL_SLOT_BITS), initial_function(5, "str", SMALL_SLOT_BITS)
    store.apply(plan_migration(a, b), plan_id=1, region=REGION, from_version=1, to_version=2)
    return store


def first_filtered(document: dict[str, Any]) -> dict[str, Any]:
    return next(entry for entry in document["add"] if "filter" in entry)


def store_attempts(store: StateStore) -> list[Callable[[], object]]:
    """What reads the log first: an open, an apply, a compaction and a vacuum."""
    a, b = initial_function(5, "str", SMALL_SLOT_BITS), initial_function(6, "str", SMALL_SLOT_BITS)
    return [
        lambda: StateStore.open(store.url),
        lambda: store.apply(plan_migration(a, b), plan_id=2, region=REGION, from_version=2, to_version=3),
        lambda: store.compact(),
        lambda: store.vacuum(),
    ]


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (
            lambda d: first_filtered(d).update(slot_group=9),
            r"invalid listing: files\[\d+\]\.slot_group must be an integer in \[0, 3\]",
        ),
        (
            lambda d: first_filtered(d)["filter"].update(slots=[[2000, 2001]]),
            r"invalid listing: files\[\d+\]\.filter\.slots must lie in the entry's slot group",
        ),
        (
            lambda d: d["add"][0].update(channel=7),
            r"invalid listing: files\[\d+\]\.channel must be an integer in \[0, 4\]",
        ),
        (
            lambda d: d["add"].append(d["add"][0]),
            r"the commit adds file data/\w+\.parquet of channel \d twice",
        ),
        (
            lambda d: d["remove"].append([f"data/{'0' * 32}.parquet", 0]),
            r"removes file data/0+\.parquet of channel 0, which is not listed",
        ),
    ],
)
def test_a_commit_that_leaves_an_invalid_listing_is_corrupt_naming_it_and_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: Any, message: str
) -> None:
    """The newest commit document, with a checksum that holds, lists entries that do not fit the
    layout: every operation that reads the log refuses it, naming the document and the field."""
    store = filtered_store(tmp_path / "s", monkeypatch)
    path = rewritten_commit(store, store.generation, change)
    files = object_listing(store)
    for attempt in store_attempts(store):
        with pytest.raises(Corrupt, match=message) as error:
            attempt()
        assert error.value.path == path == "_log/00000000000000000002.json"
    assert object_listing(store) == files


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (
            lambda d: first_filtered(d)["filter"]["slots"].insert(0, [900, 901]),
            r"add\[0\]\.filter\.slots\[1\]",
        ),
        (lambda d: first_filtered(d)["filter"].update(rows=-1), r"add\[0\]\.filter\.rows"),
        (lambda d: first_filtered(d)["filter"].pop("rows"), r"add\[0\]\.filter is missing field"),
        (lambda d: d["add"][0].update(path="data/not-a-uuid.parquet"), r"add\[0\]\.path must be"),
    ],
)
def test_a_malformed_entry_in_a_commit_that_others_build_on_is_corrupt_naming_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: Any, field: str
) -> None:
    """An entry that does not parse in a document whose checksum holds (written whole, not torn): once
    a later commit builds on it, every operation that reads the log refuses the store, naming the
    document and the field, and writes nothing."""
    store = filtered_store(tmp_path / "s", monkeypatch)
    damaged = store.generation
    b = initial_function(5, "str", SMALL_SLOT_BITS)
    store.commit({}, version=2, function_digest=b.digest, n_channels=5, batch=absorbed_batch(1, []))
    path = rewritten_commit(store, damaged, change)
    files = object_listing(store)
    for attempt in store_attempts(store):
        with pytest.raises(Corrupt, match=f"not a valid commit document: {field}") as error:
            attempt()
        assert error.value.path == path == "_log/00000000000000000002.json"
    assert object_listing(store) == files


@pytest.mark.parametrize("seen", [0, -1])
def test_a_filter_that_does_not_match_its_file_is_corrupt_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seen: int
) -> None:
    """The entry's filter claims one more hidden row: with as many seen rows (the file's row count is
    off: apply refuses it) or one fewer (the count is right, the split is not: reads refuse it)."""
    store = filtered_store(tmp_path / "s", monkeypatch)
    victim = next(entry for entry in store.files(0) if entry.filter is not None)

    def shift(document: dict[str, Any]) -> None:
        entry = next(e for e in document["add"] if (e["path"], e["channel"]) == victim.identity)
        entry["filter"]["rows"] += 1
        entry["rows"] += seen

    rewritten_commit(store, store.generation, shift)
    store = StateStore.open(store.url)
    damaged = store.damaged_files()
    assert [error.path for error in damaged] == [victim.path] and "its filter hides" in str(damaged[0])
    files = object_listing(store)
    if seen == 0:
        a, b = initial_function(5, "str", SMALL_SLOT_BITS), initial_function(6, "str", SMALL_SLOT_BITS)
        with pytest.raises(
            Corrupt, match="state file does not match its generation entry: it holds"
        ) as error:
            store.apply(plan_migration(a, b), plan_id=2, region=REGION, from_version=2, to_version=3)
    else:
        with pytest.raises(Corrupt, match=r"holds \d+ rows its generation entry lets through") as error:
            store.read_channel(0)
    assert error.value.path == victim.path
    assert object_listing(store) == files


def test_commit_refuses_entries_with_a_filter_or_a_seq(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = filtered_store(tmp_path / "s", monkeypatch)
    b = initial_function(5, "str", SMALL_SLOT_BITS)
    filtered = [entry for entry in store.files(1) if entry.filter is not None]
    listed = [entry for entry in store.files(1) if entry.filter is None or entry.seq]
    log = log_documents(store)
    for entries in (filtered, listed):
        with pytest.raises(
            InvalidInput, match=r"added\[1\] must list files as write returns them, without a filter or seq"
        ) as error:
            store.commit({1: entries}, version=2, function_digest=b.digest, n_channels=5)
        assert error.value.field == "added[1]"
    assert log_documents(store) == log


@pytest.mark.parametrize("format_version", [1, 2])
def test_a_format_1_or_2_store_opens_and_its_first_apply_upgrades_it_without_copying(
    tmp_path: Path, format_version: int
) -> None:
    table = state_table(2000, "str")
    a, b = initial_function(3, "str", SMALL_SLOT_BITS), initial_function(4, "str", SMALL_SLOT_BITS)
    root = legacy_store(tmp_path / "s", a, table, format_version=format_version, batch_id=5)
    old = StateStore.open(root)
    assert old.format == 2 and old.version == 1 and old.last_batch is not None
    check_oracle(old, table, a)
    paths = {entry.path for entry in old.all_files()}
    assert all(path.startswith("channel=") for path in paths)
    old.apply(plan_migration(a, b), plan_id=1, region=REGION, from_version=1, to_version=2)
    upgraded = StateStore.open(root)
    check_oracle(upgraded, table, b)
    assert upgraded.format == 3 and upgraded.version == 2 and upgraded.applied_plans == (1,)
    assert upgraded.absorbed(5) and not upgraded.absorbed(6)  # the batch record carried over
    assert {entry.path for entry in upgraded.all_files()} == paths  # listed again, none copied
    assert upgraded.objects.listing("data/") == []  # a scale-out without named keys writes no data


def test_a_written_file_has_row_groups_sorted_by_slot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files_module, "ROW_GROUP_ROWS", 100)
    table = state_table(1000, "int")
    store = empty_store(
        tmp_path / "s", initial_function(1, "int", SMALL_SLOT_BITS), table.schema, slot_groups=1
    )
    (entry,) = store.write(0, table, kind="base")
    root = store.objects.local_root
    assert root is not None
    file = pq.ParquetFile(root / entry.path)
    footer = file.metadata
    assert footer.num_row_groups == 10 and entry.rows == 1000
    slot = file.schema_arrow.get_field_index("_slot")
    statistics = [footer.row_group(i).column(slot).statistics for i in range(10)]
    ranges = [(each.min, each.max) for each in statistics]
    assert all(low <= high for low, high in ranges) and all(
        ranges[i][1] <= ranges[i + 1][0] for i in range(9)
    )
    expected = slots_of_hashes(hash_keys(table.column("key").to_pylist(), "int"), SMALL_SLOT_BITS)
    assert file.read(columns=["_slot"]).column(0).to_pylist() == sorted(expected.tolist())


@pytest.mark.parametrize(("method", "most", "least"), [("prefix", 1.3, 1.0), ("jump", None, 2.0)])
def test_a_scale_out_reads_the_new_channel_in_runs_under_prefix_and_scattered_under_jump(
    tmp_path: Path, method: ConsistentMethod, most: float | None, least: float
) -> None:
    """4 -> 5 channels, 100,000 keys over 1,024 slots (about 100 rows a slot), 1,024-row row groups.
    Under prefix every channel gives its lowest slots: each file loses one run of slots and the new
    channel reads about what a fresh store's channel 4 reads (1.13 times, the four footers included);
    under jump its slots are scattered over the row groups of every file, and it reads 4.9 times that."""
    spec = ConsistentSpec(method)
    a = initial_function(4, "str", SMALL_SLOT_BITS, spec)
    b = initial_function(5, "str", SMALL_SLOT_BITS, spec)
    table = state_table(100_000, "str")
    store = new_store(tmp_path / "s", a, table, slot_groups=1)
    files = {entry.path for entry in all_files(store)}
    result = store.apply(plan_migration(a, b), plan_id=1, region=REGION, from_version=1, to_version=2)
    check_oracle(store, table, b)
    # every moved row stays in its file, listed under channel 4 too
    assert result.rewritten_files == 0 and {entry.path for entry in all_files(store)} == files
    fresh = new_store(tmp_path / "fresh", b, table, slot_groups=1)
    ratio = store.read_bytes(4) / fresh.read_bytes(4)
    filters = [entry.filter for entry in all_files(store) if entry.filter is not None and entry.channel != 4]
    assert len(filters) == 4
    if most is not None:
        assert all(len(kept.runs) == 1 for kept in filters)
        assert least <= ratio <= most, ratio
    else:
        assert any(len(kept.runs) > 1 for kept in filters)
        assert ratio >= least, ratio
