"""Backoff: a region whose ticks fail is ticked again after an exponentially growing, capped wait, shown in
``status``, ``explain`` and the metrics, and ended by a successful tick or ``repart resume``."""

from __future__ import annotations

import itertools
import json
import time
from collections.abc import Callable
from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from sqlalchemy import Engine, update

from repart.controller import service
from repart.controller.backoff import backoff_seconds
from repart.controller.daemon import Daemon, DaemonConfig
from repart.controller.metrics import DaemonMetrics
from repart.controller.tick import TickResult, tick
from repart.errors import Conflict, InvalidInput
from repart.storage import models, read_transaction, region_by_name, run_in_transaction
from repart.storage.backoff import record_failure
from repart.storage.jsontext import load_object
from tests.cli.helpers import one_error, repart
from tests.factories import REGION, add_region, database_dump, events

INTERVAL = 1.0
CAP = 3.0


def test_the_wait_doubles_from_the_interval_up_to_the_cap() -> None:
    assert [backoff_seconds(k, 10.0, 60.0) for k in range(1, 7)] == [10.0, 20.0, 40.0, 60.0, 60.0, 60.0]
    assert backoff_seconds(10**6, 10.0, 60.0) == 60.0


@given(st.integers(1, 5000), st.floats(0.01, 1e4), st.floats(0.01, 1e6))
def test_the_wait_grows_and_stays_within_the_cap(failures: int, interval: float, cap: float) -> None:
    wait = backoff_seconds(failures, interval, cap)
    assert wait <= cap and wait <= backoff_seconds(failures + 1, interval, cap)
    assert wait == min(cap, interval * 2 ** (failures - 1)) if failures < 900 else wait == cap


class Ticker:
    """A ticker that raises ``error`` while ``failing`` is set, else ticks; counts its calls."""

    def __init__(self, error: Exception) -> None:
        self.error = error
        self.failing = True
        self.calls = 0

    def __call__(self, engine: Engine, region: str, **kwargs: Any) -> TickResult:
        self.calls += 1
        if self.failing:
            raise self.error
        return tick(engine, region, **kwargs)


def sweep(daemon: Daemon) -> None:
    """One sweep, waiting for its ticks to end."""
    daemon.sweep()
    deadline = time.monotonic() + 30
    while daemon.in_flight and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not daemon.in_flight


def region_row(engine: Engine) -> models.Region:
    return read_transaction(engine, lambda s: region_by_name(s, REGION))


def due_now(engine: Engine) -> None:
    """Move the region's retry time to the past, as if its wait had passed."""
    past = datetime.now(UTC) - timedelta(seconds=1)
    with engine.begin() as connection:
        connection.execute(update(models.Region).where(models.Region.name == REGION).values(retry_at=past))


@pytest.fixture
def failing(engine: Engine) -> tuple[Daemon, Ticker]:
    add_region(engine)
    ticker = Ticker(RuntimeError("boom"))
    config = DaemonConfig(INTERVAL, lease_ttl_seconds=30, holder="a", max_backoff_seconds=CAP)
    return Daemon(engine, config, ticker=ticker, metrics=DaemonMetrics()), ticker


def test_a_failing_region_backs_off_exponentially_and_a_success_ends_it(
    engine: Engine, failing: tuple[Daemon, Ticker]
) -> None:
    daemon, ticker = failing
    try:
        waits = []
        for failures in (1, 2, 3, 4):
            before = datetime.now(UTC)
            sweep(daemon)
            after = datetime.now(UTC)
            row = region_row(engine)
            assert (ticker.calls, row.tick_failures) == (failures, failures)
            assert row.last_error == "RuntimeError: boom"
            assert row.retry_at is not None
            waits.append(min(CAP, INTERVAL * 2 ** (failures - 1)))
            assert (
                before + timedelta(seconds=waits[-1]) <= row.retry_at <= after + timedelta(seconds=waits[-1])
            )
            sweep(daemon)  # not due yet: skipped
            assert ticker.calls == failures
            due_now(engine)
        assert waits == [1.0, 2.0, 3.0, 3.0]
        ticker.failing = False
        sweep(daemon)
        row = region_row(engine)
        assert ticker.calls == 5
        assert (row.tick_failures, row.retry_at, row.last_error) == (0, None, None)
    finally:
        daemon.stop()


def test_backoff_is_shown_in_status_explain_and_the_metrics(
    engine: Engine, db_url: str, failing: tuple[Daemon, Ticker]
) -> None:
    daemon, _ = failing
    try:
        sweep(daemon)
        sweep(daemon)  # reads the failure into the metrics
    finally:
        daemon.stop()
    row = region_row(engine)
    shown = json.loads(repart(db_url, "status", "--json").stdout)[0]["backoff"]
    assert shown == {
        "tick_failures": 1,
        "retry_at": row.retry_at.isoformat(),
        "last_error": "RuntimeError: boom",
    }
    explained = repart(db_url, "explain", REGION)
    assert explained.exit_code == 2
    assert "its last 1 tick(s) failed, the last with RuntimeError: boom" in one_error(explained.output)
    assert daemon.metrics is not None
    text = daemon.metrics.render().decode()
    assert f'repart_region_tick_failures{{region="{REGION}"}} 1.0' in text
    backoff = [line for line in text.splitlines() if line.startswith("repart_region_backoff_seconds{")]
    assert len(backoff) == 1 and 0.0 < float(backoff[0].split()[-1]) <= INTERVAL


def test_resume_ends_the_backoff_and_the_next_sweep_ticks(
    engine: Engine, failing: tuple[Daemon, Ticker]
) -> None:
    daemon, ticker = failing
    try:
        sweep(daemon)
        assert region_row(engine).tick_failures == 1
        row = run_in_transaction(engine, lambda s: service.resume(s, REGION))
        assert row.mode == "auto"  # not held: its mode stays
        assert (region_row(engine).tick_failures, region_row(engine).retry_at) == (0, None)
        ticker.failing = False
        sweep(daemon)
        assert ticker.calls == 2
    finally:
        daemon.stop()


def test_resume_refuses_a_region_neither_held_nor_backing_off(engine: Engine) -> None:
    add_region(engine)
    before = database_dump(engine)
    with pytest.raises(InvalidInput) as refused:
        run_in_transaction(engine, lambda s: service.resume(s, REGION))
    assert refused.value.field == "mode"
    assert database_dump(engine) == before


@pytest.mark.parametrize("error", [lambda: Conflict("status changed"), lambda: Conflict("lease lost")])
def test_a_refused_write_is_not_a_failure(engine: Engine, error: Callable[[], Exception]) -> None:
    add_region(engine)
    ticker = Ticker(error())
    daemon = Daemon(engine, DaemonConfig(INTERVAL, lease_ttl_seconds=30, holder="a"), ticker=ticker)
    try:
        sweep(daemon)
        sweep(daemon)
    finally:
        daemon.stop()
    assert ticker.calls == 2
    assert region_row(engine).tick_failures == 0


def test_a_bad_max_backoff_names_the_field() -> None:
    with pytest.raises(InvalidInput) as refused:
        DaemonConfig(10.0, lease_ttl_seconds=30, holder="a", max_backoff_seconds=5.0)
    assert refused.value.field == "max_backoff"


def test_run_refuses_a_max_backoff_below_the_interval(engine: Engine, db_url: str) -> None:
    add_region(engine)
    before = database_dump(engine)
    refused = repart(db_url, "run", "--once", "--interval", "10", "--max-backoff", "5")
    assert refused.exit_code == 2
    assert one_error(refused.output).startswith("error: --max-backoff must be")
    assert database_dump(engine) == before


def record_a_failure(engine: Engine, retry_in: float) -> None:
    """A failed tick recorded on the region's row, as the daemon records one."""
    retry_at = datetime.now(UTC) + timedelta(seconds=retry_in)
    run_in_transaction(
        engine, lambda s: record_failure(s, region_by_name(s, REGION).id, "RuntimeError: boom", retry_at)
    )


def backoff_columns(engine: Engine) -> tuple[int, datetime | None, str | None]:
    row = region_row(engine)
    return row.tick_failures, row.retry_at, row.last_error


@pytest.mark.parametrize("first", [True, False], ids=["initializing", "idle"])
def test_every_successful_tick_ends_a_backoff(engine: Engine, db_url: str, first: bool) -> None:
    """``repart tick`` ends a backoff in its own write, and an idle tick (nothing else to write) in a
    short write of its own, leaving ``updated_at`` as it was."""
    add_region(engine)
    if not first:
        assert repart(db_url, "tick", "--region", REGION).exit_code == 0
    record_a_failure(engine, 600)
    updated_at = region_row(engine).updated_at
    ticked = repart(db_url, "tick", "--region", REGION, "--json")
    assert ticked.exit_code == 0, ticked.output
    assert [r["action"] for r in json.loads(ticked.stdout)] == ["initialized" if first else "idle"]
    assert backoff_columns(engine) == (0, None, None)
    if not first:
        assert region_row(engine).updated_at == updated_at


def test_run_once_skips_a_region_backing_off_and_a_success_ends_it(engine: Engine) -> None:
    add_region(engine)
    record_a_failure(engine, 600)
    daemon = Daemon(engine, DaemonConfig(INTERVAL, lease_ttl_seconds=30, holder="a"))
    before = database_dump(engine)
    assert daemon.run_once() == [None]
    assert database_dump(engine) == before
    due_now(engine)
    [result] = daemon.run_once()
    assert result is not None and result.action == "initialized"
    assert backoff_columns(engine) == (0, None, None)


def test_run_once_records_a_failed_tick(engine: Engine) -> None:
    add_region(engine)
    daemon = Daemon(
        engine, DaemonConfig(INTERVAL, lease_ttl_seconds=30, holder="a"), ticker=Ticker(RuntimeError("boom"))
    )
    before = datetime.now(UTC)
    with pytest.raises(RuntimeError):
        daemon.run_once()
    failures, retry_at, error = backoff_columns(engine)
    assert (failures, error) == (1, "RuntimeError: boom")
    assert retry_at is not None and before + timedelta(seconds=INTERVAL) <= retry_at
    assert retry_at <= datetime.now(UTC) + timedelta(seconds=INTERVAL)


def test_resume_of_a_backoff_records_an_event_and_keeps_updated_at(engine: Engine) -> None:
    add_region(engine)
    record_a_failure(engine, 600)
    updated_at = region_row(engine).updated_at
    run_in_transaction(engine, lambda s: service.resume(s, REGION))
    assert backoff_columns(engine) == (0, None, None)
    assert region_row(engine).updated_at == updated_at
    [event] = [e for e in events(engine) if e.kind == "backoff-ended"]
    assert event.rule == "operator"
    assert load_object(event.data_json)["tick_failures"] == 1
    assert load_object(event.data_json)["last_error"] == "RuntimeError: boom"


def test_the_sweep_loop_waits_one_two_four_intervals(engine: Engine) -> None:
    """The real sweep loop with a region whose ticks fail: counted in sweeps (each tick's due time, not
    wall time, which a loaded machine stretches), the ticks come 1, 2 and 4 sweeps apart."""
    add_region(engine)
    interval = 0.4
    config = DaemonConfig(interval, lease_ttl_seconds=30, holder="a", max_backoff_seconds=60)
    daemon = Daemon(engine, config, ticker=Ticker(RuntimeError("boom")))
    first_due: list[float] = []
    ticked: list[int] = []
    paced, guarded = daemon.sweep, daemon._guarded_tick

    def remembering(due: float | None = None) -> int:
        assert due is not None
        first_due[:1] = first_due[:1] or [due]
        return paced(due)

    def numbered(region: str, token: int | None, due_at: float, failures: int = 0) -> None:
        ticked.append(round((due_at - daemon.phase(region) - first_due[0]) / interval))
        guarded(region, token, due_at, failures)

    daemon.sweep = remembering  # type: ignore[method-assign]
    daemon._guarded_tick = numbered  # type: ignore[method-assign]
    daemon.start()
    try:
        deadline = time.monotonic() + 60
        while len(ticked) < 4 and time.monotonic() < deadline:
            time.sleep(0.05)
    finally:
        daemon.stop()
    assert [b - a for a, b in itertools.pairwise(ticked[:4])] == [1, 2, 4], ticked
