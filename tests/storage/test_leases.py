"""Leases with fencing tokens: one active controller per region, race-safe on both backends, and a
write under a lost or expired lease is refused (DESIGN §7, §8, §12.2)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import Engine

from repart.errors import Conflict, InvalidInput, NotFound
from repart.storage import (
    Fence,
    acquire_lease,
    check_fence,
    current_lease,
    region_by_name,
    release_lease,
    run_in_transaction,
)
from repart.storage.leases import claim_leases
from tests.factories import add_region

T0 = datetime(2026, 1, 1, tzinfo=UTC)


def _acquire(
    engine: Engine, holder: str, now: datetime, ttl: float = 30.0, region: str = "trades"
) -> int | None:
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
    with pytest.raises(InvalidInput, match="ttl_seconds must be a number in"):
        _acquire(engine, "a", T0, ttl=0)
    with pytest.raises(InvalidInput, match="holder must be a string"):
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
        won: dict[str, int | None] = {}

        def contend(
            holder: str,
            region: str = name,
            gate: threading.Barrier = barrier,
            results: dict[str, int | None] = won,
        ) -> None:
            gate.wait()
            results[holder] = _acquire(engine, holder, T0, region=region)

        threads = [threading.Thread(target=contend, args=(holder,)) for holder in ("a", "b")]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert sorted(token is not None for token in won.values()) == [False, True], won
        winner, token = next((holder, token) for holder, token in won.items() if token is not None)
        lease = run_in_transaction(engine, lambda s, region=name: current_lease(s, region))
        assert lease is not None and (lease.holder, lease.token) == (winner, token)
        assert token == (2 if expired else 1)


def _fence_check(engine: Engine, fence: Fence, now: datetime) -> None:
    run_in_transaction(engine, lambda s: check_fence(s, "trades", region_by_name(s, "trades").id, fence, now))


def test_tokens_grow_with_every_new_holder_and_survive_a_release(engine: Engine) -> None:
    add_region(engine)
    assert _acquire(engine, "a", T0) == 1
    assert _acquire(engine, "a", T0 + timedelta(seconds=5)) == 1  # a renewal keeps the token
    assert _acquire(engine, "b", T0 + timedelta(seconds=10)) is None  # held: no token drawn
    assert _acquire(engine, "b", T0 + timedelta(seconds=40)) == 2  # a's lease expired at T0 + 35 s
    assert run_in_transaction(engine, lambda s: release_lease(s, "trades", "b"))
    assert _acquire(engine, "a", T0 + timedelta(seconds=41)) == 3  # not 1 again after the release
    assert _acquire(engine, "a", T0 + timedelta(hours=1)) == 3  # its own expired lease: same holder


def test_a_fence_holds_only_for_the_holder_with_its_token_until_expiry(engine: Engine) -> None:
    add_region(engine)
    token = _acquire(engine, "a", T0, ttl=10)
    assert token == 1
    _fence_check(engine, Fence("a", 1), T0 + timedelta(seconds=9))
    with pytest.raises(Conflict, match="expired"):
        _fence_check(engine, Fence("a", 1), T0 + timedelta(seconds=10))
    with pytest.raises(Conflict, match="not held by 'b' with token 1"):
        _fence_check(engine, Fence("b", 1), T0)
    assert _acquire(engine, "b", T0 + timedelta(seconds=11), ttl=10) == 2
    with pytest.raises(Conflict, match="held by 'b' with token 2"):
        _fence_check(engine, Fence("a", 1), T0 + timedelta(seconds=12))
    assert run_in_transaction(engine, lambda s: release_lease(s, "trades", "b"))
    with pytest.raises(Conflict, match="held by nobody"):
        _fence_check(engine, Fence("b", 2), T0 + timedelta(seconds=12))
    assert _acquire(engine, "a", T0 + timedelta(seconds=13), ttl=10) == 3
    with pytest.raises(Conflict, match="not held by 'a' with token 1"):  # the old token of the same holder
        _fence_check(engine, Fence("a", 1), T0 + timedelta(seconds=14))
    _fence_check(engine, Fence("a", 3), T0 + timedelta(seconds=14))


def _claim(engine: Engine, holder: str, now: datetime, ttl: float = 30.0) -> dict[str, int]:
    return run_in_transaction(engine, lambda s: claim_leases(s, holder, ttl, now))


def _lease(engine: Engine, region: str) -> tuple[str, int, datetime]:
    lease = run_in_transaction(engine, lambda s: current_lease(s, region))
    assert lease is not None
    return lease.holder, lease.token, lease.expires_at


def test_claim_renews_own_leases_takes_free_and_expired_ones_and_leaves_valid_ones(engine: Engine) -> None:
    for name in ("mine", "expired-mine", "free", "expired-other", "valid-other"):
        add_region(engine, name)
    assert _acquire(engine, "me", T0, region="mine") == 1
    assert _acquire(engine, "me", T0 - timedelta(minutes=5), region="expired-mine") == 1
    assert _acquire(engine, "other", T0 - timedelta(minutes=5), region="expired-other") == 1
    assert _acquire(engine, "other", T0, region="valid-other") == 1
    now = T0 + timedelta(seconds=10)
    claimed = _claim(engine, "me", now, ttl=20.0)
    # Renewals keep their tokens; a free lease gets the region's first token, a takeover the next one.
    assert claimed == {"mine": 1, "expired-mine": 1, "free": 1, "expired-other": 2}
    until = now + timedelta(seconds=20)
    for name, token in claimed.items():
        assert _lease(engine, name) == ("me", token, until)
    assert _lease(engine, "valid-other") == ("other", 1, T0 + timedelta(seconds=30))
    # Claiming again changes no token; another holder gets nothing while the leases are valid.
    assert _claim(engine, "me", now + timedelta(seconds=5)) == claimed
    assert _claim(engine, "other", now + timedelta(seconds=5)) == {"valid-other": 1}


def test_claim_agrees_with_acquire_lease_region_by_region(engine: Engine) -> None:
    """The bulk rule is ``acquire_lease``'s: the same tokens for the same history, region by region."""
    for name in ("a", "b", "c"):
        add_region(engine, name)
    history = [("x", T0, "a"), ("y", T0, "b"), ("x", T0 + timedelta(minutes=1), "b")]
    for holder, at, region in history:
        _acquire(engine, holder, at, ttl=10.0, region=region)
    later = T0 + timedelta(minutes=2)
    claimed = _claim(engine, "z", later)
    assert claimed == {"a": 2, "b": 3, "c": 1}  # a: x had 1; b: y had 1, x took it over with 2; c: free
    for name in ("a", "b", "c"):
        release = run_in_transaction(engine, lambda s, n=name: release_lease(s, n, "z"))
        assert release
        # After a release the next holder's token is one more than the claim's, as acquire_lease draws.
        assert _acquire(engine, "w", later, region=name) == claimed[name] + 1


def test_claim_refuses_bad_arguments(engine: Engine) -> None:
    add_region(engine)
    with pytest.raises(InvalidInput, match="ttl_seconds must be a number in"):
        _claim(engine, "a", T0, ttl=0)
    with pytest.raises(InvalidInput, match="holder must be a string"):
        _claim(engine, "", T0)
    assert _claim(engine, "a", T0) == {"trades": 1}


@pytest.mark.parametrize("expired", [False, True], ids=["free", "expired"])
def test_two_daemons_claiming_at_once_split_the_regions_without_a_shared_one(
    engine: Engine, expired: bool
) -> None:
    regions = [f"r{i}" for i in range(20)]
    for name in regions:
        add_region(engine, name)
        if expired:
            assert _acquire(engine, "old", T0 - timedelta(minutes=5), region=name)
    barrier = threading.Barrier(2)
    claims: dict[str, dict[str, int]] = {}

    def claim(holder: str) -> None:
        barrier.wait()
        claims[holder] = _claim(engine, holder, T0)

    threads = [threading.Thread(target=claim, args=(holder,)) for holder in ("a", "b")]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert not set(claims["a"]) & set(claims["b"]), claims
    assert set(claims["a"]) | set(claims["b"]) == set(regions)
    for holder, held in claims.items():
        for name, token in held.items():
            assert _lease(engine, name)[:2] == (holder, token)
