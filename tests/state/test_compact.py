"""Compaction (``StateStore.compact``, ``repart.state.compact``), checked against independent oracles:
the content (every row, sorted) and each row's channel (``check_oracle``), the Parquet files on disk,
and a policy written out from its definition."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from repart.errors import Conflict, Corrupt, InvalidInput
from repart.partitioning import initial_function
from repart.state.compact import DEFAULT_MAX_FILES_PER_GROUP, DEFAULT_MAX_FILTERED_SHARE, CompactionPolicy
from repart.state.filters import SlotFilter
from repart.state.store import FileEntry, StateStore, write_channel_files
from tests.factories import (
    SMALL_SLOT_BITS,
    all_files,
    check_oracle,
    churned_store,
    new_store,
    state_table,
)

ROWS = 6000


def listing(root: Path) -> dict[str, float]:
    return {str(p.relative_to(root)): p.stat().st_mtime for p in root.rglob("*") if p.name != ".lock"}


def test_compaction_leaves_one_unfiltered_file_per_slot_group_with_the_same_content(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = churned_store(tmp_path / "s", ROWS, monkeypatch)
    table, four = state_table(ROWS, "str"), initial_function(4, "str", SMALL_SLOT_BITS)
    before = all_files(store)
    checksum, generation = store.checksum(), store.generation
    result = store.compact()
    assert result.compacted and result.generation == generation + 1 == store.generation
    check_oracle(store, table, four)
    after = all_files(store)
    pairs = [(entry.channel, entry.slot_group) for entry in after]
    assert len(pairs) == len(set(pairs)) and all(entry.filter is None for entry in after)
    assert store.checksum() == checksum
    assert (result.files_before, result.files_after) == (len(before), len(after))
    assert result.dropped_rows == sum(entry.hidden_rows for entry in before)
    assert result.replaced_files == len({e.path for e in before} - {e.path for e in after})
    assert result.written_files == len({e.path for e in after} - {e.path for e in before})
    assert result.channels == tuple(range(4))
    on_disk = {path.relative_to(store.root).as_posix() for path in store.root.glob("channel=*/*")}
    store.vacuum(keep_generations=1)
    assert {entry.path for entry in after} <= on_disk
    check_oracle(StateStore.open(store.root), table, four)


def test_nothing_due_writes_nothing(tmp_path: Path) -> None:
    store = new_store(tmp_path / "s", initial_function(3, "str", SMALL_SLOT_BITS), state_table(500, "str"))
    files = listing(store.root)
    result = store.compact()
    assert not result.compacted and result.channels == () and result.generation == store.generation == 1
    assert result.files_before == result.files_after == len(all_files(store))
    assert listing(store.root) == files


def entry(channel: int, group: int, rows: int, hidden: int = 0) -> FileEntry:
    runs = SlotFilter(((0, 0),), hidden) if hidden else None
    return FileEntry(f"channel={channel}/{'0' * 32}.parquet", channel, group, rows, 100, 0, runs)


@settings(max_examples=200, deadline=None)
@given(
    files=st.lists(
        st.tuples(st.integers(0, 3), st.integers(0, 7), st.integers(1, 100), st.integers(0, 100)), max_size=30
    ),
    share=st.floats(0, 1, exclude_max=True),
    per_group=st.floats(1, 4),
)
def test_a_channel_is_due_past_either_threshold(
    files: list[tuple[int, int, int, int]], share: float, per_group: float
) -> None:
    entries = [entry(*row) for row in files]
    expected = []
    for channel in range(4):
        mine = [row for row in files if row[0] == channel]
        if not mine:
            continue
        hidden, total = sum(row[3] for row in mine), sum(row[2] + row[3] for row in mine)
        if hidden > share * total or len(mine) > per_group * len({row[1] for row in mine}):
            expected.append(channel)
    assert CompactionPolicy(share, per_group).due(entries) == expected


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        ({"max_filtered_share": 1.0}, r"max_filtered_share must be a number in \[0, 1\), got 1.0"),
        ({"max_filtered_share": -0.1}, r"max_filtered_share must be a number in \[0, 1\)"),
        ({"max_filtered_share": float("nan")}, r"max_filtered_share must be a number in \[0, 1\)"),
        ({"max_filtered_share": "0.1"}, r"max_filtered_share must be a number in \[0, 1\), got '0.1'"),
        ({"max_files_per_group": 0.5}, r"max_files_per_group must be a number in \[1, 1024\], got 0.5"),
        ({"max_files_per_group": 2000}, r"max_files_per_group must be a number in \[1, 1024\]"),
    ],
)
def test_thresholds_out_of_range_name_the_field(
    tmp_path: Path, arguments: dict[str, Any], message: str
) -> None:
    store = new_store(tmp_path / "s", initial_function(2, "str", SMALL_SLOT_BITS), state_table(100, "str"))
    files = listing(store.root)
    with pytest.raises(InvalidInput, match=message):
        store.compact(**arguments)
    assert listing(store.root) == files
    assert CompactionPolicy() == CompactionPolicy(DEFAULT_MAX_FILTERED_SHARE, DEFAULT_MAX_FILES_PER_GROUP)


HOLD_LOCK = """
import fcntl, sys, time
with open(sys.argv[1], "a") as lock:
    fcntl.flock(lock, fcntl.LOCK_EX)
    print("locked", flush=True)
    sys.stdin.readline()
"""


def test_compaction_is_refused_while_another_process_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = churned_store(tmp_path / "s", ROWS, monkeypatch)
    files = listing(store.root)
    writer = subprocess.Popen(
        [sys.executable, "-c", HOLD_LOCK, str(store.root / ".lock")],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert writer.stdout is not None and writer.stdout.readline() == "locked\n"
        with pytest.raises(Conflict, match=r"another process is writing the state store at .*; try again"):
            store.compact()
        assert listing(store.root) == files
    finally:
        assert writer.stdin is not None
        writer.stdin.write("\n")
        writer.stdin.close()
        writer.wait()
    assert store.compact().compacted


def test_a_damaged_file_stops_compaction_with_nothing_committed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = churned_store(tmp_path / "s", ROWS, monkeypatch)
    victim = next(entry for entry in all_files(store) if entry.filter is not None)
    path = store.root / victim.path
    path.write_bytes(path.read_bytes()[:-40])
    manifest = (store.root / "MANIFEST").read_text()
    with pytest.raises(Corrupt, match="Parquet magic bytes") as error:
        store.compact()
    assert error.value.path == str(path)
    assert (store.root / "MANIFEST").read_text() == manifest


def test_a_commit_goes_ahead_over_a_compaction_but_not_over_a_change(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A job's handle read generation G; a compaction (same state) moved the store on: its commit
    replaces whole channels, so it goes ahead. After a commit that changed a channel it is refused."""
    store = churned_store(tmp_path / "s", ROWS, monkeypatch)
    four = initial_function(4, "str", SMALL_SLOT_BITS)
    job = StateStore.open(store.root)
    new_state = job.read_channel(2).slice(0, 10)
    entries = write_channel_files(
        store.root, 2, new_state, key_col="key", key_type="str", slot_bits=SMALL_SLOT_BITS, slot_groups=4
    )
    assert StateStore.open(store.root).compact().compacted
    job.commit({2: entries}, version=3, function_digest=four.digest, n_channels=4)
    reopened = StateStore.open(store.root)
    assert reopened.read_channel(2).sort_by("key").equals(new_state.sort_by("key"))
    assert reopened.read_channel(1).num_rows == store.read_channel(1).num_rows
    stale = StateStore.open(store.root)
    reopened.commit({1: []}, version=3, function_digest=four.digest, n_channels=4)
    with pytest.raises(Conflict, match="moved on to generation"):
        stale.commit({2: []}, version=3, function_digest=four.digest, n_channels=4)
