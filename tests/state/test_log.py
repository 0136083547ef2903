"""The state store's commit protocol (format 3, ``repart.state.log``), on a local directory and on S3.

Checked against independent oracles: the state is a mergeable store whose every key's total must equal
a plain pyarrow group-by of the rows of the batches that committed (``tests/state/state_child.py``);
"nothing written" compares the full object listing (paths and sizes) and the bytes of every log object
before and after; the log is read as the documents on disk. Races are made deterministic by running the
winner inside the loser's first conditional put of a commit document; the slow tests race two real
writers (threads, processes) fifty times each. Stores of formats 1 and 2 are written by hand here.
"""

from __future__ import annotations

import base64
import hashlib
import json
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from repart.cli.app import app
from repart.errors import Conflict, Corrupt, InvalidInput
from repart.migration import plan_migration
from repart.partitioning import initial_function
from repart.partitioning.consistent import ConsistentSpec
from repart.partitioning.hashing import hash_keys, slots_of_hashes
from repart.state.checksum import checksum, key_hashes, row_hashes
from repart.state.log import HINT, checkpoint_path, commit_path
from repart.state.objects import LocalObjects, Objects, RemoteObjects, objects_at
from repart.state.store import StateStore
from tests.factories import empty_store
from tests.state.state_child import (
    FOLD_ALL,
    REGION,
    SLOT_BITS,
    batch_rows,
    commit_batch,
    create,
    function,
    totals,
    update,
    write_rows,
)

PLAN = plan_migration(function(), function(5))


def contents(objects: Objects) -> dict[str, tuple[int, bytes]]:
    """Every object of a store by path, with its size and, for the log's (where a commit writes), its
    bytes: what "nothing written" compares."""
    return {
        info.path: (info.size, objects.read(info.path) if info.path.startswith("_log/") else b"")
        for info in objects.listing()
    }


def state(store: StateStore) -> dict[str, int]:
    """Each key's total as the store resolves it."""
    table = store.read_merged()
    return dict(zip(table.column("key").to_pylist(), table.column("n").to_pylist(), strict=True))


def document(store: StateStore, generation: int) -> dict[str, Any]:
    parsed: dict[str, Any] = json.loads(store.objects.read(commit_path(generation)))
    return parsed


def based(url: str, options: dict[str, str] | None, batches: int = 1) -> tuple[StateStore, list[pa.Table]]:
    """A store with a base state (generation 1) and ``batches`` batches 1, 2, ... as deltas; the rows of
    each commit, in order."""
    store = create(url, options)
    base = batch_rows(1000, rows=500)
    commit_batch(store, function(), write_rows(store, function(), base, kind="base"), None)
    rows = [base]
    for batch in range(1, batches + 1):
        rows.append(batch_rows(batch, rows=60, channels=[batch % 4]))  # one delta each: few files
        commit_batch(store, function(), write_rows(store, function(), rows[-1]), batch)
    return store, rows


def oracle(*tables: pa.Table) -> dict[str, int]:
    return totals(pa.concat_tables(tables))


def first_to_commit(monkeypatch: pytest.MonkeyPatch, winner: Callable[[], object]) -> list[tuple[str, bool]]:
    """Make ``winner`` run to its end inside the next conditional put of a commit document (so it takes
    the generation the other writer was about to create). Returns every create from then on, in order,
    as (path, created)."""
    creates: list[tuple[str, bool]] = []
    pending = [winner]
    for kind in (LocalObjects, RemoteObjects):
        real: Callable[[Any, str, bytes], bool] = kind.create

        def create(
            self: Any, path: str, data: bytes, _real: Callable[[Any, str, bytes], bool] = real
        ) -> bool:
            if pending and path.startswith("_log/"):
                pending.pop()()
            created = _real(self, path, data)
            creates.append((path, created))
            return created

        monkeypatch.setattr(kind, "create", create)
    return creates


# --- the conditional put --------------------------------------------------------------------------------


def test_exactly_one_creator_of_an_object_wins(store_url: str, store_options: dict[str, str] | None) -> None:
    objects = objects_at(store_url, store_options)
    barrier = threading.Barrier(8)
    results: dict[int, bool] = {}

    def contender(number: int) -> None:
        barrier.wait()
        results[number] = objects.create("_log/race.json", f"writer {number}".encode())

    threads = [threading.Thread(target=contender, args=(number,)) for number in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    winners = [number for number, created in results.items() if created]
    assert len(results) == 8 and len(winners) == 1
    assert objects.read("_log/race.json") == f"writer {winners[0]}".encode()
    assert not objects.create("_log/race.json", b"late")
    assert [info.path for info in objects.listing()] == ["_log/race.json"]  # no temporary left behind


# --- two writers on one generation ------------------------------------------------------------------------

ELSEWHERE, SAME = (2, 3), (0, 1)  # batch 1 wrote deltas to channels 0 and 1 only


def on_backends(cases: list[tuple[Any, ...]], on_s3: list[tuple[Any, ...]]) -> list[Any]:
    """``cases`` on a local directory and those of ``on_s3`` on S3 too (each with ``store_backend`` as
    its first value): the logic under test does not depend on the backend, its object layer does."""
    return [
        pytest.param(backend, *case, id="-".join(map(str, (backend, *case))))
        for backend in ("local", "s3")
        for case in (cases if backend == "local" else on_s3)
    ]


@pytest.mark.parametrize(
    ("store_backend", "loser", "where"),
    on_backends(
        [("compact", "elsewhere"), ("compact", "same"), ("batch", "elsewhere"), ("batch", "same")],
        on_s3=[("compact", "same"), ("batch", "elsewhere")],
    ),
    indirect=["store_backend"],
)
def test_the_loser_of_a_race_rebases_when_the_changes_do_not_overlap(
    store_url: str,
    store_options: dict[str, str] | None,
    monkeypatch: pytest.MonkeyPatch,
    loser: str,
    where: str,
) -> None:
    """A compaction and a batch on other channels, or on the channels it compacts (a batch only adds
    files): whichever loses the conditional put commits at the next generation, on top of the winner."""
    channels = SAME if where == "same" else ELSEWHERE
    store = create(store_url, store_options)
    base, first = batch_rows(1000, rows=500), batch_rows(1, rows=300, channels=SAME)
    commit_batch(store, function(), write_rows(store, function(), base, kind="base"), None)
    assert update(store, function(), 1, first) and store.generation == 2
    second = batch_rows(2, rows=300, channels=channels)
    batch_writer = StateStore.open(store_url, store_options)
    added = write_rows(batch_writer, function(), second)
    assert sorted(added) == list(channels)
    compactor = StateStore.open(store_url, store_options)

    def batch() -> object:
        return commit_batch(batch_writer, function(), added, 2)

    def compaction() -> object:
        assert compactor.compact(FOLD_ALL).channels == SAME
        return compactor

    creates = first_to_commit(monkeypatch, batch if loser == "compact" else compaction)
    (compaction if loser == "compact" else batch)()
    assert creates == [(commit_path(3), True), (commit_path(3), False), (commit_path(4), True)]
    reopened = StateStore.open(store_url, store_options)
    assert reopened.generation == 4 and document(reopened, 4)["parent"] == 3
    assert {document(reopened, 3)["operation"], document(reopened, 4)["operation"]} == {"write", "compact"}
    assert state(reopened) == oracle(base, first, second)
    reopened.verify()
    deltas = {(entry.channel, entry.seq) for entry in reopened.all_files() if entry.kind == "delta"}
    batch_generation = 4 if loser == "batch" else 3
    assert deltas == {(channel, batch_generation) for channel in channels}  # only batch 2's, kept
    assert reopened.last_batch is not None and reopened.last_batch.batch_id == 2


@pytest.mark.parametrize(
    ("store_backend", "loser", "winner"),
    on_backends(
        [("batch", "batch"), ("apply", "batch"), ("batch", "apply"), ("apply", "compact"),
         ("compact", "apply"), ("compact", "compact")],
        on_s3=[("batch", "batch"), ("compact", "apply")],
    ),
    indirect=["store_backend"],
)  # fmt: skip
def test_the_loser_of_a_race_gets_conflict_when_the_changes_overlap(
    store_url: str,
    store_options: dict[str, str] | None,
    monkeypatch: pytest.MonkeyPatch,
    loser: str,
    winner: str,
) -> None:
    """Two batch commits (even on other channels), a plan against anything, two compactions folding
    the same deltas: the loser's commit raises Conflict and writes nothing; the winner's stands."""
    store = create(store_url, store_options)
    base, first = batch_rows(1000, rows=500), batch_rows(1, rows=300, channels=SAME)
    commit_batch(store, function(), write_rows(store, function(), base, kind="base"), None)
    assert update(store, function(), 1, first)
    handles = [StateStore.open(store_url, store_options) for _ in range(2)]
    batches = [batch_rows(2, rows=200, channels=SAME), batch_rows(3, rows=200, channels=ELSEWHERE)]
    written = [write_rows(handle, function(), rows) for handle, rows in zip(handles, batches, strict=True)]

    def operation(which: str, index: int) -> Callable[[], object]:
        handle = handles[index]
        if which == "batch":
            return lambda: commit_batch(handle, function(), written[index], 2 + index)
        if which == "apply":
            return lambda: handle.apply(PLAN, plan_id=1, region=REGION, from_version=1, to_version=2)
        return lambda: handle.compact(FOLD_ALL)

    creates = first_to_commit(monkeypatch, operation(winner, 0))
    with pytest.raises(
        Conflict, match=r"moved on to generation 3 through an? .*; open the store again and retry"
    ):
        operation(loser, 1)()
    assert creates == [(commit_path(3), True), (commit_path(3), False)]
    after = StateStore.open(store_url, store_options)
    logged = [info.path for info in after.objects.listing("_log/")]
    assert logged == [checkpoint_path(0), *(commit_path(number) for number in range(4)), HINT]
    assert document(after, 3)["operation"] == {"batch": "write"}.get(winner, winner)
    assert state(after) == oracle(base, first, *(batches[:1] if winner == "batch" else []))
    assert (after.version, after.n_channels) == ((2, 5) if winner == "apply" else (1, 4))
    after.verify()


# --- torn documents ---------------------------------------------------------------------------------------


def torn(store: StateStore, generation: int, damage: str) -> bytes:
    """What a torn document at ``generation`` holds: garbage, the first half of a real document, or a
    well-formed document whose checksum fails (one field changed after it was computed)."""
    model = store.objects.read(commit_path(store.generation))
    if damage == "garbage":
        return b"\x00\xff{not json"
    if damage == "truncated":
        return model[: len(model) // 2]
    changed = json.loads(model)
    changed.update(
        generation=generation, parent=generation - 1, committed_at_ms=changed["committed_at_ms"] + 1
    )
    return json.dumps(changed, sort_keys=True).encode()


DAMAGES = ["garbage", "truncated", "checksum"]


@pytest.mark.parametrize(
    ("store_backend", "damage"),
    on_backends([(damage,) for damage in DAMAGES], on_s3=[("checksum",)]),
    indirect=["store_backend"],
)
def test_a_torn_newest_commit_is_an_aborted_commit_and_the_next_goes_past_it(
    store_url: str, store_options: dict[str, str] | None, damage: str
) -> None:
    store, rows = based(store_url, store_options)
    store.objects.write(commit_path(3), torn(store, 3, damage))
    opened = StateStore.open(store_url, store_options)
    assert opened.generation == 2 and state(opened) == oracle(*rows)
    second = batch_rows(2, rows=60)
    assert update(opened, function(), 2, second)
    assert opened.generation == 4 and document(opened, 4)["parent"] == 2  # past the torn one
    for hint in (True, False):
        if not hint:
            opened.objects.delete([HINT])
        reopened = StateStore.open(store_url, store_options)
        assert reopened.generation == 4 and state(reopened) == oracle(*rows, second)
        assert reopened.last_batch is not None and reopened.last_batch.batch_id == 2
        reopened.verify()


@pytest.mark.parametrize(
    ("store_backend", "damage"),
    on_backends([(damage,) for damage in DAMAGES], on_s3=[("checksum",)]),
    indirect=["store_backend"],
)
def test_a_torn_commit_that_a_later_one_builds_on_is_corrupt_naming_it(
    store_url: str, store_options: dict[str, str] | None, damage: str
) -> None:
    store, _ = based(store_url, store_options, batches=3)
    assert store.generation == 4
    store.objects.write(commit_path(3), torn(store, 3, damage))
    for hint in (True, False):
        if not hint:
            store.objects.delete([HINT])
        with pytest.raises(Corrupt, match="later commits build on is damaged") as raised:
            StateStore.open(store_url, store_options)
        assert raised.value.path == commit_path(3)
    with pytest.raises(Corrupt) as refused:  # a writer is refused as well: nothing builds past it
        update(store, function(), 4, batch_rows(4, rows=60))
    assert refused.value.path == commit_path(3)
    assert not store.objects.size(commit_path(5))


# --- hint and checkpoints ---------------------------------------------------------------------------------


def twelve_generations(url: str, options: dict[str, str] | None) -> StateStore:
    """A store at generation 12 (checkpoints at 0 and 10) whose state is the oracle's."""
    store, rows = based(url, options, batches=11)
    assert store.generation == 12 and state(store) == oracle(*rows)
    logged = {info.path for info in store.objects.listing("_log/")}
    assert {checkpoint_path(0), checkpoint_path(10)} <= logged and checkpoint_path(12) not in logged
    return store


def same_generation(opened: StateStore, store: StateStore) -> bool:
    """Whether ``opened`` holds ``store``'s generation: the same number, listing (every file entry, so
    the same state) and last batch."""
    return (opened.generation, opened.all_files(), opened.last_batch) == (
        store.generation,
        store.all_files(),
        store.last_batch,
    )


def test_a_missing_stale_or_damaged_hint_costs_a_listing_never_an_error(
    store_url: str, store_options: dict[str, str] | None
) -> None:
    store = twelve_generations(store_url, store_options)
    assert json.loads(store.objects.read(HINT)) == {"generation": 12, "checkpoint": 10}
    hints: dict[str, bytes | None] = {
        "missing": None,
        "stale": b'{"checkpoint": 0, "generation": 1}',
        "beyond": b'{"checkpoint": 20, "generation": 25}',
        "empty": b"",
        "garbage": b"\x00\xff{",
        "a list": b"[10, 12]",
        "negative": b'{"checkpoint": -10, "generation": 12}',
        "a string": b'{"checkpoint": "10", "generation": "12"}',
    }
    for name, hint in hints.items():
        if hint is None:
            store.objects.delete([HINT])
        else:
            store.objects.write(HINT, hint)
        opened = StateStore.open(store_url, store_options)
        assert same_generation(opened, store), name
    assert update(opened, function(), 12, batch_rows(12, rows=60))  # and the next commit writes it anew
    assert json.loads(store.objects.read(HINT))["generation"] == 13
    assert StateStore.open(store_url, store_options).generation == 13


def test_a_missing_or_damaged_checkpoint_falls_back_to_an_older_one_or_the_commits(
    store_url: str, store_options: dict[str, str] | None
) -> None:
    store = twelve_generations(store_url, store_options)
    saved = {number: store.objects.read(checkpoint_path(number)) for number in (0, 10)}
    changed = json.loads(saved[10])
    changed["files"] = changed["files"][1:]  # well-formed, but its checksum fails
    damages: dict[str, dict[int, bytes | None]] = {
        "newest missing": {10: None},
        "newest garbage": {10: b"\x00{"},
        "newest checksum": {10: json.dumps(changed, sort_keys=True).encode()},
        "all missing": {0: None, 10: None},
        "newest damaged, oldest missing": {0: None, 10: b"{}"},
    }
    for name, damage in damages.items():
        for number, data in damage.items():
            if data is None:
                store.objects.delete([checkpoint_path(number)])
            else:
                store.objects.write(checkpoint_path(number), data)
        for hint in (True, False):
            if not hint:
                store.objects.delete([HINT])
            assert same_generation(StateStore.open(store_url, store_options), store), (name, hint)
            store.objects.write(HINT, b'{"checkpoint": 10, "generation": 12}')
        for number, data in saved.items():
            store.objects.write(checkpoint_path(number), data)


# --- exactly once -----------------------------------------------------------------------------------------


def test_a_batch_absorbed_already_is_refused_and_nothing_is_written(
    store_url: str, store_options: dict[str, str] | None
) -> None:
    store = create(store_url, store_options)
    base, first = batch_rows(1000, rows=500), batch_rows(1, rows=200)
    commit_batch(store, function(), write_rows(store, function(), base, kind="base"), None)
    stale = StateStore.open(store_url, store_options)  # opened before batch 1 committed
    assert update(store, function(), 1, first) and store.absorbed(1) and not store.absorbed(2)
    assert not stale.absorbed(1)
    for handle, batch_id, message in (
        (store, 1, "batch 1 is already in the state store"),
        (store, 0, "batch 0 is already in the state store"),
        (stale, 1, "moved on to generation 2 through a commit that absorbed batch 1"),
    ):
        added = write_rows(handle, function(), first)
        before = contents(store.objects)
        with pytest.raises(Conflict, match=message):
            commit_batch(handle, function(), added, batch_id)
        assert contents(store.objects) == before
    assert not update(StateStore.open(store_url, store_options), function(), 1, first)  # a job's rerun
    reopened = StateStore.open(store_url, store_options)
    assert reopened.generation == 2 and state(reopened) == oracle(base, first)


# --- vacuum -----------------------------------------------------------------------------------------------


def next_second() -> datetime:
    """Sleep past the next whole second and return it: every object written before has a modification
    time before it (S3 lists them to the second), every object written after one at or after it."""
    now = time.time()
    boundary = int(now) + 1
    time.sleep(boundary - now + 0.05)
    return datetime.fromtimestamp(boundary, UTC)


def test_vacuum_deletes_by_age_what_no_recent_generation_lists(
    store_url: str, store_options: dict[str, str] | None
) -> None:
    """Generations 0-11 (batches, each folded by a compaction), an unlisted data file, then (a second
    later) generations 12 and 13 and another unlisted file. Vacuum with the cutoff between them keeps
    what generations 11 (newest at the cutoff), 12 and 13 list and every younger object, and deletes
    the other data files and the log documents before checkpoint 10, which 11-13 replay from."""
    store = create(store_url, store_options)
    rows = [batch_rows(1000, rows=300)]
    commit_batch(store, function(), write_rows(store, function(), rows[0], kind="base"), None)
    listed = {1: {entry.path for entry in store.all_files()}}

    def step(generation: int) -> None:
        if generation % 2:
            assert store.compact(FOLD_ALL).compacted
        else:
            rows.append(batch_rows(generation, rows=40, channels=[generation // 2 % 4]))
            assert update(store, function(), generation, rows[-1])
        assert store.generation == generation
        listed[generation] = {entry.path for entry in store.all_files()}

    for generation in range(2, 12):
        step(generation)
    (early,) = store.write(0, batch_rows(500, rows=10, channels=[0]))
    cutoff = next_second()
    for generation in (12, 13):
        step(generation)
    (late,) = store.write(1, batch_rows(501, rows=10, channels=[1]))
    before = store.objects.listing()
    assert not store.vacuum(timedelta(hours=1)).deleted  # nothing is an hour old
    assert store.objects.listing() == before

    kept_listings = listed[11] | listed[12] | listed[13]
    expected = sorted(
        info.path
        for info in before
        if info.modified < cutoff
        and (
            (info.path.startswith("data/") and info.path not in kept_listings)
            or info.path in {commit_path(n) for n in range(10)} | {checkpoint_path(0)}
        )
    )
    result = store.vacuum(timedelta(hours=1), now=cutoff + timedelta(hours=1))
    assert list(result.deleted) == expected and result.kept_objects == len(before) - len(expected)
    assert early.path in expected and late.path not in expected
    assert listed[11] - listed[13] and not (listed[11] - listed[13]) & set(expected)  # 11's files kept
    assert listed[2] - kept_listings <= set(expected) and commit_path(0) in expected
    remaining = {info.path for info in store.objects.listing()}
    assert remaining == {info.path for info in before} - set(expected)
    for hint in (True, False):
        if not hint:
            store.objects.delete([HINT])
        reopened = StateStore.open(store_url, store_options)
        assert reopened.generation == 13 and state(reopened) == oracle(*rows)
        reopened.verify()

    final = reopened.vacuum(0, now=datetime.now(UTC) + timedelta(days=1))  # everything is old now
    assert {info.path for info in store.objects.listing("data/")} == listed[13]  # the newest's, always
    assert late.path in final.deleted
    assert state(StateStore.open(store_url, store_options)) == oracle(*rows)


@pytest.mark.parametrize("retain", [-1.0, 10 * 365 * 86400 + 1.0, timedelta(days=-1), float("nan")])
def test_vacuum_refuses_a_retention_out_of_range(tmp_path: Path, retain: float | timedelta) -> None:
    store, _ = based(str(tmp_path / "store"), None)
    before = contents(store.objects)
    with pytest.raises(InvalidInput) as raised:
        store.vacuum(retain, now=datetime.now(UTC) + timedelta(days=1))
    assert raised.value.field == "retain"
    assert contents(store.objects) == before


def test_a_writer_whose_commits_were_vacuumed_gets_conflict_not_corrupt(tmp_path: Path) -> None:
    """A handle left at generation 2 while vacuum deleted the commits before checkpoint 10: its commit
    is a Conflict (open the store again), not Corrupt, and nothing is written."""
    url = str(tmp_path / "store")
    store, rows = based(url, None, batches=1)
    stale = StateStore.open(url)
    for batch in range(2, 12):
        rows.append(batch_rows(batch, rows=60, channels=[batch % 4]))
        commit_batch(store, function(), write_rows(store, function(), rows[-1]), batch)
    deleted = store.vacuum(0, now=datetime.now(UTC) + timedelta(days=1)).deleted
    assert commit_path(3) in deleted and commit_path(10) not in deleted
    entries = write_rows(stale, function(), batch_rows(12, rows=60, channels=[0]))
    before = contents(store.objects)
    with pytest.raises(Conflict, match="vacuum deleted the commits after it"):
        commit_batch(stale, function(), entries, 12)
    assert contents(store.objects) == before
    assert state(StateStore.open(url)) == oracle(*rows)


# --- races between real writers (slow) --------------------------------------------------------------------

RACES = 50


def schedule(race: int) -> list[dict[str, Any]]:
    """The two writers of race ``race``: disjoint channels or the same ones, with batch ids (exactly
    one of them can commit) or without (both commit, the loser rebased)."""
    same, tagged = bool(race % 2), race % 4 < 2
    channels = [[0, 1, 2, 3], [0, 1, 2, 3]] if same else [[0, 1], [2, 3]]
    return [
        {
            "seed": 10_000 + 2 * race + writer,
            "channels": channels[writer],
            "batch_id": 2 * race + 2 + writer if tagged else None,
        }
        for writer in range(2)
    ]


def check_races(
    url: str, options: dict[str, str] | None, base: pa.Table, outcomes: list[list[dict[str, Any]]]
) -> None:
    """Every tagged race committed exactly one batch and the other writer got Conflict; every untagged
    race committed both; the log holds each committed batch once; each key's total is the oracle's
    over the base and the rows of the writers that committed."""
    committed = [base]
    ids = []
    for race, results in enumerate(outcomes):
        writers = schedule(race)
        won = [result["committed"] for result in results]
        tagged = writers[0]["batch_id"] is not None
        assert won.count(True) == (1 if tagged else 2), (race, results)
        base_generation = results[0]["base"]
        assert results[1]["base"] == base_generation  # both prepared on the same generation
        generations = sorted(result["generation"] for result in results if result["committed"])
        assert generations == [base_generation + 1, base_generation + 2][: len(generations)], (race, results)
        for writer, result in zip(writers, results, strict=True):
            if result["committed"]:
                committed.append(batch_rows(writer["seed"], channels=writer["channels"]))
                if tagged:
                    ids.append(writer["batch_id"])
            else:
                assert "through a commit that absorbed batch" in result["conflict"]
    store = StateStore.open(url, options)
    documents = [
        json.loads(store.objects.read(commit_path(number))) for number in range(store.generation + 1)
    ]
    assert [d["batch"]["id"] for d in documents if "batch" in d] == [1, *ids]  # each once, in order
    assert store.generation == 2 + sum(
        won for results in outcomes for won in (r["committed"] for r in results)
    )
    assert state(store) == totals(pa.concat_tables(committed))
    store.verify()


def race_base(url: str, options: dict[str, str] | None) -> pa.Table:
    store = create(url, options)
    base = batch_rows(1000, rows=500)
    commit_batch(store, function(), write_rows(store, function(), base, kind="base"), None)
    first = batch_rows(1, rows=60)
    assert update(store, function(), 1, first)
    return pa.concat_tables([base, first])


@pytest.mark.slow
def test_two_writer_races_between_threads(
    store_url: str, store_options: dict[str, str] | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    base = race_base(store_url, store_options)
    collisions = []
    for kind in (LocalObjects, RemoteObjects):
        real: Callable[[Any, str, bytes], bool] = kind.create

        def counted(
            self: Any, path: str, data: bytes, _real: Callable[[Any, str, bytes], bool] = real
        ) -> bool:
            created = _real(self, path, data)
            if not created:
                collisions.append(path)
            return created

        monkeypatch.setattr(kind, "create", counted)
    outcomes = []
    for race in range(RACES):
        barrier = threading.Barrier(2)
        results: list[dict[str, Any]] = [{}, {}]

        def writer(
            index: int,
            command: dict[str, Any],
            barrier: threading.Barrier = barrier,
            results: list[dict[str, Any]] = results,
        ) -> None:
            store = StateStore.open(store_url, store_options)
            base_generation = store.generation
            added = write_rows(store, function(), batch_rows(command["seed"], channels=command["channels"]))
            barrier.wait()
            try:
                commit_batch(store, function(), added, command["batch_id"])
                results[index] = {"committed": True, "generation": store.generation, "base": base_generation}
            except Conflict as error:
                results[index] = {"committed": False, "conflict": str(error), "base": base_generation}

        threads = [
            threading.Thread(target=writer, args=(index, command))
            for index, command in enumerate(schedule(race))
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        outcomes.append(results)
    check_races(store_url, store_options, base, outcomes)
    assert collisions  # the writers did meet on the same generation


@pytest.mark.slow
def test_two_writer_races_between_processes(store_url: str, store_options: dict[str, str] | None) -> None:
    base = race_base(store_url, store_options)
    child = Path(__file__).with_name("state_child.py")
    workers = [
        subprocess.Popen(
            [sys.executable, str(child), "serve"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
        )
        for _ in range(2)
    ]

    def tell(worker: subprocess.Popen[str], line: str) -> None:
        assert worker.stdin is not None
        worker.stdin.write(line + "\n")
        worker.stdin.flush()

    def answer(worker: subprocess.Popen[str]) -> dict[str, Any]:
        assert worker.stdout is not None
        line = worker.stdout.readline()
        assert line, "a racing writer died"
        parsed: dict[str, Any] = json.loads(line)
        return parsed

    outcomes = []
    try:
        for race in range(RACES):
            for worker, command in zip(workers, schedule(race), strict=True):
                tell(worker, json.dumps({**command, "url": store_url, "options": store_options}))
            bases = {answer(worker)["ready"] for worker in workers}
            assert len(bases) == 1  # both prepared on the same generation
            for worker in workers:
                tell(worker, "go")
            outcomes.append([answer(worker) for worker in workers])
    finally:
        for worker in workers:
            if worker.poll() is None:
                tell(worker, "")
            try:
                worker.wait(timeout=30)
            except subprocess.TimeoutExpired:
                worker.kill()
    check_races(store_url, store_options, base, outcomes)
    assert sum(result["lost"] for results in outcomes for result in results)  # they met on a generation


# --- formats 1 and 2 --------------------------------------------------------------------------------------

LEGACY_GENERATION = 3
LEGACY_PLAN = (1, "ab" * 32)


def legacy_file(root: Path, channel: int, rows: pa.Table) -> str:
    """``rows`` (key, n, _slot; sorted by slot) as a format-2 data file of ``channel``; its path."""
    path = f"channel={channel}/{uuid.uuid4().hex}.parquet"
    (root / path).parent.mkdir(parents=True, exist_ok=True)
    pq.write_table(rows, root / path)
    return path


def legacy_entry(root: Path, path: str, channel: int, group: int, rows: pa.Table) -> dict[str, Any]:
    """The generation document's entry of a file holding ``rows`` (all seen)."""
    return {
        "path": path,
        "channel": channel,
        "slot_group": group,
        "rows": rows.num_rows,
        "bytes": (root / path).stat().st_size,
        "checksum": f"{row_checksum(rows):016x}",
    }


def row_checksum(rows: pa.Table) -> int:
    """The format's checksum of rows: the sum modulo 2^64 of their row hashes (repart.state.checksum)."""
    return checksum(row_hashes(rows, key_hashes(rows.column("key"), "str"), ["n"]))


def legacy_store(root: Path, version: int) -> pa.Table:
    """A store of format ``version`` (1 or 2) written by hand as ``repart.state.legacy`` documents it:
    two channels, two slot groups, a MANIFEST naming generation 3 (older generation documents beside
    it), and in format 2 one entry whose slot filter hides the slots whose rows a migration moved to
    channel 1 (into a file of their own). Returns the rows readers must see, with their channel."""
    layout = initial_function(2, "str", SLOT_BITS, ConsistentSpec("jump"))  # the default of those formats
    keys = [f"k{i}" for i in range(400)]
    slots = slots_of_hashes(hash_keys(keys), SLOT_BITS)
    channels = layout.lookup_many(keys)
    table = pa.table(
        {"key": keys, "n": [3 * i + 1 for i in range(400)], "_slot": pa.array(slots, pa.int32())},
        schema=pa.schema([("key", pa.string()), ("n", pa.int64()), ("_slot", pa.int32())]),
    )
    seen, entries = [], []
    shift = SLOT_BITS - 1  # two slot groups
    for channel in (0, 1):
        for group in (0, 1):
            mask = (channels == channel) & ((slots >> shift) == group)
            rows = table.filter(pa.array(mask)).sort_by("_slot")
            path = legacy_file(root, channel, rows)
            entry = legacy_entry(root, path, channel, group, rows)
            if version == 2 and (channel, group) == (0, 0):  # slots up to `last` moved to channel 1
                last = rows.column("_slot")[9].as_py()
                moved = rows.filter(pc.less_equal(rows.column("_slot"), last))
                rows = rows.filter(pc.greater(rows.column("_slot"), last))
                entry.update(
                    rows=rows.num_rows,
                    checksum=f"{row_checksum(rows):016x}",
                    filter={"rows": moved.num_rows, "slots": [[0, last]]},
                )
                moved_path = legacy_file(root, 1, moved)
                entries.append(legacy_entry(root, moved_path, 1, 0, moved))
                seen.append(moved.append_column("channel", pa.array([1] * moved.num_rows, pa.int32())))
            entries.append(entry)
            seen.append(rows.append_column("channel", pa.array([channel] * rows.num_rows, pa.int32())))
    schema = pa.schema([("key", pa.string()), ("n", pa.int64())])
    generation = {
        "format": version,
        "generation": LEGACY_GENERATION,
        "region": REGION,
        "version": 2,
        "function_digest": layout.digest,
        "n_channels": 2,
        "slot_bits": SLOT_BITS,
        "slot_groups": 2,
        "key_type": "str",
        "key_col": "key",
        "schema": base64.b64encode(schema.serialize().to_pybytes()).decode("ascii"),
        "applied_plans": [list(LEGACY_PLAN)],
        "files": entries,
        "batch": {"id": 7, "channels": [[0, 10, 200, 3000, 0.5], [1, 12, 200, 3100, 0.25]]},
    }
    text = json.dumps(generation, sort_keys=True)
    (root / "generations").mkdir()
    (root / "generations" / "00000002.json").write_text('{"an older": "generation"}', encoding="utf-8")
    (root / "generations" / f"{LEGACY_GENERATION:08d}.json").write_text(text, encoding="utf-8")
    manifest = {
        "format": version,
        "generation": LEGACY_GENERATION,
        "sha256": hashlib.sha256(text.encode()).hexdigest(),
    }
    (root / "MANIFEST").write_text(json.dumps(manifest), encoding="utf-8")
    return pa.concat_tables(seen).drop_columns(["_slot"])


def directory(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` by relative path, with its bytes."""
    return {
        path.relative_to(root).as_posix(): path.read_bytes() for path in root.rglob("*") if path.is_file()
    }


def by_key(table: pa.Table) -> list[dict[str, Any]]:
    rows: list[dict[str, Any]] = table.select(["key", "n", "channel"]).sort_by("key").to_pylist()
    return rows


@pytest.mark.parametrize("version", [1, 2])
def test_a_legacy_store_opens_as_it_is_and_reads_like_its_files(tmp_path: Path, version: int) -> None:
    expected = legacy_store(tmp_path, version)
    before = directory(tmp_path)
    store = StateStore.open(tmp_path)
    assert (store.format, store.generation, store.version, store.n_channels) == (2, LEGACY_GENERATION, 2, 2)
    assert by_key(store.read()) == by_key(expected) and store.rows() == expected.num_rows == 400
    assert store.checksum() == row_checksum(expected)  # the sum of what the entries state
    assert store.applied_plans == (1,) and store.last_batch is not None and store.last_batch.batch_id == 7
    assert sum(entry.filter is not None for entry in store.all_files()) == (version == 2)
    store.verify()
    assert directory(tmp_path) == before  # reading writes nothing


@pytest.mark.parametrize("how", ["cli", "api"])
@pytest.mark.parametrize("version", [1, 2])
def test_upgrading_a_legacy_store_is_one_verified_commit_that_copies_no_data(
    tmp_path: Path, version: int, how: str
) -> None:
    expected = legacy_store(tmp_path, version)
    legacy = StateStore.open(tmp_path)
    files, rows, total = legacy.all_files(), legacy.rows(), legacy.checksum()
    data = {path: data for path, data in directory(tmp_path).items() if path.startswith("channel=")}
    if how == "cli":
        outcome = CliRunner().invoke(app, ["state", "upgrade", "--state", str(tmp_path), "--json"])
        assert outcome.exit_code == 0, outcome.output
        assert json.loads(outcome.stdout) == {
            "state": str(tmp_path),
            "upgraded": True,
            "format": 3,
            "generation": 0,
        }
    else:
        assert legacy.upgrade() and legacy.format == 3
    after = directory(tmp_path)
    assert {path: data for path, data in after.items() if path.startswith("channel=")} == data  # same bytes
    assert not any(path.startswith("data/") for path in after)  # nothing copied
    assert sorted(path for path in after if path.startswith("_log/")) == [
        checkpoint_path(0),
        commit_path(0),
        HINT,
    ]  # one commit
    store = StateStore.open(tmp_path)
    assert document(store, 0)["operation"] == "upgrade"
    assert (store.format, store.generation, store.version, store.n_channels) == (3, 0, 2, 2)
    assert set(store.all_files()) == set(files) and len(files) == 4 + version - 1  # the same entries
    assert (store.rows(), store.checksum()) == (rows, total) and rows == expected.num_rows
    assert by_key(store.read()) == by_key(expected)
    assert store.applied_plans == (1,) and store.last_batch is not None and store.last_batch.batch_id == 7
    store.verify()
    assert not store.upgrade()  # format 3 already
    outcome = CliRunner().invoke(app, ["state", "upgrade", "--state", str(tmp_path)])
    assert outcome.exit_code == 0 and "is format 3 already (generation 0)" in outcome.stdout


def test_a_later_format_in_a_legacy_manifest_or_generation_is_corrupt_naming_it(tmp_path: Path) -> None:
    legacy_store(tmp_path, 2)
    manifest = tmp_path / "MANIFEST"
    fields = json.loads(manifest.read_text(encoding="utf-8"))
    manifest.write_text(json.dumps({**fields, "format": 4}), encoding="utf-8")
    with pytest.raises(Corrupt, match="in format 4") as raised:
        StateStore.open(tmp_path)
    assert raised.value.path == "MANIFEST"
    generation = tmp_path / "generations" / f"{LEGACY_GENERATION:08d}.json"
    text = generation.read_text(encoding="utf-8").replace('"format": 2', '"format": 5')
    generation.write_text(text, encoding="utf-8")
    manifest.write_text(
        json.dumps({**fields, "sha256": hashlib.sha256(text.encode()).hexdigest()}), encoding="utf-8"
    )
    with pytest.raises(Corrupt, match="in format 5") as raised:
        StateStore.open(tmp_path)
    assert raised.value.path == f"generations/{LEGACY_GENERATION:08d}.json"


@pytest.mark.parametrize("how", ["cli", "api"])
def test_a_damaged_legacy_file_makes_the_upgrade_corrupt_with_nothing_written(
    tmp_path: Path, how: str
) -> None:
    legacy_store(tmp_path, 2)
    victim = StateStore.open(tmp_path).all_files()[2]
    (tmp_path / victim.path).write_bytes((tmp_path / victim.path).read_bytes()[:-30])
    before = directory(tmp_path)
    if how == "cli":
        outcome = CliRunner().invoke(app, ["state", "upgrade", "--state", str(tmp_path)])
        assert outcome.exit_code == 4 and "Traceback" not in outcome.output
        assert outcome.stderr.startswith(f"error: {victim.path}: state file cannot be read")
    else:
        with pytest.raises(Corrupt) as raised:
            StateStore.open(tmp_path).upgrade()
        assert raised.value.path == victim.path
    assert directory(tmp_path) == before
    assert StateStore.open(tmp_path).format == 2


# --- changes that do not fit, lost updates, half-done upgrades, failed hints -----------------------------


def test_a_commit_that_lists_a_file_twice_is_refused_before_anything_is_written(tmp_path: Path) -> None:
    store, rows = based(str(tmp_path / "store"), None)
    entries = write_rows(store, function(), batch_rows(7, rows=60, channels=[1]))
    before = contents(store.objects)
    with pytest.raises(InvalidInput, match=r"added\[1\] must list new files, each once") as raised:
        commit_batch(store, function(), {1: [*entries[1], *entries[1]]}, 7)
    assert raised.value.field == "added[1]"
    assert contents(store.objects) == before
    assert state(StateStore.open(store.url)) == oracle(*rows)


def test_two_writes_to_a_general_channel_without_batch_ids_do_not_lose_an_update(tmp_path: Path) -> None:
    """A general store's write reads the channel's state before it writes (read, combine, write): a second
    writer that read the same generation must not commit over the first one's update."""
    function_ = initial_function(2, "str", SLOT_BITS)
    table = pa.table({"key": ["a", "b"], "n": [1, 1]})
    store = empty_store(tmp_path / "s", function_, table.schema, slot_groups=4)
    channel = int(function_.lookup("a"))
    store.commit({channel: store.write(channel, table.slice(0, 1), kind="base")},
                 version=1, function_digest=function_.digest, n_channels=2)  # fmt: skip
    first, second = StateStore.open(store.url), StateStore.open(store.url)
    for handle in (first, second):
        old = handle.read_keys(channel, pa.array(["a"]))
        handle_entries = handle.write(
            channel, pa.table({"key": ["a"], "n": [old.column("n")[0].as_py() + 1]})
        )
        if handle is first:
            handle.commit(
                {channel: handle_entries}, version=1, function_digest=function_.digest, n_channels=2
            )
            continue
        before = contents(store.objects)
        with pytest.raises(Conflict, match=f"a write to channel {channel}, whose state this write read"):
            handle.commit(
                {channel: handle_entries}, version=1, function_digest=function_.digest, n_channels=2
            )
        assert {path for path in contents(store.objects) if path.startswith("_log/0")} == {
            path for path in before if path.startswith("_log/0")
        }
    assert StateStore.open(store.url).read_keys(channel, pa.array(["a"])).column("n").to_pylist() == [2]


def test_a_legacy_store_with_a_killed_upgrades_temporary_still_opens_and_upgrades(tmp_path: Path) -> None:
    expected = legacy_store(tmp_path, 2)
    (tmp_path / "_log").mkdir()
    (tmp_path / "_log" / ".00000000000000000000.json.k1ll3d").write_text('{"format":3,"gen')
    store = StateStore.open(tmp_path)
    assert store.format == 2 and store.read().num_rows == expected.num_rows
    assert store.upgrade() and StateStore.open(tmp_path).format == 3


def test_a_commit_stands_when_its_hint_cannot_be_written(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    store, rows = based(str(tmp_path / "store"), None)
    original = LocalObjects.write

    def refusing_the_hint(self: LocalObjects, path: str, data: bytes) -> None:
        if path == HINT:
            raise OSError("disk full")
        original(self, path, data)

    monkeypatch.setattr(LocalObjects, "write", refusing_the_hint)
    rows.append(batch_rows(9, rows=60, channels=[2]))
    committed = commit_batch(store, function(), write_rows(store, function(), rows[-1]), 9)
    assert committed.generation == 3 and state(StateStore.open(store.url)) == oracle(*rows)
