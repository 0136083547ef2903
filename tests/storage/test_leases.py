"""Leases: one active controller per region, race-safe on both backends (DESIGN §7, §8)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine

from repart.errors import NotFound
from repart.storage import acquire_lease, current_lease, release_lease, run_in_transaction

from .helpers import add_region

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _acquire(engine: Engine, holder: str, now: datetime, ttl: float = 30.0, region: str = "trades") -> bool:
    return run_in_transaction(engine, lambda s: acquire_lease(s, region, holder, ttl, now))


def test_acquire_renew_and_expiry_takeover(engine: Engine) -> None:
    add_region(engine)
    assert _acquire(engine, "a", T0)
    assert not _acquire(engine, "b", T0 + timedelta(seconds=10))
    assert _acquire(engine, "a", T0 + timedelta(seconds=20))  # renewal
    lease = run_in_transaction(engine, lambda s: current_lease(s, "trades"))
    assert lease is not None and lease.holder == "a"
    assert (lease.acquired_at, lease.expires_at) == (T0, T0 + timedelta(seconds=50))
    assert not _acquire(engine, "b", T0 + timedelta(seconds=49))
    assert _acquire(engine, "b", T0 + timedelta(seconds=50))  # expired: taken over
    lease = run_in_transaction(engine, lambda s: current_lease(s, "trades"))
    assert lease is not None and (lease.holder, lease.acquired_at) == ("b", T0 + timedelta(seconds=50))


def test_release(engine: Engine) -> None:
    add_region(engine)
    assert _acquire(engine, "a", T0)
    assert not run_in_transaction(engine, lambda s: release_lease(s, "trades", "b"))
    assert run_in_transaction(engine, lambda s: release_lease(s, "trades", "a"))
    assert run_in_transaction(engine, lambda s: current_lease(s, "trades")) is None
    assert _acquire(engine, "b", T0)


def test_unknown_region_and_bad_arguments(engine: Engine) -> None:
    add_region(engine)
    with pytest.raises(NotFound, match="unknown region 'nope'"):
        _acquire(engine, "a", T0, region="nope")
    with pytest.raises(NotFound, match="unknown region 'nope'"):
        run_in_transaction(engine, lambda s: release_lease(s, "nope", "a"))
    with pytest.raises(ValueError, match="ttl_seconds must be in"):
        _acquire(engine, "a", T0, ttl=0)
    with pytest.raises(ValueError, match="holder must be a string"):
        _acquire(engine, "", T0)


@pytest.mark.parametrize("expired", [False, True], ids=["free", "expired"])
def test_two_controllers_racing_for_a_region_exactly_one_wins(engine: Engine, expired: bool) -> None:
    regions = [f"r{i}" for i in range(8)]
    for name in regions:
        add_region(engine, name)
        if expired:
            assert _acquire(engine, "old", T0 - timedelta(minutes=5), region=name)
    for name in regions:
        barrier = threading.Barrier(2)
        won: dict[str, bool] = {}

        def contend(
            holder: str, region: str = name, gate: threading.Barrier = barrier, results: dict[str, bool] = won
        ) -> None:
            gate.wait()
            results[holder] = _acquire(engine, holder, T0, region=region)

        threads = [threading.Thread(target=contend, args=(holder,)) for holder in ("a", "b")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(won.values()) == [False, True], won
        winner = next(holder for holder, ok in won.items() if ok)
        lease = run_in_transaction(engine, lambda s, region=name: current_lease(s, region))
        assert lease is not None and lease.holder == winner
