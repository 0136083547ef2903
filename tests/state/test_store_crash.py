"""Crash safety of the state store's writers (format 3), on a local directory and on S3.

A child process (forked by ``tests/state/state_child.py zygote``, which imports repart once for all
trials) performs one operation on a store: an update (batch 2 written as deltas and committed), an
apply (a migration plan 4 -> 5 channels with explicitly moved keys, so that rows are written again) or a
compaction (every channel's deltas folded). It SIGKILLs itself at a fixed point, injected by wrapping
the object layer's ``write`` and ``create``: before any data write, between data writes, before the
conditional put of the commit document, right after it, and after the hint; some trials kill the retry
too. After each kill the store opens at a complete generation (the old one exactly when the kill came
before the commit document's put), ``verify`` passes, the data files the killed children left unlisted
are exactly those they wrote before the kill, and the state equals the oracle of what committed (each
key's total over the rows of the batches in it, by a plain pyarrow group-by, on the channel its
layout's function routes it to). A retry of the same operation then finishes (an update's batch id is
found absorbed when it committed: in the log once, never twice), and a vacuum leaves exactly the files
of the newest generation. Twenty trials per backend.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from functools import cache
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from repart.errors import Conflict
from repart.migration import MigrationPlan, plan_migration
from repart.partitioning import PartitionFunction
from repart.state.log import commit_path
from repart.state.store import StateStore
from tests.state.state_child import (
    SLOT_BITS,
    apply,
    batch_rows,
    commit_batch,
    compact,
    create,
    function,
    totals,
    update,
    write_rows,
)

CHILD = Path(__file__).with_name("state_child.py")
OLD = 2  # the template's generation: 0 created, 1 the base state, 2 batch 1
BATCH = 2  # the update's batch id
#: The plan's target: five channels, three keys moved explicitly (their rows are written again).
TARGET = PartitionFunction(
    n_channels=5,
    key_type="str",
    slot_bits=SLOT_BITS,
    explicit={key: (function().lookup(key) + 1) % 5 for key in ("k1", "k2", "k3")},
)
LAST = -1  # a data kill at the operation's last data write
COMMIT = re.compile(r"_log/[0-9]{20}\.json")


@dataclass(frozen=True)
class Kill:
    """Where a child dies: ``point`` (module docstring of state_child) and, for ``data``, before which
    data write (LAST: the last one the operation makes)."""

    point: str
    n: int = 0

    @property
    def commits(self) -> bool:
        """Whether the operation's commit document is in place when the child dies."""
        return self.point in ("after-commit", "after-hint")

    def __str__(self) -> str:
        return f"data{'-last' if self.n == LAST else self.n}" if self.point == "data" else self.point


POINTS = (
    Kill("data", 1),
    Kill("data", 2),
    Kill("before-commit"),
    Kill("after-commit"),
    Kill("after-hint"),
)
#: Each trial: an operation and the kills of its successive runs (a second kill hits the retry).
TRIALS = [
    *(("update", (kill,)) for kill in (*POINTS, Kill("data", LAST))),
    ("update", (Kill("before-commit"), Kill("after-commit"))),
    *(("apply", (kill,)) for kill in POINTS),
    ("apply", (Kill("data", 2), Kill("after-commit"))),
    *(("compact", (kill,)) for kill in (*POINTS, Kill("data", LAST))),
    ("compact", (Kill("data", LAST), Kill("after-hint"))),
]
assert len(TRIALS) == 20


def template(url: str, options: dict[str, str] | None) -> tuple[pa.Table, pa.Table]:
    """The store each trial starts from (generation 2: a base state, then batch 1 as deltas); the rows
    in it, and the rows of batch 2 (the update's)."""
    store = create(url, options)
    base, first = batch_rows(1000, rows=1000), batch_rows(1)
    commit_batch(store, function(), write_rows(store, function(), base, kind="base"), None)
    assert update(store, function(), 1, first) and store.generation == OLD
    return pa.concat_tables([base, first]), batch_rows(BATCH)


def data_objects(store: StateStore) -> set[str]:
    return {info.path for info in store.objects.listing("data/")}


class Zygote:
    """The crash children's parent (``state_child.py zygote``): it imports repart once and forks one
    child per operation, which dies by its own SIGKILL."""

    def __init__(self, log: Path) -> None:
        self.log = log
        with log.open("w") as errors:
            self.process = subprocess.Popen(
                [sys.executable, str(CHILD), "zygote"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=errors,
                text=True,
                env={**os.environ, "OPENBLAS_NUM_THREADS": "1"},  # no BLAS threads across the forks
            )

    def run(self, spec: dict[str, Any]) -> dict[str, Any]:
        assert self.process.stdin is not None and self.process.stdout is not None
        self.process.stdin.write(json.dumps(spec) + "\n")
        self.process.stdin.flush()
        line = self.process.stdout.readline()
        assert line, f"the zygote died: {self.log.read_text()[-3000:]}"
        result: dict[str, Any] = json.loads(line)
        return result

    def close(self) -> None:
        assert self.process.stdin is not None
        self.process.stdin.write("\n")
        self.process.stdin.close()
        self.process.wait(timeout=30)


@pytest.fixture(scope="module")
def zygote(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Zygote]:
    parent = Zygote(tmp_path_factory.mktemp("zygote") / "children.log")
    yield parent
    parent.close()


def run_child(
    zygote: Zygote, url: str, options: dict[str, str] | None, operation: str, kill: Kill, plan: Path
) -> None:
    spec: dict[str, Any] = {
        "url": url,
        "options": options,
        "operation": operation,
        "kill": {"point": kill.point, "n": kill.n},
        "batch_id": BATCH,
        "seed": BATCH,
        "plan": str(plan),
    }
    outcome = zygote.run(spec)
    assert outcome == {"signal": signal.SIGKILL, "code": None}, (
        kill,
        outcome,
        zygote.log.read_text()[-3000:],
    )


@cache
def data_writes(operation: str) -> int:
    """How many data files the operation writes (a run on a local copy of the template, counted by
    listing), for the kills at its last data write."""
    with tempfile.TemporaryDirectory() as directory:
        location = str(Path(directory) / "calibration")
        template(location, None)
        store = StateStore.open(location)
        before = data_objects(store)
        perform(store, operation, plan_migration(function(), TARGET))
        return len(data_objects(store) - before)


def perform(store: StateStore, operation: str, plan: MigrationPlan) -> bool:
    """The operation (the child's), run here; whether it did anything."""
    if operation == "update":
        return update(store, function(), BATCH, batch_rows(BATCH))
    if operation == "apply":
        return apply(store, plan)
    return compact(store)


def check_state(store: StateStore, operation: str, committed: bool, expected: dict[str, int]) -> None:
    """The store at a complete generation: the old one or the operation's, verified, each key's total
    the oracle's, every key on the channel its layout's function routes it to."""
    assert store.generation == OLD + committed
    store.verify()
    layout = TARGET if operation == "apply" and committed else function()
    assert (store.version, store.function_digest) == (
        (2, TARGET.digest) if layout is TARGET else (1, layout.digest)
    )
    state = store.read()
    keys = state.column("key").to_pylist()
    assert len(set(keys)) == len(keys)  # one row per key, on one channel
    assert state.column("channel").to_pylist() == layout.lookup_many(keys).tolist()
    assert dict(zip(keys, state.column("n").to_pylist(), strict=True)) == expected
    deltas = [entry for entry in store.all_files() if entry.kind == "delta"]
    if operation == "compact":
        assert (not deltas) == committed
    last = store.last_batch
    assert last is not None and last.batch_id == (BATCH if operation == "update" and committed else 1)


def commit_documents(store: StateStore) -> list[str]:
    return [info.path for info in store.objects.listing("_log/") if COMMIT.fullmatch(info.path)]


def temporaries(store: StateStore) -> set[str]:
    """A killed local writer's hidden temporaries (``.<name>.<random>``)."""
    return {info.path for info in store.objects.listing() if info.path.rsplit("/", 1)[-1].startswith(".")}


@pytest.mark.slow
@pytest.mark.parametrize(
    ("operation", "kills"), TRIALS, ids=[f"{op}-{'-'.join(map(str, kills))}" for op, kills in TRIALS]
)
def test_a_killed_writer_leaves_a_complete_generation_and_a_retry_finishes(
    zygote: Zygote,
    tmp_path: Path,
    store_url: str,
    store_options: dict[str, str] | None,
    operation: str,
    kills: tuple[Kill, ...],
) -> None:
    plan = plan_migration(function(), TARGET)
    plan_file = tmp_path / "plan.json"
    plan_file.write_text(plan.to_json(), encoding="utf-8")
    writes = data_writes(operation)
    assert writes >= 3
    kills = tuple(Kill("data", writes) if kill.n == LAST else kill for kill in kills)
    inside, batch = template(store_url, store_options)
    before_oracle = totals(inside)
    after_oracle = totals(pa.concat_tables([inside, batch])) if operation == "update" else before_oracle
    assert operation != "update" or after_oracle != before_oracle
    before_data = data_objects(StateStore.open(store_url, store_options))
    committed, orphaned = False, 0
    for kill in kills:
        run_child(zygote, store_url, store_options, operation, kill, plan_file)
        committed = committed or kill.commits
        orphaned += kill.n - 1 if kill.point == "data" else writes if kill.point == "before-commit" else 0
        store = StateStore.open(store_url, store_options)
        check_state(store, operation, committed, after_oracle if committed else before_oracle)
        orphans = data_objects(store) - before_data - {entry.path for entry in store.all_files()}
        assert len(orphans) == orphaned  # what the killed children wrote and no commit lists
        assert commit_documents(store) == [commit_path(number) for number in range(OLD + 1 + committed)]
    store = StateStore.open(store_url, store_options)
    assert perform(store, operation, plan) != committed  # the retry finishes, or finds it done
    assert not perform(StateStore.open(store_url, store_options), operation, plan)  # and now it is done
    store = StateStore.open(store_url, store_options)
    assert commit_documents(store) == [commit_path(number) for number in range(OLD + 2)]  # one commit
    if operation == "update":  # the same batch again: refused
        with pytest.raises(Conflict, match=f"batch {BATCH} is already in the state store"):
            commit_batch(store, function(), write_rows(store, function(), batch), BATCH)
    unlisted = data_objects(store) - {entry.path for entry in store.all_files()}
    assert len(unlisted) >= orphaned
    leftovers = temporaries(store)
    result = store.vacuum(retain=0, now=datetime.now(UTC) + timedelta(days=1))
    assert set(result.deleted) == unlisted | leftovers
    assert data_objects(store) == {entry.path for entry in store.all_files()} and not temporaries(store)
    check_state(StateStore.open(store_url, store_options), operation, True, after_oracle)
