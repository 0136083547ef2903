"""A local writer killed while an object's hidden temporary (``.<name>.<random>``, written and
``fsync``ed beside its target, ``repart.state.objects.LocalObjects``) is not yet linked or renamed into
place: the object does not exist, the store is as before, the operation runs again, and ``vacuum``
removes the temporary once it is older than the retention (never before)."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from repart.errors import NotFound
from repart.state.log import commit_path
from repart.state.store import StateStore
from tests.state.state_child import batch_rows, commit_batch, create, function, totals, update, write_rows

CHILD = Path(__file__).with_name("state_child.py")


def killed(root: Path, operation: str, under: str) -> None:
    """Run ``operation`` on the store at ``root`` in a child killed when a temporary under ``under``
    (``_log`` or ``data``) is complete."""
    spec: dict[str, Any] = {"url": str(root), "operation": operation, "batch_id": 2, "seed": 2}
    spec["kill"] = {"point": "temporary", "under": under}
    child = subprocess.run(
        [sys.executable, str(CHILD), "crash", json.dumps(spec)], capture_output=True, text=True, check=False
    )
    assert child.returncode == -signal.SIGKILL, child.stderr


def hidden(root: Path) -> list[str]:
    return sorted(path.relative_to(root).as_posix() for path in root.rglob(".*"))


def test_a_create_killed_before_its_first_commit_is_linked_runs_again(tmp_path: Path) -> None:
    root = tmp_path / "store"
    killed(root, "create", "_log")
    (temporary,) = hidden(root)
    assert temporary.startswith(f"{commit_path(0).replace('_log/', '_log/.')}.")
    with pytest.raises(NotFound, match="no state store at"):
        StateStore.open(root)
    store = create(str(root), None)
    assert store.generation == 0 and StateStore.open(root).generation == 0
    assert hidden(root) == [temporary]
    assert not store.vacuum(timedelta(hours=1)).deleted  # young: kept
    assert store.vacuum(timedelta(hours=1), now=datetime.now(UTC) + timedelta(hours=2)).deleted == (
        temporary,
    )
    assert hidden(root) == [] and StateStore.open(root).generation == 0


@pytest.mark.parametrize("under", ["_log", "data"])
def test_an_update_killed_with_a_temporary_leaves_the_store_as_it_was(tmp_path: Path, under: str) -> None:
    """Killed at its first data file (nothing complete) or at its commit document (every data file
    complete, none listed): the store opens at the old generation, the update runs again, and an aged
    vacuum deletes the temporary and the orphaned data files, nothing else."""
    root = tmp_path / "store"
    store = create(str(root), None)
    base, first, second = batch_rows(1000, rows=300), batch_rows(1), batch_rows(2)
    commit_batch(store, function(), write_rows(store, function(), base, kind="base"), None)
    assert update(store, function(), 1, first) and store.generation == 2
    before = files(root)
    killed(root, "update", under)
    (temporary,) = hidden(root)
    assert temporary.startswith(f"{under}/.")
    orphans = files(root) - before - {temporary}
    assert len(orphans) == (4 if under == "_log" else 0) and all(path.startswith("data/") for path in orphans)
    opened = StateStore.open(root)
    assert opened.generation == 2 and opened.all_files() == store.all_files()
    assert update(opened, function(), 2, second) and opened.generation == 3  # runs again
    result = opened.vacuum(timedelta(hours=1), now=datetime.now(UTC) + timedelta(hours=2))
    assert set(result.deleted) == orphans | {temporary} and hidden(root) == []
    reopened = StateStore.open(root)
    assert reopened.generation == 3 and state(reopened) == totals(pa.concat_tables([base, first, second]))
    reopened.verify()


def files(root: Path) -> set[str]:
    return {path.relative_to(root).as_posix() for path in root.rglob("*") if path.is_file()}


def state(store: StateStore) -> dict[str, int]:
    table = store.read_merged()
    return dict(zip(table.column("key").to_pylist(), table.column("n").to_pylist(), strict=True))
