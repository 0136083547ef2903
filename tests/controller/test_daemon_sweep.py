"""The daemon's sweep (issue #9): discovery, skipped overruns, pool sizing, stop."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, func, select

from repart.controller.daemon import Daemon, DaemonConfig
from repart.controller.tick import TickResult, tick
from repart.errors import InvalidInput
from repart.storage import acquire_lease, current_lease, models, run_in_transaction
from repart.storage.leases import region_leases
from tests.cli.helpers import repart
from tests.factories import add_region


class Recorder:
    """A ticker that records the regions it ticks and, while ``gate`` is clear, blocks before ticking;
    ``started`` and ``done`` count the ticks begun and finished."""

    def __init__(self, blocked: bool = False) -> None:
        self.ticked: list[str] = []
        self.started = threading.Semaphore(0)
        self.done = threading.Semaphore(0)
        self.gate = threading.Event()
        if not blocked:
            self.gate.set()

    def __call__(self, engine: Engine, region: str, **kwargs: Any) -> TickResult:
        self.started.release()
        assert self.gate.wait(30), "the test never opened the gate"
        self.ticked.append(region)
        try:
            return tick(engine, region, **kwargs)
        finally:
            self.done.release()


def lease_count(engine: Engine) -> int:
    return run_in_transaction(
        engine, lambda session: session.scalar(select(func.count()).select_from(models.Lease))
    )


def test_region_leases_lists_every_region_with_its_lease(engine: Engine) -> None:
    for name in ("b", "a"):
        add_region(engine, name)
    now = datetime.now(UTC)
    run_in_transaction(engine, lambda session: acquire_lease(session, "b", "other", 10.0, now))
    leases = run_in_transaction(engine, region_leases)
    assert [(lease.region, lease.holder) for lease in leases] == [("a", None), ("b", "other")]
    assert leases[1].held_by_another("me", now)
    assert not leases[1].held_by_another("other", now)
    assert not leases[1].held_by_another("me", now + timedelta(seconds=10))  # expired
    assert not leases[0].held_by_another("me", now)


def test_a_sweep_ticks_a_region_created_after_the_previous_sweep(engine: Engine) -> None:
    add_region(engine, "alpha")
    recorder = Recorder()
    daemon = Daemon(engine, DaemonConfig(1, 5, holder="me"), ticker=recorder)
    try:
        assert daemon.sweep() == 1
        assert recorder.done.acquire(timeout=30)
        add_region(engine, "beta")
        assert daemon.sweep() == 2
        for _ in range(2):
            assert recorder.done.acquire(timeout=30)
    finally:
        daemon.stop()
    assert sorted(recorder.ticked) == ["alpha", "alpha", "beta"]
    assert lease_count(engine) == 0


def test_a_region_still_running_is_skipped_and_counted_not_queued(engine: Engine) -> None:
    for name in ("alpha", "beta"):
        add_region(engine, name)
    recorder = Recorder(blocked=True)
    daemon = Daemon(engine, DaemonConfig(1, 5, holder="me", workers=2), ticker=recorder)
    try:
        assert daemon.sweep() == 2
        for _ in range(2):
            assert recorder.started.acquire(timeout=30)
        assert daemon.sweep() == 0
        assert daemon.sweep() == 0
        assert daemon.overruns == 4
        recorder.gate.set()
    finally:
        daemon.stop()
    assert sorted(recorder.ticked) == ["alpha", "beta"]  # the skipped sweeps queued nothing


def test_a_region_another_daemon_holds_is_not_ticked_until_its_lease_expires(engine: Engine) -> None:
    add_region(engine, "alpha")
    now = datetime.now(UTC)
    first = run_in_transaction(engine, lambda session: acquire_lease(session, "alpha", "other", 1.0, now))
    recorder = Recorder()
    daemon = Daemon(engine, DaemonConfig(1, 5, holder="me"), ticker=recorder)
    try:
        assert daemon.sweep() == 0
        assert recorder.ticked == []
        threading.Event().wait(max(0.0, (now + timedelta(seconds=1.1) - datetime.now(UTC)).total_seconds()))
        assert daemon.sweep() == 1
        assert recorder.done.acquire(timeout=30)
    finally:
        daemon.stop()
    assert recorder.ticked == ["alpha"]
    lease = run_in_transaction(engine, lambda session: current_lease(session, "alpha"))
    assert lease is None  # released by stop(); while held it was "me"'s, with a new token:
    taken = run_in_transaction(
        engine,
        lambda session: session.scalar(
            select(models.Region.lease_token).where(models.Region.name == "alpha")
        ),
    )
    assert first is not None and taken == first + 1


def test_stop_drops_the_queued_ticks_and_waits_for_the_running_one(engine: Engine) -> None:
    for name in ("alpha", "beta"):
        add_region(engine, name)
    recorder = Recorder(blocked=True)
    daemon = Daemon(engine, DaemonConfig(1, 5, holder="me", workers=1), ticker=recorder)
    daemon.sweep()
    assert recorder.started.acquire(timeout=30)  # alpha runs, beta waits for the one thread
    stopper = threading.Thread(target=daemon.stop)
    stopper.start()
    stopper.join(timeout=0.5)
    assert stopper.is_alive(), "stop() returned while a tick was running"
    recorder.gate.set()
    stopper.join(timeout=30)
    assert not stopper.is_alive()
    assert recorder.ticked == ["alpha"]
    assert lease_count(engine) == 0  # alpha's lease released; beta's never taken
    assert daemon.sweep() == 0  # a stopped daemon hands nothing to its threads


def test_a_pool_smaller_than_the_workers_need_is_refused(db_url: str) -> None:
    small = create_engine(db_url, pool_size=3, max_overflow=0)
    try:
        with pytest.raises(InvalidInput, match="workers"):
            Daemon(small, DaemonConfig(1, 5, workers=2))  # 2 workers + sweep + spool = 4 > 3
        Daemon(small, DaemonConfig(1, 5, workers=1)).stop()
    finally:
        small.dispose()


@pytest.mark.parametrize("workers", [0, 257, 1.5, "4"])
def test_a_bad_worker_count_names_the_field(workers: Any) -> None:
    with pytest.raises(InvalidInput, match="workers"):
        DaemonConfig(workers=workers)


def test_repart_run_names_its_workers_option(db_url: str) -> None:
    result = repart(db_url, "run", "--once", "--workers", "0")
    assert result.exit_code == 2
    assert "--workers must be" in result.output
