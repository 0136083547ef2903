"""Slot filters (``repart.state.filters``) and migrations that filter files instead of rewriting them.

Oracles: ``np.isin`` over the hidden slots for a filter; for a migration, the target function itself
(every row on ``b.lookup(key)``, the same rows as before: ``check_oracle``), the rows that change
channel counted from the two functions, and the Parquet footer for which row groups hold which slots.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import repart.state.files as files_module
from repart.errors import Corrupt, InvalidInput
from repart.migration import plan_migration
from repart.partitioning import PartitionFunction, initial_function
from repart.partitioning.documents import canonical_json, sha256_hex
from repart.partitioning.domain import KeyType
from repart.partitioning.hashing import hash_keys, slots_of_hashes
from repart.state.filters import SlotFilter
from repart.state.partial import SourceFile
from repart.state.store import StateStore, write_channel_files
from tests.factories import REGION, SMALL_SLOT_BITS, all_files, check_oracle, new_store, state_table


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
    with pytest.raises(InvalidInput, match=message):
        SlotFilter.from_dict(document, "f")


def scale_out_store(
    root: Path, monkeypatch: pytest.MonkeyPatch, table: pa.Table, n: int = 4, row_group: int = 64
) -> StateStore:
    """A store of ``n`` jump channels, 4 slot groups, files of several ``row_group``-row row groups."""
    monkeypatch.setattr(files_module, "ROW_GROUP_ROWS", row_group)
    return new_store(root, initial_function(n, "str", SMALL_SLOT_BITS), table, slot_groups=4)


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
    filtered = [entry for entry in all_files(store) if entry.filter is not None]
    assert {(entry.channel, entry.slot_group) for entry in filtered} == losing_files
    for entry in filtered:  # the same file, now with a filter hiding exactly the rows that left
        assert entry.path in before
        assert entry.filter is not None and entry.rows + entry.filter.rows == before[entry.path].rows
    moved_slots = set(np.flatnonzero(a.table != b.table).tolist())
    total_groups = 0
    for path, indices in read:
        footer = pq.ParquetFile(store.root / path).metadata
        total_groups += footer.num_row_groups
        for index in indices:
            statistics = footer.row_group(index).column(footer.num_columns - 1).statistics
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
    generation = store.generation
    with pytest.raises(Corrupt, match="filter hides"):
        store.apply(plan_migration(a, b), plan_id=1, region=REGION, from_version=1, to_version=2)
    assert StateStore.open(store.root).generation == generation
    check_oracle(StateStore.open(store.root), table, a)


@pytest.mark.parametrize("key_type", ["str", "int"])
def test_pinned_and_explicit_keys_in_filtered_slots_are_restaged(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, key_type: KeyType
) -> None:
    """A pinned key in a moved slot stays; an explicit key leaves its slot's neighbours behind."""
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
    result = store.apply(plan_migration(a, b), plan_id=1, region=REGION, from_version=1, to_version=2)
    check_oracle(store, table, b)
    assert result.filtered_files >= 1
    assert result.moved_rows == int((a.lookup_many(keys) != b.lookup_many(keys)).sum())


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
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
    """Plan after plan: filters widen, filtered files are relocated and dropped; every generation
    holds exactly the original rows, each on its channel, and reads, verify and a fresh open agree."""
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
        current = target
    assert StateStore.open(store.root).read().num_rows == rows


def tamper(store: StateStore, change: Any) -> Path:
    """Apply ``change`` to the current generation document and fix the manifest's digest, so that only
    the document's content is wrong (as a buggy writer would leave it)."""
    number = store.generation
    path = store.root / "generations" / f"{number:08d}.json"
    document = json.loads(path.read_text())
    change(document)
    text = canonical_json(document)
    path.write_text(text)
    manifest = store.root / "MANIFEST"
    body = json.loads(manifest.read_text())
    body["sha256"] = sha256_hex(text)
    manifest.write_text(canonical_json(body))
    return path


def listing(root: Path) -> dict[str, float]:
    return {str(p.relative_to(root)): p.stat().st_mtime for p in root.rglob("*") if p.name != ".lock"}


def filtered_store(root: Path, monkeypatch: pytest.MonkeyPatch) -> StateStore:
    store = scale_out_store(root, monkeypatch, state_table(6000, "str"))
    a, b = initial_function(4, "str", SMALL_SLOT_BITS), initial_function(5, "str", SMALL_SLOT_BITS)
    store.apply(plan_migration(a, b), plan_id=1, region=REGION, from_version=1, to_version=2)
    return store


def first_filtered(document: dict[str, Any]) -> dict[str, Any]:
    return next(entry for entry in document["files"] if "filter" in entry)


@pytest.mark.parametrize(
    ("change", "field"),
    [
        (
            lambda d: first_filtered(d)["filter"]["slots"].insert(0, [900, 901]),
            r"files\[\d+\]\.filter\.slots\[1\]",
        ),
        (lambda d: first_filtered(d)["filter"].update(rows=-1), r"files\[\d+\]\.filter\.rows"),
        (
            lambda d: first_filtered(d)["filter"].update(slots=[[2000, 2001]]),
            r"files\[\d+\]\.filter\.slots must",
        ),
        (lambda d: first_filtered(d)["filter"].pop("rows"), r"files\[\d+\]\.filter is missing field"),
        (
            lambda d: first_filtered(d).update(slot_group=9),
            r"files\[\d+\]\.slot_group must be an integer in \[0, 3\]",
        ),
        (
            lambda d: d["files"][0].update(channel=7, path="channel=7/" + d["files"][0]["path"][10:]),
            r"files\[0\]\.channel must be an integer in \[0, 4\]",
        ),
        (lambda d: d["files"].append(d["files"][0]), "files must list each file once"),
    ],
)
def test_a_corrupt_filter_or_entry_is_corrupt_naming_the_generation_and_nothing_is_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, change: Any, field: str
) -> None:
    store = filtered_store(tmp_path / "s", monkeypatch)
    path = tamper(store, change)
    files = listing(store.root)
    a, b = initial_function(5, "str", SMALL_SLOT_BITS), initial_function(6, "str", SMALL_SLOT_BITS)
    attempts: list[Callable[[], object]] = [
        lambda: StateStore.open(store.root),
        lambda: store.apply(plan_migration(a, b), plan_id=2, region=REGION, from_version=2, to_version=3),
        lambda: store.compact(max_filtered_share=0),
        lambda: store.commit({}, version=2, function_digest=a.digest, n_channels=5),
        lambda: store.vacuum(),
    ]
    for attempt in attempts:
        with pytest.raises(Corrupt, match=f"not a valid generation document: {field}") as error:
            attempt()
        assert error.value.path == str(path)
    assert listing(store.root) == files


@pytest.mark.parametrize("seen", [0, -1])
def test_a_filter_that_does_not_match_its_file_is_corrupt_naming_the_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, seen: int
) -> None:
    """The entry's filter claims one more hidden row: with as many seen rows (the file's row count is
    off: apply refuses it) or one fewer (the count is right, the split is not: reads refuse it)."""
    store = filtered_store(tmp_path / "s", monkeypatch)
    victim = next(entry for entry in all_files(store) if entry.filter is not None and entry.channel == 0)

    def shift(document: dict[str, Any]) -> None:
        entry = next(e for e in document["files"] if e["path"] == victim.path)
        entry["filter"]["rows"] += 1
        entry["rows"] += seen

    tamper(store, shift)
    store = StateStore.open(store.root)
    path = str(store.root / victim.path)
    damaged = store.damaged_files()
    assert [error.path for error in damaged] == [path] and "its filter hides" in str(damaged[0])
    files = listing(store.root)
    if seen == 0:
        a, b = initial_function(5, "str", SMALL_SLOT_BITS), initial_function(6, "str", SMALL_SLOT_BITS)
        with pytest.raises(
            Corrupt, match="state file does not match its generation entry: it holds"
        ) as error:
            store.apply(plan_migration(a, b), plan_id=2, region=REGION, from_version=2, to_version=3)
    else:
        with pytest.raises(Corrupt, match=r"holds \d+ rows its generation entry lets through") as error:
            store.read_channel(0)
    assert error.value.path == path
    assert listing(store.root) == files


def test_commit_refuses_entries_with_a_filter(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    store = filtered_store(tmp_path / "s", monkeypatch)
    entries = [entry for entry in store.files(1) if entry.filter is not None]
    b = initial_function(5, "str", SMALL_SLOT_BITS)
    with pytest.raises(
        InvalidInput, match=r"replaced\[1\] must list files as write_channel_files returns them"
    ):
        store.commit({1: entries}, version=2, function_digest=b.digest, n_channels=5)


def test_a_format_1_store_opens_and_its_next_generation_is_format_2(tmp_path: Path) -> None:
    table = state_table(2000, "str")
    a, b = initial_function(3, "str", SMALL_SLOT_BITS), initial_function(4, "str", SMALL_SLOT_BITS)
    store = new_store(tmp_path / "s", a, table)

    def downgrade(document: dict[str, Any]) -> None:
        document["format"] = 1

    tamper(store, downgrade)
    manifest = store.root / "MANIFEST"
    manifest.write_text(manifest.read_text().replace('"format":2', '"format":1'))
    old = StateStore.open(store.root)
    check_oracle(old, table, a)
    old.apply(plan_migration(a, b), plan_id=1, region=REGION, from_version=1, to_version=2)
    check_oracle(StateStore.open(store.root), table, b)
    assert json.loads(manifest.read_text())["format"] == 2
    assert json.loads((store.root / "generations" / "00000002.json").read_text())["format"] == 2


def test_write_channel_files_writes_row_groups_sorted_by_slot(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(files_module, "ROW_GROUP_ROWS", 100)
    entries = write_channel_files(
        tmp_path,
        0,
        state_table(1000, "int"),
        key_col="key",
        key_type="int",
        slot_bits=SMALL_SLOT_BITS,
        slot_groups=1,
    )
    footer = pq.ParquetFile(tmp_path / entries[0].path).metadata
    assert footer.num_row_groups == 10
    slot = footer.num_columns - 1
    statistics = [footer.row_group(i).column(slot).statistics for i in range(10)]
    ranges = [(each.min, each.max) for each in statistics]
    assert all(low <= high for low, high in ranges) and all(
        ranges[i][1] <= ranges[i + 1][0] for i in range(9)
    )
