"""Read and write transactions (DESIGN §7, §12.2): a locked SQLite database is waited out with backoff,
reads never wait for the write lock, and a write that cannot get it in time is a one-line Conflict."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Connection, event, text
from sqlalchemy.exc import DBAPIError, InternalError, OperationalError
from sqlalchemy.orm import Session

from repart.controller.service import create_region
from repart.errors import Conflict, InvalidInput
from repart.storage import (
    RegionConfig,
    is_retryable,
    make_engine,
    read_transaction,
    run_in_transaction,
    upgrade,
)
from repart.storage.engine import limit_idle_transactions, read_connection

INSERT_EVENT = (
    "INSERT INTO events (at, kind, rule, message, data_json) VALUES ('2026-01-01', 'k', 'r', 'm', '{}')"
)


def _locked(path: Path) -> sqlite3.Connection:
    """A second connection holding a write transaction on the database at ``path``."""
    holder = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    holder.execute("BEGIN IMMEDIATE")
    holder.execute(INSERT_EVENT)
    return holder


def _create(session: Session) -> int:
    return create_region(session, "trades", RegionConfig(key_type="str", n_channels_initial=2)).id


def test_busy_database_is_retried_until_the_lock_is_released(tmp_path: Path) -> None:
    path = tmp_path / "busy.db"
    upgrade(f"sqlite:///{path}")
    engine = make_engine(f"sqlite:///{path}", busy_timeout=0.05)
    holder = _locked(path)
    attempts = 0

    def work(session: Session) -> int:
        nonlocal attempts
        attempts += 1
        return _create(session)

    # The lock goes once an attempt has failed on it (not after a fixed delay, which a loaded machine
    # can outlast before the first attempt starts).
    failed = threading.Event()
    event.listen(engine, "handle_error", lambda context: failed.set())

    def release_after_a_failure() -> None:
        failed.wait(30)
        holder.commit()

    release = threading.Thread(target=release_after_a_failure)
    release.start()
    try:
        assert run_in_transaction(engine, work, attempts=20, backoff=0.05, max_backoff=0.1) > 0
    finally:
        release.join()
        holder.close()
        engine.dispose()
    assert attempts > 1


def test_the_last_conflict_is_raised_when_attempts_run_out(tmp_path: Path) -> None:
    path = tmp_path / "busy.db"
    upgrade(f"sqlite:///{path}")
    engine = make_engine(f"sqlite:///{path}", busy_timeout=0.01)
    holder = _locked(path)
    try:
        with pytest.raises(Conflict, match="database is locked") as raised:
            run_in_transaction(engine, _create, attempts=3, backoff=0.01)
        assert "\n" not in str(raised.value)
        assert isinstance(raised.value.__cause__, OperationalError)
        assert is_retryable(raised.value.__cause__)
    finally:
        holder.rollback()
        holder.close()
        engine.dispose()


def test_other_errors_are_not_retried(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'x.db'}")
    calls = 0

    def work(_session: Session) -> None:
        nonlocal calls
        calls += 1
        raise ValueError("bad input")

    try:
        with pytest.raises(ValueError, match="bad input"):
            run_in_transaction(engine, work)
    finally:
        engine.dispose()
    assert calls == 1
    assert not is_retryable(ValueError("x"))
    with pytest.raises(InvalidInput, match="attempts must be an integer in \\[1, inf\\)"):
        run_in_transaction(engine, work, attempts=0)


def _count_regions(reader: Session | Connection) -> int:
    return len(reader.execute(text("SELECT id FROM regions")).all())


def _insert_event(connection: Connection) -> None:
    connection.execute(text(INSERT_EVENT))


# The two reads: on an ORM session, and on a Core connection (which loads no ORM).
READS = [read_transaction, read_connection]


@pytest.mark.parametrize("read", READS)
def test_reads_work_while_another_connection_holds_the_write_lock(read: Any, tmp_path: Path) -> None:
    path = tmp_path / "busy.db"
    upgrade(f"sqlite:///{path}")
    engine = make_engine(f"sqlite:///{path}", busy_timeout=5.0)
    run_in_transaction(engine, _create)
    holder = _locked(path)
    try:
        started = time.perf_counter()
        assert read(engine, _count_regions, attempts=1) == 1
        assert time.perf_counter() - started < 1.0  # not the 5 s busy timeout: the read never waited
        with pytest.raises(Conflict, match="database is locked"):
            run_in_transaction(
                make_engine(f"sqlite:///{path}", busy_timeout=0.05), _count_regions, attempts=1
            )
    finally:
        holder.rollback()
        holder.close()
        engine.dispose()


@pytest.mark.parametrize(("read", "write"), [(read_transaction, _create), (read_connection, _insert_event)])
def test_a_read_transaction_cannot_write(read: Any, write: Any, db_url: str) -> None:
    engine = make_engine(db_url)
    try:
        with pytest.raises(DBAPIError, match=r"(?i)read-only|readonly"):
            read(engine, write, attempts=1)
        assert read(engine, _count_regions) == 0
        assert read(engine, lambda reader: len(reader.execute(text("SELECT id FROM events")).all())) == 0
    finally:
        engine.dispose()


def test_a_paused_transaction_loses_its_locks_after_the_idle_limit(db_url: str) -> None:
    """limit_idle_transactions: on PostgreSQL a transaction idle past the limit has its session ended by
    the server, so a row lock it held is free again and its next statement fails; SQLite is left alone."""
    paused, other = make_engine(db_url), make_engine(db_url)
    try:
        upgrade(paused)
        region_id = run_in_transaction(paused, _create)
        limit_idle_transactions(paused, 60)
        limit_idle_transactions(paused, 0.3)  # one listener per engine: the last call wins
        if paused.dialect.name != "postgresql":
            with paused.connect() as connection:
                assert connection.exec_driver_sql("PRAGMA busy_timeout").scalar() == 5000
            return
        lock = text("SELECT id FROM regions WHERE id = :id FOR UPDATE")
        with paused.connect() as holder:
            assert holder.exec_driver_sql("SHOW idle_in_transaction_session_timeout").scalar() == "300ms"
            holder.execute(lock, {"id": region_id})  # holds the row lock, then sits idle
            started = time.monotonic()
            with other.connect() as waiter:
                waiter.exec_driver_sql("SET lock_timeout = '10s'")
                assert waiter.execute(lock, {"id": region_id}).scalar() == region_id
                waiter.rollback()
            assert time.monotonic() - started < 5
            with pytest.raises(InternalError, match="idle-in-transaction timeout"):
                holder.execute(text("SELECT 1"))
            assert holder.invalidated  # the pool drops the ended session
        assert run_in_transaction(paused, lambda session: session.execute(text("SELECT 1")).scalar()) == 1
    finally:
        paused.dispose()
        other.dispose()


@pytest.mark.parametrize("seconds", [0, -1.0, float("inf"), float("nan"), 3_000_000.0, True])
def test_the_idle_limit_is_checked(db_url: str, seconds: float) -> None:
    engine = make_engine(db_url)
    try:
        with pytest.raises(InvalidInput, match="seconds"):
            limit_idle_transactions(engine, seconds)
    finally:
        engine.dispose()


@pytest.mark.parametrize(
    "url",
    [
        "mysql://repart@localhost/repart",
        "postgresql+asyncpg://repart@localhost/repart",
        "postgresql+psycopg2://repart@localhost/repart",
        "oracle://repart@localhost/repart",
        "sqlite+aiosqlite:///repart.db",
        "nosuchdb://somewhere/db",
    ],
)
def test_an_unsupported_dialect_is_refused_naming_the_accepted_ones(
    url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(InvalidInput) as given:
        make_engine(url)
    assert given.value.field == "url"
    assert str(given.value) == (
        "url must name a supported database: sqlite:///PATH, or postgresql+psycopg://… (postgresql://… "
        f"means the same), got {url!r}"
    )
    monkeypatch.setenv("REPART_DB", url)
    with pytest.raises(InvalidInput) as configured:
        make_engine()
    assert configured.value.field == "REPART_DB"


@pytest.mark.parametrize(
    ("url", "driver"),
    [
        ("sqlite:///repart.db", "pysqlite"),
        ("sqlite+pysqlite:///repart.db", "pysqlite"),
        ("postgresql://repart@localhost/repart", "psycopg"),
        ("postgresql+psycopg://repart@localhost/repart", "psycopg"),
    ],
)
def test_the_supported_dialects_make_engines(url: str, driver: str, tmp_path: Path) -> None:
    engine = make_engine(url.replace("repart.db", str(tmp_path / "repart.db")))
    assert engine.dialect.driver == driver
    engine.dispose()
