"""Crash safety of ``StateStore.apply`` and ``StateStore.compact`` (DESIGN §9): a process killed
(SIGKILL) at any point leaves the store at a complete generation, old or new, holding exactly the
input state, and a retry finishes the migration or the compaction.

The kills land at chosen points, not after random delays. The child process that applies or compacts
counts its calls of the primitives that change the disk (``pyarrow.parquet.write_table``, ``os.link``,
``os.fsync``, ``os.replace``: every write of the store goes through them) and kills itself with
SIGKILL before the n-th one, or halfway through a Parquet write (a torn file), or after the operation
returned. A calibration run of the same operation lists its calls; the trials spread their kill points
over that list and always include the last calls before the commit (the renames of the generation
document and of the manifest) and the first after it. Every trial asserts which generation the store
opens at (the old one for a kill up to the manifest's rename, the new one after it), and each group of
trials has both. Ten trials of an apply, ten of a compaction, and eight of an apply whose plan
consolidates split keys' partials (DESIGN §11.3), checked against a plain Python group-by of the input.
"""

from __future__ import annotations

import json
import math
import shutil
import signal
import subprocess
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pytest

from repart.migration import plan_migration
from repart.partitioning import PartitionFunction, initial_function
from repart.partitioning.domain import Key
from repart.partitioning.split.function import SplitEntry, SplitFunction
from repart.protocol.merge import MergeSpec
from repart.state.store import StateStore
from tests.factories import (
    REGION,
    SMALL_SLOT_BITS,
    all_files,
    check_oracle,
    new_store,
    partial_store,
    state_table,
    zipf_keys,
)

TRIALS = 10
CONSOLIDATION_TRIALS = 8
ROWS = 20_000

#: The child: ``ROOT KILL_AT HOW OPERATION [PLAN [MERGE]]``. It kills itself before its KILL_AT-th call
#: of an instrumented primitive (HOW ``torn``: that call is a Parquet write, and the file keeps half
#: its bytes), or after the operation returned (KILL_AT one past the last call), or never (0); then it
#: prints the calls it made, in order.
CHILD = """
import json, os, signal, sys, threading
from pathlib import Path
import pyarrow.parquet as pq
from repart.migration import MigrationPlan
from repart.protocol.merge import MergeSpec
from repart.state.store import StateStore

root, kill_at, how, operation, *rest = sys.argv[1:]
kill_at = int(kill_at)
calls = []
lock = threading.Lock()

def die():
    os.kill(os.getpid(), signal.SIGKILL)

def instrument(owner, attribute, name_of):
    real = getattr(owner, attribute)
    def instrumented(*args, **kwargs):
        with lock:
            calls.append(name_of(*args))
            number = len(calls)
        if number == kill_at and how == "before":
            die()
        result = real(*args, **kwargs)
        if number == kill_at:  # torn: the Parquet file holds half its bytes when the process dies
            sink = args[1]
            sink.flush()
            os.ftruncate(sink.fileno(), sink.tell() // 2)
            die()
        return result
    setattr(owner, attribute, instrumented)

def renamed(source, target):
    target = Path(target)
    return "rename MANIFEST" if target.name == "MANIFEST" else f"rename {target.parent.name}"

instrument(pq, "write_table", lambda *args: "write")
instrument(os, "link", lambda *args: "link")
instrument(os, "fsync", lambda *args: "fsync")
instrument(os, "replace", renamed)
store = StateStore.open(root)
if operation == "apply":
    plan = MigrationPlan.from_json(Path(rest[0]).read_text())
    merge = MergeSpec.parse(rest[1]) if len(rest) > 1 else None
    store.apply(plan, plan_id=1, region=store.region, from_version=1, to_version=2, merge=merge)
else:
    assert store.compact().compacted
if kill_at == len(calls) + 1:
    die()
print(json.dumps(calls))
"""
WRITE, DOCUMENT_RENAME, MANIFEST_RENAME = "write", "rename generations", "rename MANIFEST"


@dataclass(frozen=True)
class Kill:
    """Where the child dies: before its ``call``-th instrumented call (one past the last: after the
    operation returned), or, ``torn``, halfway through that call, a Parquet write."""

    call: int
    torn: bool = False


def run_child(root: Path, kill: Kill | None, *arguments: str) -> list[str]:
    """Run the child on ``root``; without ``kill``, to the end, returning the calls it made."""
    how = "torn" if kill is not None and kill.torn else "before"
    argv = [sys.executable, "-c", CHILD, str(root), str(kill.call if kill else 0), how, *arguments]
    child = subprocess.run(argv, capture_output=True, text=True, check=False)
    if kill is None:
        assert child.returncode == 0, child.stderr
        calls: list[str] = json.loads(child.stdout)
        return calls
    assert child.returncode == -signal.SIGKILL, child.stderr
    return []


def kill_points(calls: Sequence[str], trials: int) -> list[Kill]:
    """``trials`` kill points over a calibration run's ``calls``: a torn Parquet write (the middle
    one), the generation document's rename, the manifest's rename (the commit), the call after it
    (the directory sync), after the return, and the rest spread evenly over the calls before the
    generation document's rename."""
    commit = calls.index(MANIFEST_RENAME) + 1
    document = calls.index(DOCUMENT_RENAME) + 1
    writes = [number for number, call in enumerate(calls, 1) if call == WRITE]
    assert writes and document < commit < len(calls)
    fixed = [
        Kill(writes[len(writes) // 2], torn=True),
        *map(Kill, (document, commit, commit + 1, len(calls) + 1)),
    ]
    spread = np.unique(np.linspace(1, document - 1, trials - len(fixed)).round().astype(int)).tolist()
    assert len(spread) == trials - len(fixed)
    return [*map(Kill, spread), *fixed]


@dataclass(frozen=True)
class Outcome:
    """Where a kill landed: the call, whether the store opened at the new generation, and how many
    data files the killed child left that the generation it opened at does not list."""

    kill: Kill
    committed: bool
    orphans: int


def crash_trials(
    tmp_path: Path,
    template: Path,
    trials: int,
    arguments: Sequence[str],
    check: Callable[[StateStore, bool], None],
    retry: Callable[[StateStore, bool], None],
) -> list[Outcome]:
    """Calibrate on a copy of ``template``, then kill a child at each of ``trials`` kill points on a copy
    each: the store opens at the old generation or the next one (the next exactly when the kill came
    after the manifest's rename), ``check(store, committed)`` holds, ``retry`` finishes, ``check``
    holds at the new generation, and ``vacuum`` leaves exactly the files the generation lists."""
    old = StateStore.open(template).generation
    calibrated = tmp_path / "calibration"
    shutil.copytree(template, calibrated)
    calls = run_child(calibrated, None, *arguments)
    check(StateStore.open(calibrated), True)
    commit = calls.index(MANIFEST_RENAME) + 1
    before = set(data_files(template))
    outcomes = []
    for trial, kill in enumerate(kill_points(calls, trials)):
        root = tmp_path / f"trial-{trial}"
        shutil.copytree(template, root)
        run_child(root, kill, *arguments)
        store = StateStore.open(root)
        assert store.generation in (old, old + 1)
        committed = store.generation == old + 1
        assert committed == (kill.call > commit), (kill, calls[kill.call - 1 : kill.call])
        orphans = len(set(data_files(root)) - before - {entry.path for entry in all_files(store)})
        check(store, committed)
        retry(store, committed)
        assert store.generation == old + 1
        check(store, True)
        store.vacuum(keep_generations=1)
        assert set(data_files(root)) == {entry.path for entry in all_files(store)}
        assert [path.name for path in (root / "generations").iterdir()] == [f"{old + 1:08d}.json"]
        assert not list(root.glob(".MANIFEST.*"))
        StateStore.open(root).verify()
        outcomes.append(Outcome(kill, committed, orphans))
    assert {outcome.committed for outcome in outcomes} == {False, True}
    assert any(outcome.orphans for outcome in outcomes if not outcome.committed)  # killed mid-way
    print(f"{len(calls)} calls, the manifest's rename is call {commit}; kills:")
    for outcome in outcomes:
        torn = " (torn write)" if outcome.kill.torn else ""
        landed = "new" if outcome.committed else "old"
        print(f"  call {outcome.kill.call}{torn}: {landed} generation, {outcome.orphans} orphaned files")
    return outcomes


def data_files(root: Path) -> list[str]:
    return [path.relative_to(root).as_posix() for path in root.glob("channel=*/*")]


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

    def check(store: StateStore, committed: bool) -> None:
        layout = (2, b.digest) if committed else (1, a.digest)
        assert (store.version, store.function_digest) == layout
        check_oracle(store, table, b if committed else a)

    def retry(store: StateStore, committed: bool) -> None:
        result = store.apply(plan, plan_id=1, region=REGION, from_version=1, to_version=2)
        assert result.already_applied == committed

    crash_trials(tmp_path, template, TRIALS, ["apply", str(plan_file)], check, retry)


@pytest.mark.slow
def test_a_killed_compaction_leaves_a_complete_generation_and_a_retry_finishes(tmp_path: Path) -> None:
    table = state_table(ROWS, "str")
    a, b = initial_function(8, "str", SMALL_SLOT_BITS), initial_function(11, "str", SMALL_SLOT_BITS)
    template = tmp_path / "template"
    store = new_store(template, a, table, slot_groups=16)
    store.apply(plan_migration(a, b), plan_id=1, region=REGION, from_version=1, to_version=2)
    store.apply(plan_migration(b, a), plan_id=2, region=REGION, from_version=2, to_version=3)
    assert sum(entry.hidden_rows for entry in all_files(store)) > 0  # filtered files, two per group

    def check(store: StateStore, committed: bool) -> None:
        assert (store.version, store.function_digest) == (3, a.digest)
        assert all(entry.filter is None for entry in all_files(store)) == committed
        check_oracle(store, table, a)

    def retry(store: StateStore, committed: bool) -> None:
        assert store.compact().compacted != committed

    crash_trials(tmp_path, template, TRIALS, ["compact"], check, retry)


SPEC = MergeSpec.parse("volume=sum,trades=sum,low=min,high=max")
SPLIT_KEYS = 6  # the hottest keys are split in a; in b two stay split (on other candidates), four are not


def trades(count: int, seed: int) -> pa.Table:
    """Input rows over ``ZIPF_DOMAIN`` (2,000) keys, Zipf (the first keys the hottest), with a volume,
    a count, a price (low and high) and a random 64-bit row hash."""
    rng = np.random.default_rng(seed)
    price = rng.integers(1, 400, count) * 0.25
    return pa.table(
        {
            "key": pa.array([f"sym-{rank}" for rank in zipf_keys(seed, count, 1.1)]),
            "volume": pa.array(rng.integers(1, 1_000, count), pa.int64()),
            "trades": pa.array(np.ones(count, dtype=np.int64)),
            "low": pa.array(price),
            "high": pa.array(price),
            "row_hash": pa.array(rng.integers(-(2**63), 2**63 - 1, count, dtype=np.int64)),
        }
    )


def group_by_key(rows: pa.Table) -> list[dict[str, Any]]:
    """The oracle: one row per key over all input rows, aggregated in plain Python, sorted by key."""
    totals: dict[Key, dict[str, Any]] = {}
    for row in rows.drop_columns(["row_hash"]).to_pylist():
        total = totals.setdefault(row["key"], {"volume": 0, "trades": 0, "low": math.inf, "high": -math.inf})
        total["volume"] += row["volume"]
        total["trades"] += row["trades"]
        total["low"] = min(total["low"], row["low"])
        total["high"] = max(total["high"], row["high"])
    return [{"key": key, **totals[key]} for key in sorted(totals)]


def split(home: PartitionFunction, keys: Sequence[Key], others: int) -> SplitFunction:
    """``home`` with each of ``keys`` spread evenly over its home and the ``others`` next channels."""
    entries = {}
    for key in keys:
        first = home.lookup(key)
        candidates = (first, *((first + step) % home.n_channels for step in range(1, others + 1)))
        entries[key] = SplitEntry(candidates, (1 / len(candidates),) * len(candidates))
    return SplitFunction(home, entries)


@pytest.mark.slow
def test_a_killed_apply_that_consolidates_split_keys_leaves_a_complete_generation(tmp_path: Path) -> None:
    """A scale-out 6 → 7 under which six split keys lose candidates: the partials of four (no longer
    split) are pooled on their home and merged, two keep a candidate of theirs besides their home."""
    rows = trades(40_000, seed=7)
    hot = [f"sym-{rank}" for rank in range(SPLIT_KEYS)]
    a = split(initial_function(6, "str", SMALL_SLOT_BITS), hot, others=3)
    b = split(initial_function(7, "str", SMALL_SLOT_BITS), hot[:2], others=1)
    plan = plan_migration(a, b)
    assert {row.key for row in plan.consolidations} == set(hot)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(plan.to_json())
    template = tmp_path / "template"
    partial_store(template, a, rows, SPEC, slot_groups=16)
    oracle = group_by_key(rows)

    def check(store: StateStore, committed: bool) -> None:
        function = b if committed else a
        assert (store.version, store.function_digest) == ((2, b.digest) if committed else (1, a.digest))
        state = store.read()
        held = list(zip(state.column("key").to_pylist(), state.column("channel").to_pylist(), strict=True))
        assert len(set(held)) == len(held)  # a channel holds at most one partial of a key
        assert all(channel in function.candidates(key) for key, channel in held)
        rows_of = {key: sum(1 for k, _ in held if k == key) for key in hot}
        assert all(rows_of[key] == (1 if committed else 4) for key in hot[2:])  # merged into one
        assert store.read_merged(SPEC).sort_by("key").to_pylist() == oracle
        assert sum(state.column("volume").to_pylist()) == sum(rows.column("volume").to_pylist())
        store.verify()

    def retry(store: StateStore, committed: bool) -> None:
        result = store.apply(plan, plan_id=1, region=REGION, from_version=1, to_version=2, merge=SPEC)
        assert result.already_applied == committed

    arguments = ["apply", str(plan_file), SPEC.to_text()]
    crash_trials(tmp_path, template, CONSOLIDATION_TRIALS, arguments, check, retry)


def test_vacuum_after_a_crash_removes_orphans(tmp_path: Path) -> None:
    """A child killed right after it renamed the new generation's document into place, before the
    manifest names it: the store opens at the old generation and vacuum removes the document and the
    data files written for it."""
    table = state_table(2000, "str")
    a, b = initial_function(3, "str", SMALL_SLOT_BITS), initial_function(5, "str", SMALL_SLOT_BITS)
    store = new_store(tmp_path / "s", a, table)
    shutil.copytree(store.root, tmp_path / "calibration")
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(plan_migration(a, b).to_json())
    calls = run_child(tmp_path / "calibration", None, "apply", str(plan_file))
    run_child(store.root, Kill(calls.index(DOCUMENT_RENAME) + 2), "apply", str(plan_file))
    assert (store.root / "generations" / "00000002.json").exists()
    reopened = StateStore.open(store.root)
    assert reopened.generation == 1
    removed = reopened.vacuum()
    assert "generations/00000002.json" in removed and any(path.startswith("channel=") for path in removed)
    check_oracle(StateStore.open(store.root), table, a)
