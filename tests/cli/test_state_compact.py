"""``repart state compact``: exit 0 compacting or not, 2 for a bad threshold or no store, 3 while
another process writes, 4 on a damaged file; the store's content unchanged."""

from __future__ import annotations

import fcntl
import inspect
import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from repart.cli.app import app
from repart.cli.state import compact
from repart.partitioning import initial_function
from repart.state.compact import DEFAULT_MAX_FILES_PER_GROUP, DEFAULT_MAX_FILTERED_SHARE
from repart.state.store import StateStore
from tests.factories import SMALL_SLOT_BITS, check_oracle, churned_store, new_store, state_table


def run(root: Path, *options: str) -> tuple[int, str, str]:
    outcome = CliRunner().invoke(app, ["state", "compact", "--state", str(root), *options])
    return outcome.exit_code, outcome.stdout, outcome.stderr


def test_compact_rewrites_due_channels_then_finds_none_due(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = churned_store(tmp_path / "s", 3000, monkeypatch)
    files = sum(len(store.files(channel)) for channel in range(4))
    code, out, _ = run(store.root, "--json")
    report = json.loads(out)
    assert code == 0 and report["compacted"] and report["channels"] == [0, 1, 2, 3]
    assert report["files_before"] == files and report["files_after"] < files
    assert report["generation"] == 4 and report["dropped_rows"] > 0
    check_oracle(
        StateStore.open(store.root), state_table(3000, "str"), initial_function(4, "str", SMALL_SLOT_BITS)
    )
    code, out, _ = run(store.root)
    assert code == 0 and "no channel is due for compaction" in out
    assert StateStore.open(store.root).generation == 4


def test_compact_names_a_bad_threshold_or_a_missing_store(tmp_path: Path) -> None:
    store = new_store(tmp_path / "s", initial_function(2, "str", SMALL_SLOT_BITS), state_table(100, "str"))
    code, _, err = run(store.root, "--max-filtered-share", "1.5")
    assert code == 2 and "--max-filtered-share must be a number in [0, 1), got 1.5" in err
    code, _, err = run(store.root, "--max-files-per-group", "0")
    assert code == 2 and "--max-files-per-group must be a number in [1, 1024], got 0.0" in err
    code, _, err = run(tmp_path / "nothing")
    assert code == 2 and "no state store at" in err


def test_compact_exits_3_while_another_process_writes_and_4_on_damage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = churned_store(tmp_path / "s", 3000, monkeypatch)
    with open(store.root / ".lock", "a") as lock:  # another open file description: flock conflicts
        fcntl.flock(lock, fcntl.LOCK_EX)
        code, _, err = run(store.root)
    assert code == 3 and "another process is writing the state store" in err
    victim = store.root / store.files(0)[0].path
    victim.write_bytes(victim.read_bytes()[:-30])
    code, _, err = run(store.root)
    assert code == 4 and str(victim) in err


def test_the_command_defaults_are_the_stores() -> None:
    parameters = inspect.signature(compact).parameters
    assert parameters["max_filtered_share"].default == DEFAULT_MAX_FILTERED_SHARE
    assert parameters["max_files_per_group"].default == DEFAULT_MAX_FILES_PER_GROUP
