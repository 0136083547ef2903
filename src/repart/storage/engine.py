"""Engine setup, read and write transactions, retries.

``make_engine`` resolves the database URL (argument, then ``REPART_DB``, then the embedded SQLite file
``./.repart/repart.db``) and configures SQLite for a controller shared with Spark jobs: WAL journal
(readers never wait for the writer, nor the writer for readers), foreign keys on, a busy timeout, and
transactions that SQLAlchemy begins itself.

Two kinds of transaction:

- ``run_in_transaction`` (writes): on SQLite it begins with ``BEGIN IMMEDIATE``, so it takes the one
  write lock at the start, waiting up to the busy timeout, instead of failing later when a deferred
  read has to upgrade a stale snapshot (``SQLITE_BUSY_SNAPSHOT``).
- ``read_transaction`` (reads): a plain deferred ``BEGIN`` with ``query_only`` on SQLite, which in WAL
  mode reads a consistent snapshot without ever taking or waiting for the write lock (and cannot
  write); ``REPEATABLE READ READ ONLY`` on PostgreSQL, which reads one snapshot and never fails with a
  serialization error. ``read_connection`` is the same read on a Core connection instead of an ORM
  session, for reads that need no mapped objects and so need not load the ORM.

Both run a unit of work in one transaction and retry it with exponential backoff when the database
reports a lock conflict (SQLite "database is locked") or a serialization failure or deadlock
(PostgreSQL). A write that still cannot get through when the attempts run out is a
``repart.errors.Conflict`` (one line: retry later), not a driver traceback.
"""

from __future__ import annotations

import os
import random
import sqlite3
import time
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from sqlalchemy import Connection, Engine, create_engine, event
from sqlalchemy.engine import URL, make_url
from sqlalchemy.exc import ArgumentError, DBAPIError, OperationalError

from repart.errors import Conflict, InvalidInput
from repart.validation import NON_NEGATIVE, POSITIVE_INT, Interval, check, shown

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

T = TypeVar("T")

ENV_VAR = "REPART_DB"
DEFAULT_URL = "sqlite:///./.repart/repart.db"
DEFAULT_BUSY_TIMEOUT = 5.0
POOL_SIZE = 15
"""The most PostgreSQL connections an engine opens at once, each kept open for the next transaction
(connections beyond a smaller pool would be opened and closed at every transaction, a new server
process each: most of a short call's time when the API or the daemon is busy)."""
# The execution option that marks a read-only transaction (see ``read_only``).
READ_ONLY_OPTION = "repart_read_only"
# The connection-record key under which ``limit_idle_transactions`` notes the timeout it set.
_IDLE_TIMEOUT_INFO = "repart_idle_transaction_ms"
# Each engine's limit (milliseconds) set by ``limit_idle_transactions``, read by its one listener.
_IDLE_LIMITS: weakref.WeakKeyDictionary[Engine, int] = weakref.WeakKeyDictionary()

# SQLite result codes (the primary code is the low byte of an extended code such as SQLITE_BUSY_SNAPSHOT).
_SQLITE_BUSY = 5
_SQLITE_LOCKED = 6
# PostgreSQL SQLSTATEs: serialization_failure, deadlock_detected.
_PG_RETRYABLE = frozenset({"40001", "40P01"})
# What an SQLite result code says about the database file (SQLITE_READONLY, SQLITE_CANTOPEN,
# SQLITE_NOTADB).
_SQLITE_PROBLEMS = {
    8: "the database is read-only, and this command writes",
    14: "the database file cannot be opened (a directory, a missing directory, or no permission)",
    26: "the file is not an SQLite database",
}
# PostgreSQL SQLSTATEs of a database that does not exist or refuses the connection
# (invalid_catalog_name, invalid_authorization_specification, cannot_connect_now, too_many_connections).
_PG_UNREACHABLE = frozenset({"3D000", "28000", "28P01", "57P03", "53300"})


def database_url(url: str | None = None) -> URL:
    """The database URL: ``url`` if given, else ``$REPART_DB``, else ``sqlite:///./.repart/repart.db``.

    Two databases are supported: SQLite (``sqlite://`` or ``sqlite+pysqlite://``) and PostgreSQL
    through psycopg 3 (``postgresql+psycopg://``; ``postgresql://`` is read as that). InvalidInput
    (field ``url``, or ``REPART_DB`` when the text came from there) for text that is not a URL, such
    as a plain file path, and for any other database or driver, naming the accepted ones.
    """
    text = url or os.environ.get(ENV_VAR) or DEFAULT_URL
    field = "url" if url else ENV_VAR
    try:
        resolved = make_url(text)
    except ArgumentError:
        raise InvalidInput(
            field,
            "must be a database URL such as sqlite:///path/to/repart.db or "
            f"postgresql+psycopg://user@host/database, got {shown(text)}",
        ) from None
    drivername = _DRIVERS.get(resolved.drivername)
    if drivername is None:
        raise InvalidInput(
            field,
            "must name a supported database: sqlite:///PATH, or postgresql+psycopg://… (postgresql://… "
            f"means the same), got {shown(resolved.render_as_string(hide_password=True))}",
        )
    return resolved.set(drivername=drivername)


# The dialects and drivers repart runs on, by the name a URL may give them, and the name it uses.
_DRIVERS = {
    "sqlite": "sqlite",
    "sqlite+pysqlite": "sqlite+pysqlite",
    "postgresql": "postgresql+psycopg",
    "postgresql+psycopg": "postgresql+psycopg",
}


def make_engine(url: str | None = None, *, busy_timeout: float = DEFAULT_BUSY_TIMEOUT) -> Engine:
    """Create an engine for ``url`` (see ``database_url``: InvalidInput for a database or driver other
    than SQLite and PostgreSQL through psycopg).

    For SQLite the database file's directory is created, and every connection gets WAL,
    ``foreign_keys=ON`` and ``busy_timeout`` (seconds; how long a write waits for the write lock before
    failing with "database is locked"). PostgreSQL connections are checked before use, and kept open
    once opened, up to ``POOL_SIZE`` (opened as needed: a command that uses one opens one).
    """
    resolved = database_url(url)
    check("busy_timeout", busy_timeout, NON_NEGATIVE)
    if resolved.get_backend_name() != "sqlite":
        return create_engine(resolved, pool_pre_ping=True, pool_size=POOL_SIZE, max_overflow=0)
    database = resolved.database or ""
    if database and database != ":memory:" and not database.startswith("file:"):
        Path(database).expanduser().parent.mkdir(parents=True, exist_ok=True)
    engine = create_engine(resolved)
    _configure_sqlite(engine, busy_timeout)
    return engine


def limit_idle_transactions(engine: Engine, seconds: float) -> None:
    """Have PostgreSQL end any session of ``engine`` whose transaction sits idle for longer than
    ``seconds`` (``idle_in_transaction_session_timeout``), releasing its row locks.

    The daemon sets it to its lease's length (``DaemonConfig.idle_transaction_seconds``): a daemon
    that is paused mid-transaction (SIGSTOP, a frozen VM, a long GC pause) would otherwise hold its
    locks on the region's row until it resumes, however long that is, and every job ingesting a
    snapshot and every other daemon taking over the expired lease would wait on them. After the
    timeout the server ends its session; on resuming, its transaction fails (its lease is gone or
    renewed on the next sweep) and the pool replaces the connection.

    The limit holds for every user of ``engine``: the daemon's engine is its own (``repart run`` opens
    it). One listener per engine sets it once per connection, when the pool hands the connection out;
    a later call changes the limit for connections handed out after it (the last call wins). SQLite
    engines are left as they are (a writer there holds the one write lock, and others fail after their
    busy timeout instead of waiting forever).
    """
    check("seconds", seconds, Interval(float, 0.001, 2_147_483.647, "both"))  # PostgreSQL: int ms
    if engine.dialect.name != "postgresql":
        return
    first = engine not in _IDLE_LIMITS
    _IDLE_LIMITS[engine] = max(1, round(seconds * 1000))
    if not first:
        return

    @event.listens_for(engine, "checkout")
    def _on_checkout(dbapi_connection: Any, record: Any, _proxy: Any) -> None:
        milliseconds = _IDLE_LIMITS[engine]
        if record.info.get(_IDLE_TIMEOUT_INFO) == milliseconds:
            return
        cursor = dbapi_connection.cursor()
        try:
            cursor.execute(f"SET idle_in_transaction_session_timeout = {milliseconds}")
        finally:
            cursor.close()
        dbapi_connection.commit()  # a SET in a transaction that rolls back would be undone
        record.info[_IDLE_TIMEOUT_INFO] = milliseconds


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
        # A read (see ``read_only``) begins deferred: in WAL mode it reads a snapshot and never touches
        # the write lock. A write begins IMMEDIATE, taking the write lock at the start and waiting up to
        # busy_timeout for it: a deferred BEGIN that reads first and writes later cannot wait when
        # another writer got in between (its upgrade fails at once with SQLITE_BUSY_SNAPSHOT).
        # query_only makes a read that tries to write fail ("attempt to write a readonly database").
        read = bool(connection.get_execution_options().get(READ_ONLY_OPTION, False))
        connection.exec_driver_sql(f"PRAGMA query_only={int(read)}")
        connection.exec_driver_sql("BEGIN" if read else "BEGIN IMMEDIATE")


def read_only(engine: Engine) -> Engine:
    """``engine`` with transactions that only read: deferred on SQLite (no write lock), ``REPEATABLE
    READ READ ONLY`` on PostgreSQL (one snapshot for every statement of the transaction)."""
    if engine.dialect.name == "postgresql":
        return engine.execution_options(isolation_level="REPEATABLE READ", postgresql_readonly=True)
    return engine.execution_options(**{READ_ONLY_OPTION: True})


def database_problem(error: DBAPIError) -> str | None:
    """What is wrong with the database itself when ``error`` says so, as a phrase for a one-line
    message: a file that is not an SQLite database, a file that cannot be opened (a directory, a
    missing directory, no permission), a read-only database asked to write, or a server that cannot
    be reached or has no such database. None for any other error (a query's own failure)."""
    original = error.orig
    if isinstance(original, sqlite3.Error):
        code = (getattr(original, "sqlite_errorcode", None) or 0) & 0xFF
        return _SQLITE_PROBLEMS.get(code)
    if isinstance(error, OperationalError) and getattr(original, "sqlstate", None) in (
        None,
        *_PG_UNREACHABLE,
    ):
        first = str(original).strip().splitlines()[0] if str(original).strip() else type(original).__name__
        return f"cannot connect to the database server ({first})"
    return None


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
    """Run ``work(session)`` in one write transaction and commit; retry it on a retryable conflict.

    Each attempt gets a fresh session; a failed attempt is rolled back in full, so ``work`` must not
    have side effects outside the database. Between attempts the delay doubles from ``backoff`` up to
    ``max_backoff`` seconds, with jitter. When ``attempts`` run out the last conflict becomes a
    ``Conflict`` (its cause is the driver's error); any other error is raised at once.
    """
    return _retried(lambda: _in_session(engine, work), attempts, backoff, max_backoff)


def read_transaction(
    engine: Engine,
    work: Callable[[Session], T],
    *,
    attempts: int = 5,
    backoff: float = 0.05,
    max_backoff: float = 2.0,
) -> T:
    """Run ``work(session)`` in one read-only transaction (``read_only``), retried as
    ``run_in_transaction`` is; ``work`` must not write."""
    reader = read_only(engine)
    return _retried(lambda: _in_session(reader, work), attempts, backoff, max_backoff)


def read_connection(
    engine: Engine,
    work: Callable[[Connection], T],
    *,
    attempts: int = 5,
    backoff: float = 0.05,
    max_backoff: float = 2.0,
) -> T:
    """Run ``work(connection)``, which reads with SQLAlchemy Core (``repart.storage.tables``), in one
    read-only transaction, retried as ``read_transaction`` is. Neither it nor ``work`` loads the ORM:
    a command that only shows rows, ``repart status``, starts faster."""
    reader = read_only(engine)
    return _retried(lambda: _on_connection(reader, work), attempts, backoff, max_backoff)


def _retried(attempt: Callable[[], T], attempts: int, backoff: float, max_backoff: float) -> T:
    """``attempt()``, called again after a retryable conflict (see ``run_in_transaction``)."""
    check("attempts", attempts, POSITIVE_INT)
    started = time.monotonic()
    failed = 0
    while True:
        try:
            return attempt()
        except DBAPIError as error:
            if not is_retryable(error):
                raise
            failed += 1
            if failed == attempts:
                reason = str(error.orig).splitlines()[0] if error.orig is not None else "conflict"
                raise Conflict(
                    f"the database is busy ({reason}) after {attempts} attempts in "
                    f"{time.monotonic() - started:.1f} s; another writer holds it, try again later"
                ) from error
        time.sleep(min(max_backoff, backoff * 2 ** (failed - 1)) * random.uniform(0.5, 1.0))


def _in_session(engine: Engine, work: Callable[[Session], T]) -> T:
    """``work(session)`` in one transaction of a new session, committed if it returns."""
    from sqlalchemy.orm import Session  # here: a Core reader (``read_connection``) does not load the ORM

    with Session(engine, expire_on_commit=False) as session, session.begin():
        return work(session)


def _on_connection(engine: Engine, work: Callable[[Connection], T]) -> T:
    """``work(connection)`` in one transaction of a new connection, committed if it returns."""
    with engine.begin() as connection:
        return work(connection)
