"""``repart state compact|vacuum|upgrade``: exit 0 whether or not there was work, 2 for a bad option or
no store, 3 when another writer's commit overlaps (compact), 4 on a damaged file; the store's content
unchanged throughout."""

from __future__ import annotations

import inspect
import json
import os
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest
from typer.testing import CliRunner

import repart.state.store as store_module
from repart.cli.app import app
from repart.cli.state import compact
from repart.partitioning import initial_function
from repart.state.compact import (
    DEFAULT_MAX_DELTA_FILES,
    DEFAULT_MAX_DELTA_SHARE,
    DEFAULT_MAX_FILES_PER_GROUP,
    DEFAULT_MAX_FILTERED_SHARE,
    compact_files,
)
from repart.state.store import StateStore
from tests.factories import (
    CHURNED_FUNCTION,
    SMALL_SLOT_BITS,
    all_files,
    check_oracle,
    churned_store,
    legacy_store,
    log_documents,
    new_store,
    object_listing,
    state_table,
)

FOUR = CHURNED_FUNCTION


def run(command: str, location: Path | str, *options: str) -> tuple[int, str, str]:
    outcome = CliRunner().invoke(app, ["state", command, "--state", str(location), *options])
    return outcome.exit_code, outcome.stdout, outcome.stderr


def flat(text: str) -> str:
    """``text`` with its whitespace runs as single spaces (the console wraps long lines)."""
    return " ".join(text.split())


# --- compact ------------------------------------------------------------------------------------


def test_compact_rewrites_due_channels_then_finds_none_due(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = churned_store(tmp_path / "s", 3000, monkeypatch)
    files = len(all_files(store))
    code, out, _ = run("compact", store.url, "--json")
    report = json.loads(out)
    assert code == 0 and report["compacted"] and report["channels"] == [0, 1, 2, 3]
    assert report["files_before"] == files and report["files_after"] == report["written_files"] < files
    assert report["replaced_files"] == files and report["generation"] == 4 and report["dropped_rows"] > 0
    check_oracle(StateStore.open(store.url), state_table(3000, "str"), FOUR)
    code, out, _ = run("compact", store.url)
    assert code == 0 and "no channel is due for compaction" in flat(out)
    assert StateStore.open(store.url).generation == 4


def test_compact_folds_deltas_as_its_thresholds_say(tmp_path: Path) -> None:
    table = state_table(400, "str")
    store = new_store(tmp_path / "s", FOUR, table, slot_groups=4)
    channels = FOUR.lookup_many(table.column("key").to_pylist())
    mine = table.filter(pa.array(channels == 1)).slice(0, 5)
    for _ in range(2):
        store.commit({1: store.write(1, mine)}, version=1, function_digest=FOUR.digest, n_channels=4)
    code, out, _ = run("compact", store.url, "--json")  # 10 delta rows, 2 deltas: not due by default
    assert code == 0 and not json.loads(out)["compacted"]
    code, out, _ = run("compact", store.url, "--max-delta-files", "1")
    assert code == 0 and "compacted 1 channels into generation 4" in flat(out)
    reopened = StateStore.open(store.url)
    assert [entry.kind for entry in reopened.all_files()].count("delta") == 0
    check_oracle(reopened, table, FOUR)


def test_compact_names_a_bad_threshold_or_a_missing_store(tmp_path: Path) -> None:
    store = new_store(tmp_path / "s", initial_function(2, "str", SMALL_SLOT_BITS), state_table(100, "str"))
    files = object_listing(store)
    for option, value, message in [
        ("--max-filtered-share", "1.5", "--max-filtered-share must be a number in [0, 1), got 1.5"),
        ("--max-files-per-group", "0", "--max-files-per-group must be a number in [1, 1024], got 0.0"),
        ("--max-delta-share", "-1", "--max-delta-share must be a number in [0, 1000], got -1.0"),
        ("--max-delta-files", "0", "--max-delta-files must be an integer in [1, 100000], got 0"),
    ]:
        code, _, err = run("compact", store.url, option, value)
        assert code == 2 and message in flat(err), err
    assert object_listing(store) == files
    code, _, err = run("compact", tmp_path / "nothing")
    assert code == 2 and "no state store at" in err


def test_compact_exits_3_when_another_compaction_commits_first_and_4_on_damage(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = churned_store(tmp_path / "s", 3000, monkeypatch)
    original = compact_files
    raced: list[bool] = []

    def racing(*args: Any, **kwargs: Any) -> Any:
        compaction = original(*args, **kwargs)
        if not raced:  # once: another writer compacts the same channels and commits first
            raced.append(True)
            StateStore.open(store.url).compact()
        return compaction

    monkeypatch.setattr(store_module, "compact_files", racing)
    code, _, err = run("compact", store.url)
    assert code == 3 and "moved on to generation 4 through a compact that removed file" in flat(err)
    assert StateStore.open(store.url).generation == 4
    monkeypatch.setattr(store_module, "compact_files", original)

    damaged = churned_store(tmp_path / "d", 3000, monkeypatch)
    victim = damaged.files(0)[0]
    damaged.objects.write(victim.path, damaged.objects.read(victim.path)[:-30])
    log = log_documents(damaged)
    code, _, err = run("compact", damaged.url)
    assert code == 4 and f"error: {victim.path}: state file cannot be read" in flat(err)
    assert log_documents(damaged) == log


def test_the_command_defaults_are_the_stores() -> None:
    parameters = inspect.signature(compact).parameters
    assert parameters["max_filtered_share"].default == DEFAULT_MAX_FILTERED_SHARE
    assert parameters["max_files_per_group"].default == DEFAULT_MAX_FILES_PER_GROUP
    assert parameters["max_delta_share"].default == DEFAULT_MAX_DELTA_SHARE
    assert parameters["max_delta_files"].default == DEFAULT_MAX_DELTA_FILES


# --- vacuum -------------------------------------------------------------------------------------


def test_vacuum_deletes_only_what_is_older_than_retain_and_unlisted(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store = churned_store(tmp_path / "s", 1500, monkeypatch)
    store.compact()
    (orphan,) = store.write(0, state_table(3, "str"), kind="delta")  # a file no commit lists
    everything = object_listing(store)
    listed = {entry.path for entry in store.all_files()}
    unlisted = sorted(path for path in everything if path.startswith("data/") and path not in listed)
    assert orphan.path in unlisted

    code, out, _ = run("vacuum", store.url, "--json")  # the default retention: one hour
    report = json.loads(out)
    assert code == 0 and report == {
        "state": store.url,
        "deleted": [],
        "kept_objects": len(everything),
        "retain_seconds": 3600.0,
    }
    assert object_listing(store) == everything

    code, out, _ = run("vacuum", store.url, "--retain", "0s", "--json")
    report = json.loads(out)
    assert code == 0 and report["deleted"] == unlisted and report["retain_seconds"] == 0.0
    assert report["kept_objects"] == len(everything) - len(unlisted)
    assert set(object_listing(store)) == set(everything) - set(unlisted)
    check_oracle(StateStore.open(store.url), state_table(1500, "str"), FOUR)
    code, out, _ = run("vacuum", store.url, "--retain", "0s")
    assert code == 0 and f"deleted 0 objects, kept {len(everything) - len(unlisted)}" in flat(out)


@pytest.mark.parametrize("retain", ["2x", "-1h", "3651d", "h", ""])
def test_vacuum_names_a_bad_retain_with_exit_2(tmp_path: Path, retain: str) -> None:
    store = new_store(tmp_path / "s", initial_function(2, "str", SMALL_SLOT_BITS), state_table(50, "str"))
    files = object_listing(store)
    code, _, err = run("vacuum", store.url, "--retain", retain)
    assert code == 2
    assert flat(err).startswith(
        f"error: --retain must be a duration from 0s to 3650d such as 90s, 30m, 2h or 7d, got {retain!r}"
    )
    assert object_listing(store) == files


def test_vacuum_keeps_what_a_recent_generation_lists(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """``--retain 2h`` a moment after a compaction: a reader may still be on the generation before it,
    so the files it replaced are kept, though they are a day old; a day-old file that no generation
    lists goes."""
    store = churned_store(tmp_path / "s", 1500, monkeypatch)
    replaced = {entry.path for entry in store.all_files()}
    store.compact()
    replaced -= {entry.path for entry in store.all_files()}
    (orphan,) = store.write(0, state_table(3, "str"), kind="delta")
    root = store.objects.local_root
    assert root is not None and replaced
    old = (datetime.now(UTC) - timedelta(days=1)).timestamp()
    recent = {f"_log/{store.generation:020d}.json", "_log/_hint.json"}
    for path in set(object_listing(store)) - recent:  # all a day old but the compaction's commit
        os.utime(root / path, (old, old))
    code, out, _ = run("vacuum", store.url, "--retain", "2h", "--json")
    assert code == 0 and json.loads(out)["deleted"] == [orphan.path]
    assert replaced <= set(object_listing(store))


# --- upgrade ------------------------------------------------------------------------------------


def test_upgrade_lists_a_format_2_store_in_a_commit_log_once(tmp_path: Path) -> None:
    table = state_table(800, "str")
    three = initial_function(3, "str", SMALL_SLOT_BITS)
    root = legacy_store(tmp_path / "s", three, table, batch_id=9, applied_plan=(4, "ab" * 32))
    paths = {entry.path for entry in StateStore.open(root).all_files()}
    code, out, _ = run("upgrade", root, "--json")
    report = json.loads(out)
    assert code == 0 and report["upgraded"] and report["format"] == 3 and report["state"] == str(root)
    upgraded = StateStore.open(root)
    assert upgraded.format == 3 and report["generation"] == upgraded.generation
    assert {entry.path for entry in upgraded.all_files()} == paths  # listed as they are, none copied
    assert upgraded.objects.listing("data/") == []
    assert upgraded.absorbed(9) and upgraded.applied_plans == (4,) and upgraded.version == 1
    check_oracle(upgraded, table, three)
    log = log_documents(upgraded)
    code, out, _ = run("upgrade", root)
    assert code == 0 and "is format 3 already" in flat(out)
    assert log_documents(upgraded) == log


def test_upgrade_refuses_a_damaged_store_and_a_missing_one(tmp_path: Path) -> None:
    table = state_table(300, "str")
    root = legacy_store(tmp_path / "s", initial_function(2, "str", SMALL_SLOT_BITS), table)
    victim = StateStore.open(root).files(1)[0]
    (root / victim.path).write_bytes((root / victim.path).read_bytes()[:-30])
    code, _, err = run("upgrade", root)
    assert code == 4 and f"error: {victim.path}: state file cannot be read" in flat(err)
    assert not (root / "_log").exists() and StateStore.open(root).format == 2  # nothing committed
    code, _, err = run("upgrade", tmp_path / "nothing", "--json")
    assert code == 2 and "no state store at" in err
