"""Engine setup and retried transactions (DESIGN §7).

``make_engine`` resolves the database URL (argument, then ``REPART_DB``, then the embedded SQLite file
``./.repart/repart.db``) and configures SQLite for a controller shared with Spark jobs: WAL journal,
foreign keys on, a busy timeout, and transactions that SQLAlchemy begins itself (so SAVEPOINTs work and
a transaction starts with ``BEGIN IMMEDIATE``, not at the driver's whim). ``run_in_transaction`` runs a unit
of work in one transaction and retries it with exponential backoff when the database reports a lock
conflict (SQLite "database is locked") or a serialization failure or deadlock (PostgreSQL).
"""

from __future__ import annotations

import os
import random
import sqlite3
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import DBAPIError
from sqlalchemy.orm import Session

T = TypeVar("T")

ENV_VAR = "REPART_DB"
DEFAULT_URL = "sqlite:///./.repart/repart.db"
DEFAULT_BUSY_TIMEOUT = 5.0

# SQLite result codes (the primary code is the low byte of an extended code such as SQLITE_BUSY_SNAPSHOT).
_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6
# PostgreSQL SQLSTATEs: serialization_failure, deadlock_detected.
_PG_RETRYABLE = frozenset({"40001", "40P01"})


def database_url(url: str | None = None) -> URL:
    """The database URL: ``url`` if given, else ``$REPART_DB``, else ``sqlite:///./.repart/repart.db``."""
    return make_url(url or os.environ.get(ENV_VAR) or DEFAULT_URL)


def make_engine(url: str | None = None, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> Engine:
    """Create an engine for ``url`` (see ``database_url``).

    For SQLite the database file's directory is created, and every connection gets WAL,
    ``foreign_keys=ON`` and ``busy_timeout`` (seconds; how long a statement waits for a lock before
    failing with "database is locked"). PostgreSQL connections are checked before use.
    """
    resolved = database_url(url)
    if busy_timeout < 0:
        raise ValueError(f"busy_timeout must be >= 0 seconds, got {busy_timeout}")
    if resolved.get_backend_name() != "sqlite":
        return create_engine(resolved, pool_pre_ping=True)
    database = resolved.database or ""
    if database and database != ":memory:" and not database.startswith("file:"):
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(resolved)
    _configure_sqlite(engine, busy_timeout)
    return engine


def _configure_sqlite(engine: Engine, busy_timeout: float) -> None:
    @event.listens_for(engine, "connect")
    def _on_connect(dbapi_connection: Any, _record: Any) -> None:
        # Autocommit at the driver level: SQLAlchemy's "begin" hook below issues BEGIN itself.
        dbapi_connection.isolation_level = None
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute("PRAGMA journal_mode=WAL")
            cursor.execute("PRAGMA foreign_keys=ON")
            cursor.execute(f"PRAGMA busy_timeout={round(busy_timeout * 1000)}")
        finally:
            cursor.close()

    @event.listens_for(engine, "begin")
    def _on_begin(connection: Any) -> None:
        # IMMEDIATE takes the write lock at the start, waiting up to busy_timeout for it. A deferred
        # BEGIN that reads first and writes later cannot wait when another writer got in between: in
        # WAL mode its upgrade fails at once (SQLITE_BUSY_SNAPSHOT), which under many concurrent ticks
        # made most of them fail. Controller transactions are short, so serialising them costs little.
        connection.exec_driver_sql("BEGIN IMMEDIATE")


def is_retryable(error: BaseException) -> bool:
    """True for a lock conflict (SQLite busy/locked) or a serialization failure or deadlock (PostgreSQL)."""
    if not isinstance(error, DBAPIError):
        return False
    original = error.orig
    if isinstance(original, sqlite3.Error):
        code = getattr(original, "sqlite_errorcode", None)
        if code is not None:
            return code & 0xFF in (_SQLITE_BUSY, _SQLITE_LOCKED)
        return "database is locked" in str(original)
    return getattr(original, "sqlstate", None) in _PG_RETRYABLE


def run_in_transaction(
    engine: Engine,
    work: Callable[[Session], T],
    *,
    attempts: int = 5,
    backoff: float = 0.05,
    max_backoff: float = 2.0,
) -> T:
    """Run ``work(session)`` in one transaction and commit; retry it on a retryable conflict.

    Each attempt gets a fresh session; a failed attempt is rolled back in full, so ``work`` must not
    have side effects outside the database. Between attempts the delay doubles from ``backoff`` up to
    ``max_backoff`` seconds, with jitter. The last conflict is re-raised when ``attempts`` run out;
    any other error is raised at once.
    """
    if attempts < 1:
        raise ValueError(f"attempts must be >= 1, got {attempts}")
    for attempt in range(attempts - 1):
        try:
            return _attempt(engine, work)
        except DBAPIError as error:
            if not is_retryable(error):
                raise
        time.sleep(min(max_backoff, backoff * 2**attempt) * random.uniform(0.5, 1.0))
    return _attempt(engine, work)


def _attempt(engine: Engine, work: Callable[[Session], T]) -> T:
    with Session(engine, expire_on_commit=False) as session, session.begin():
        return work(session)
