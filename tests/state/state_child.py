"""A writer of the state store's crash and race tests, in a process of its own: run as a script.

``python state_child.py crash SPEC`` performs one operation on a store and kills itself with SIGKILL at
a fixed point; ``python state_child.py zygote`` forks such a child for each SPEC it reads (the imports
paid once); ``python state_child.py serve`` is a long-lived writer that races another one under the
parent's direction. What both tests share with the parent (the stores' layout, the batches' rows, how
a batch is written and committed) is defined here, so that the parent's oracle and the child's writes
come from the same seeds.

The store is mergeable (``n`` sums), so a key's state is the total of every row ever written for it and
the oracle of any sequence of committed batches is a plain ``group_by("key").aggregate(sum)`` of their
rows. This module imports no test module (a child starts in about half a second).

Kill points (``SPEC["kill"]``), injected by wrapping ``LocalObjects``/``RemoteObjects``'s ``write``
and ``create`` in the child:

- ``{"point": "data", "n": k}``: before the k-th data file write (k = 1: before any data is written);
  the child makes its data writes one at a time (an operation may write from several threads, as a
  compaction does), so the k - 1 writes before the k-th are complete when it dies;
- ``{"point": "before-commit"}``: before the conditional put of the commit document;
- ``{"point": "after-commit"}``: right after that put succeeded (no checkpoint, no hint yet);
- ``{"point": "after-hint"}``: right after the hint was written (the operation is complete);
- ``{"point": "temporary", "under": "_log" | "data"}``: on a local directory, when the hidden temporary
  of an object under that directory is written and ``fsync``ed but not yet linked or renamed into place;
- None: no kill; the child prints ``{"data_writes": k, "done": bool}`` on stderr and exits 0.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import traceback
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa

from repart.errors import Conflict
from repart.migration import MigrationPlan
from repart.partitioning import PartitionFunction, initial_function
from repart.state.batches import ChannelUpdate, absorbed_batch
from repart.state.compact import CompactionPolicy
from repart.state.files import FileKindName
from repart.state.store import FileEntry, StateStore

REGION = "trades"
SLOT_BITS = 10
SLOT_GROUPS = 1
N_CHANNELS = 4
SCHEMA = pa.schema([("key", pa.string()), ("n", pa.int64())])
MERGE = {"n": "sum"}
#: Keys are ``k0`` .. ``k{DOMAIN - 1}``.
DOMAIN = 600
#: Every channel with deltas is due: a compaction folds them all.
FOLD_ALL = CompactionPolicy(max_delta_share=0.0)
LOG_DOCUMENT = "_log/"
HINT = "_log/_hint.json"


def function(n_channels: int = N_CHANNELS) -> PartitionFunction:
    return initial_function(n_channels, "str", SLOT_BITS)


def create(
    location: str, options: Mapping[str, str] | None, layout: PartitionFunction | None = None
) -> StateStore:
    """An empty mergeable store (generation 0) laid out by ``layout`` (by default ``function()``)."""
    laid_out = layout or function()
    return StateStore.create(
        location,
        region=REGION,
        version=1,
        function_digest=laid_out.digest,
        n_channels=laid_out.n_channels,
        slot_bits=SLOT_BITS,
        key_type="str",
        key_col="key",
        schema=SCHEMA,
        slot_groups=SLOT_GROUPS,
        merge=MERGE,
        options=options,
    )


def batch_rows(seed: int, rows: int = 400, channels: Sequence[int] | None = None) -> pa.Table:
    """The input of batch ``seed``: ``rows`` rows of keys drawn from the domain (repeats included) with
    values in [1, 1000]; only the rows ``function()`` routes to ``channels``, when given."""
    rng = np.random.default_rng(seed)
    keys = [f"k{int(k)}" for k in rng.integers(0, DOMAIN, rows)]
    table = pa.table({"key": keys, "n": rng.integers(1, 1001, rows)}, schema=SCHEMA)
    if channels is None:
        return table
    routed = function().lookup_many(keys)
    return table.filter(pa.array(np.isin(routed, list(channels))))


def totals(rows: pa.Table) -> dict[str, int]:
    """The oracle: each key's total over ``rows`` (a plain pyarrow group-by)."""
    grouped = rows.group_by("key").aggregate([("n", "sum")])
    return dict(zip(grouped.column("key").to_pylist(), grouped.column("n_sum").to_pylist(), strict=True))


def write_rows(
    store: StateStore, layout: PartitionFunction, rows: pa.Table, kind: FileKindName = "delta"
) -> dict[int, list[FileEntry]]:
    """``rows`` written as files of the channels ``layout`` routes them to (one row per key each: a
    batch's partials), channel by channel, for a commit."""
    combined = rows.group_by("key").aggregate([("n", "sum")]).rename_columns(["key", "n"]).sort_by("key")
    routed = layout.lookup_many(combined.column("key").to_pylist())
    return {
        channel: store.write(channel, combined.filter(pa.array(routed == channel)), kind=kind)
        for channel in sorted(set(routed.tolist()))
    }


def commit_batch(
    store: StateStore,
    layout: PartitionFunction,
    added: Mapping[int, Sequence[FileEntry]],
    batch_id: int | None,
) -> StateStore:
    """Commit the files of one batch (``batch_id`` None: without a batch record)."""
    updates = [
        ChannelUpdate(channel, sum(entry.rows for entry in entries), 0, 0, 0.0)
        for channel, entries in added.items()
    ]
    return store.commit(
        added,
        version=store.version,
        function_digest=layout.digest,
        n_channels=layout.n_channels,
        batch=None if batch_id is None else absorbed_batch(batch_id, updates),
    )


def update(store: StateStore, layout: PartitionFunction, batch_id: int, rows: pa.Table) -> bool:
    """A job's update: batch ``batch_id`` written as deltas and committed, unless the store absorbed it
    already (then nothing is written). Whether it committed."""
    if store.refreshed().absorbed(batch_id):
        return False
    commit_batch(store, layout, write_rows(store, layout, rows), batch_id)
    return True


def apply(store: StateStore, plan: MigrationPlan) -> bool:
    """The migration of the crash tests (plan 1, version 1 -> 2); whether it was applied now."""
    return not store.apply(plan, plan_id=1, region=REGION, from_version=1, to_version=2).already_applied


def compact(store: StateStore) -> bool:
    return store.compact(FOLD_ALL).compacted


# --- the child ------------------------------------------------------------------------------------------


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def instrument(kill: Mapping[str, Any] | None) -> tuple[list[str], list[str]]:
    """Wrap the object layers' ``write`` and ``create`` to SIGKILL this process at ``kill`` (module
    docstring); returns the lists of data paths written and of creates that found their object
    there (a lost race), filled as they happen."""
    from repart.state import objects as objects_module

    written: list[str] = []
    lost: list[str] = []
    lock = threading.Lock()
    point = None if kill is None else kill["point"]

    for kind in (objects_module.LocalObjects, objects_module.RemoteObjects):
        real_write: Callable[..., None] = kind.write
        real_create: Callable[..., bool] = kind.create

        def write(self: Any, path: str, data: bytes, _real: Callable[..., None] = real_write) -> None:
            if path.startswith("data/"):
                with lock:  # one data write at a time, so the k - 1 before the k-th are complete
                    written.append(path)
                    if point == "data" and len(written) == kill["n"]:  # type: ignore[index]
                        _die()
                    _real(self, path, data)
                return
            _real(self, path, data)
            if path == HINT and point == "after-hint":
                _die()

        def create_once(self: Any, path: str, data: bytes, _real: Callable[..., bool] = real_create) -> bool:
            commit = path.startswith(LOG_DOCUMENT)  # only commit documents are created
            if commit and point == "before-commit":
                _die()
            created = _real(self, path, data)
            if commit and created and point == "after-commit":
                _die()
            if not created:
                lost.append(path)
            return created

        kind.write = write  # type: ignore[method-assign]
        kind.create = create_once  # type: ignore[method-assign]
    real_aside = objects_module.LocalObjects._written_aside

    def aside(self: Any, target: Path, data: bytes) -> Path:
        temporary = real_aside(self, target, data)
        if point == "temporary" and target.parent.name == kill["under"]:  # type: ignore[index]
            _die()  # a local writer's temporary is complete, its link or rename not done
        return temporary

    objects_module.LocalObjects._written_aside = aside  # type: ignore[method-assign]
    return written, lost


def crash(spec: Mapping[str, Any]) -> None:
    """Run ``spec["operation"]`` (create, update, apply, compact) on the store at ``spec["url"]``, killed at
    ``spec["kill"]``."""
    written, _ = instrument(spec.get("kill"))
    operation = spec["operation"]
    if operation == "create":
        create(spec["url"], spec.get("options"))
        return
    store = StateStore.open(spec["url"], spec.get("options"))
    if operation == "update":
        done = update(store, function(), spec["batch_id"], batch_rows(spec["seed"]))
    elif operation == "apply":
        done = apply(store, MigrationPlan.from_json(Path(spec["plan"]).read_text(encoding="utf-8")))
    else:
        done = compact(store)
    print(json.dumps({"data_writes": len(written), "done": done}), file=sys.stderr, flush=True)


def serve() -> None:
    """Race on command: for each line ``{"url", "options", "seed", "channels", "batch_id"}`` open the
    store, write the batch's deltas, print ``{"ready": generation}``, wait for a line ``go``, commit, and
    print ``{"committed", "generation", "base", "conflict", "lost"}`` (Conflict: not committed, with its
    message; ``lost``: the creates of a commit document that found one there). An empty line ends."""
    layout = function()
    _, lost = instrument(None)
    for line in sys.stdin:
        if not line.strip():
            return
        command = json.loads(line)
        lost.clear()
        store = StateStore.open(command["url"], command["options"])
        base = store.generation
        added = write_rows(store, layout, batch_rows(command["seed"], channels=command["channels"]))
        print(json.dumps({"ready": base}), flush=True)
        if sys.stdin.readline().strip() != "go":
            return
        outcome: dict[str, Any]
        try:
            commit_batch(store, layout, added, command["batch_id"])
            outcome = {"committed": True, "generation": store.generation, "base": base, "lost": len(lost)}
        except Conflict as error:
            outcome = {"committed": False, "conflict": str(error), "base": base, "lost": len(lost)}
        print(json.dumps(outcome), flush=True)


def zygote() -> None:
    """For each line of stdin (a crash SPEC) fork a child that runs ``crash(SPEC)``, wait for it, and
    print ``{"signal": number or None, "code": exit code or None}``; an empty line ends. The imports are
    paid once, here, before any thread or client exists; each child starts in a millisecond."""
    for line in sys.stdin:
        if not line.strip():
            return
        spec = json.loads(line)
        sys.stdout.flush()
        sys.stderr.flush()
        pid = os.fork()
        if pid == 0:  # the child: never returns
            code = 0
            try:
                crash(spec)
            except BaseException:
                traceback.print_exc()
                code = 1
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(code)
        _, status = os.waitpid(pid, 0)
        killed = os.WTERMSIG(status) if os.WIFSIGNALED(status) else None
        exited = os.WEXITSTATUS(status) if os.WIFEXITED(status) else None
        print(json.dumps({"signal": killed, "code": exited}), flush=True)


if __name__ == "__main__":
    {"crash": lambda: crash(json.loads(sys.argv[2])), "serve": serve, "zygote": zygote}[sys.argv[1]]()
