"""What the database commands share: the ``--db`` and ``--json`` options, opening the database, output.

Every database command takes ``--db URL`` (default: ``$REPART_DB``, else ``db`` in the configuration
file, ``repart.cli.config``, else ``./.repart/repart.db``) and ``--json`` (machine output on stdout and
nothing else there). A command other than ``init`` and ``db`` refuses a database that is not at the
code's schema revision (``repart.storage.check_revision``: run ``repart db upgrade``), with a message
instead of an SQL error, and every other mistake in ``--db`` is one line naming it (exit code 2), never
a driver traceback.

The CLI imports SQLAlchemy and the storage modules here and in the commands only when a command runs,
so ``repart --help`` does not pay for them.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, TypeVar

import typer

from repart.cli.config import database_option
from repart.errors import InvalidInput
from repart.storage.views import timestamp as timestamp

if TYPE_CHECKING:
    from rich.console import Console
    from sqlalchemy import URL, Connection, Engine
    from sqlalchemy.orm import Session

T = TypeVar("T")

DB_OPTION = "--db"

DbOption = Annotated[
    str | None,
    typer.Option(
        "--db",
        help=(
            "Database URL (default: $REPART_DB, else db in repart.toml or the file $REPART_CONFIG names, "
            "else sqlite:///./.repart/repart.db)."
        ),
        show_default=False,
    ),
]
JsonOption = Annotated[bool, typer.Option("--json", help="Print JSON on stdout (for scripts).")]


@contextmanager
def open_database(url: str | None) -> Iterator[Engine]:
    """An engine on the database at ``url``, which must exist and be at the code's schema revision.

    Every mistake in ``--db`` (or ``$REPART_DB``) is an ``InvalidInput`` naming ``--db`` in one line: those
    of ``existing_database``, and a database at another schema revision (``check_revision``).
    """
    from repart.storage.schema import check_revision

    with existing_database(url) as engine:
        check_revision(engine)
        yield engine


@contextmanager
def existing_database(url: str | None) -> Iterator[Engine]:
    """An engine on the database at ``url``, which must exist, at whatever schema revision.

    Every mistake in ``--db`` (or ``$REPART_DB``) is an ``InvalidInput`` naming ``--db`` in one line: text
    that is not a database URL or names an unsupported database, a missing SQLite file, a file that is
    not an SQLite database, a directory, a server that cannot be reached, and a read-only database
    when the command writes (raised from the body of the ``with`` block).
    """
    resolved = _resolved(url)
    _, source = database_option(url)
    path = resolved.database or ""
    sqlite = resolved.get_backend_name() == "sqlite"
    shown = path if sqlite else resolved.render_as_string(hide_password=True)
    if (  # checked before an engine exists: making one creates the SQLite file's directory
        sqlite
        and path
        and path != ":memory:"
        and not path.startswith("file:")
        and not Path(path).expanduser().exists()
    ):
        raise InvalidInput(source, f"names no database: {path} does not exist; create it with `repart init`")
    _, engine = engine_for(url)
    try:
        with database_errors(shown):
            yield engine
    finally:
        engine.dispose()


def engine_for(url: str | None) -> tuple[URL, Engine]:
    """The resolved URL of ``--db`` and an engine on it (for SQLite, the file's directory is created);
    InvalidInput naming ``--db`` (or the configuration file's line) for text that is not a database URL."""
    from repart.storage.engine import make_engine

    chosen, source = database_option(url)
    try:
        return _resolved(url), make_engine(chosen)
    except InvalidInput as error:
        raise InvalidInput(source, error.requirement) from None


def _resolved(url: str | None) -> URL:
    """``database_url`` of the URL a command uses (``--db``, ``$REPART_DB``, the configuration file, the
    built-in default: ``repart.cli.config``), with InvalidInput naming where it came from."""
    from repart.storage.engine import database_url

    chosen, source = database_option(url)
    try:
        return database_url(chosen)
    except InvalidInput as error:
        raise InvalidInput(source, error.requirement) from None


@contextmanager
def database_errors(shown: str) -> Iterator[None]:
    """Turn a driver error that says what is wrong with the database (not there, not a database, not
    reachable, read-only) into InvalidInput naming ``--db``; other driver errors propagate."""
    from sqlalchemy.exc import DBAPIError

    from repart.storage.engine import database_problem

    try:
        yield
    except DBAPIError as error:
        problem = database_problem(error)
        if problem is None:
            raise
        raise InvalidInput(DB_OPTION, f"{shown}: {problem}") from None


def query(url: str | None, work: Callable[[Session], T]) -> T:
    """Run ``work`` in one (write) transaction on the database at ``url`` (see ``open_database``)."""
    from repart.storage.engine import run_in_transaction

    with open_database(url) as engine:
        return run_in_transaction(engine, work)


def read_query(url: str | None, work: Callable[[Session], T]) -> T:
    """Run ``work``, which only reads, in one read-only transaction on the database at ``url``: on
    SQLite it works while another process holds the write lock (see ``open_database``)."""
    from repart.storage.engine import read_transaction

    with open_database(url) as engine:
        return read_transaction(engine, work)


def read_rows(url: str | None, work: Callable[[Connection], T]) -> T:
    """``read_query`` for ``work`` that reads Core tables (``repart.storage.tables``) on a connection:
    the command loads no ORM (``repart status``)."""
    from repart.storage.engine import read_connection

    with open_database(url) as engine:
        return read_connection(engine, work)


def console() -> Console:
    """A console on stdout for people: as wide as the terminal, or 160 columns when redirected."""
    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 160, highlight=False)


def print_json(value: Any) -> None:
    """Print ``value`` as strict JSON on stdout."""
    typer.echo(json.dumps(value, indent=1, ensure_ascii=False, allow_nan=False))


def number(value: float | None, digits: int = 4) -> str:
    """A float for a table cell (``-`` for unknown)."""
    return "-" if value is None else f"{value:.{digits}g}"
