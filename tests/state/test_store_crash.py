"""Crash safety of ``StateStore.apply`` and ``StateStore.compact`` (DESIGN §9): a process killed
(SIGKILL) at any point leaves the store at a complete generation, old or new, holding exactly the
input rows, and a retry finishes the migration or the compaction. Ten trials of each."""

from __future__ import annotations

import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from repart.migration import plan_migration
from repart.partitioning import PartitionFunction, initial_function
from repart.state.store import StateStore
from tests.factories import REGION, SMALL_SLOT_BITS, all_files, check_oracle, new_store, state_table

TRIALS = 10
ROWS = 200_000

APPLY = """
import sys
from repart.migration import MigrationPlan
from repart.state.store import StateStore
plan = MigrationPlan.from_json(open(sys.argv[2]).read())
store = StateStore.open(sys.argv[1])
print("start", flush=True)
store.apply(plan, plan_id=1, region=sys.argv[3], from_version=1, to_version=2)
print("done", flush=True)
"""


COMPACT = """
import sys
from repart.state.store import StateStore
store = StateStore.open(sys.argv[1])
print("start", flush=True)
assert store.compact().compacted
print("done", flush=True)
"""


def start(script: str, *arguments: str) -> subprocess.Popen[str]:
    """A child process running ``script``; returns once it is about to apply or compact."""
    child = subprocess.Popen([sys.executable, "-c", script, *arguments], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "start\n"
    return child


def start_apply(root: Path, plan_file: Path) -> subprocess.Popen[str]:
    """A child process applying the plan; returns once it is about to call ``apply``."""
    return start(APPLY, str(root), str(plan_file), REGION)


@pytest.mark.slow
def test_a_killed_apply_leaves_a_complete_generation_and_a_retry_finishes(tmp_path: Path) -> None:
    table = state_table(ROWS, "str")
    keys = table.column("key").to_pylist()
    a = PartitionFunction(n_channels=8, key_type="str", slot_bits=SMALL_SLOT_BITS, explicit={keys[0]: 1})
    b = PartitionFunction(
        n_channels=11,
        key_type="str",
        slot_bits=SMALL_SLOT_BITS,
        explicit={keys[0]: 9, keys[1]: 10},
        slot_overrides=dict.fromkeys(range(64), 10),  # a whole slot group moves: files are relocated
    )
    plan = plan_migration(a, b)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(plan.to_json())
    template = tmp_path / "template"
    new_store(template, a, table, slot_groups=16)

    measured = tmp_path / "measured"
    shutil.copytree(template, measured)
    child = start_apply(measured, plan_file)
    started = time.perf_counter()  # from the call: kills land inside it
    assert child.wait() == 0
    apply_seconds = time.perf_counter() - started
    check_oracle(StateStore.open(measured), table, b)

    rng = random.Random(20261122)
    outcomes = []
    for trial in range(TRIALS):
        root = tmp_path / f"trial-{trial}"
        shutil.copytree(template, root)
        child = start_apply(root, plan_file)
        time.sleep(rng.uniform(0, apply_seconds))
        child.send_signal(signal.SIGKILL)
        child.wait()
        store = StateStore.open(root)
        committed = store.generation == 2
        assert (store.version, store.function_digest, store.generation) == (
            (2, b.digest, 2) if committed else (1, a.digest, 1)
        )
        check_oracle(store, table, b if committed else a)
        retry = store.apply(plan, plan_id=1, region=REGION, from_version=1, to_version=2)
        assert retry.already_applied == committed
        check_oracle(store, table, b)
        store.vacuum(keep_generations=1)
        on_disk = {path.relative_to(root).as_posix() for path in root.glob("channel=*/*")}
        assert on_disk == {entry.path for entry in all_files(store)}
        check_oracle(StateStore.open(root), table, b)
        outcomes.append(committed)
    print(f"apply {apply_seconds:.2f}s; trials committed before the kill: {outcomes}")


@pytest.mark.slow
def test_a_killed_compaction_leaves_a_complete_generation_and_a_retry_finishes(tmp_path: Path) -> None:
    table = state_table(ROWS, "str")
    a, b = initial_function(8, "str", SMALL_SLOT_BITS), initial_function(11, "str", SMALL_SLOT_BITS)
    template = tmp_path / "template"
    store = new_store(template, a, table, slot_groups=16)
    store.apply(plan_migration(a, b), plan_id=1, region=REGION, from_version=1, to_version=2)
    store.apply(plan_migration(b, a), plan_id=2, region=REGION, from_version=2, to_version=3)
    assert sum(entry.hidden_rows for entry in all_files(store)) > 0  # filtered files, two per group

    measured = tmp_path / "measured"
    shutil.copytree(template, measured)
    child = start(COMPACT, str(measured))
    started = time.perf_counter()
    assert child.wait() == 0
    compact_seconds = time.perf_counter() - started
    check_oracle(StateStore.open(measured), table, a)

    rng = random.Random(20261123)
    outcomes = []
    for trial in range(TRIALS):
        root = tmp_path / f"trial-{trial}"
        shutil.copytree(template, root)
        child = start(COMPACT, str(root))
        time.sleep(rng.uniform(0, compact_seconds))
        child.send_signal(signal.SIGKILL)
        child.wait()
        store = StateStore.open(root)
        committed = store.generation == 4
        assert store.generation in (3, 4) and (store.version, store.function_digest) == (3, a.digest)
        check_oracle(store, table, a)
        assert store.compact().compacted != committed
        assert all(entry.filter is None for entry in all_files(store))
        store.vacuum(keep_generations=1)
        on_disk = {path.relative_to(root).as_posix() for path in root.glob("channel=*/*")}
        assert on_disk == {entry.path for entry in all_files(store)}
        check_oracle(StateStore.open(root), table, a)
        outcomes.append(committed)
    print(f"compact {compact_seconds:.2f}s; trials committed before the kill: {outcomes}")


def test_vacuum_after_a_crash_removes_orphans(tmp_path: Path) -> None:
    """A child killed right after it wrote some files and a generation document (simulated by
    stopping it at its first fsync of a generation document)."""
    table = state_table(2000, "str")
    a, b = initial_function(3, "str", SMALL_SLOT_BITS), initial_function(5, "str", SMALL_SLOT_BITS)
    store = new_store(tmp_path / "s", a, table)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(plan_migration(a, b).to_json())
    script = APPLY.replace(
        "store.apply(",
        "import repart.state.store as m, os\n"
        "m.write_durably = lambda path, text: (path.write_text(text), os.kill(os.getpid(), 9))\n"
        "store.apply(",
    )
    child = subprocess.run(
        [sys.executable, "-c", script, str(store.root), str(plan_file), REGION], check=False
    )
    assert child.returncode == -signal.SIGKILL
    assert (store.root / "generations" / "00000002.json").exists()
    reopened = StateStore.open(store.root)
    assert reopened.generation == 1
    removed = reopened.vacuum()
    assert "generations/00000002.json" in removed and any(path.startswith("channel=") for path in removed)
    check_oracle(StateStore.open(store.root), table, a)
