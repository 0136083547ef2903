"""Schema management: Alembic configured in code, scripts located through the package.

``upgrade`` brings a database to the newest revision (``repart init`` and ``repart db upgrade`` call
it); it is idempotent. The scripts live in ``repart/storage/migrations``, found relative to this module,
so an installed package needs no alembic.ini.

``check_revision`` refuses a database at another revision than ``HEAD_REVISION``, the schema this code
reads and writes, in one line naming both: every CLI command but ``init`` and ``db``, the daemon and
the job's ``SqlControllerClient`` call it before they use a database. It reads one table and needs no
Alembic (Alembic is imported only to upgrade or to read the scripts).
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Connection, Engine, inspect, text

from repart.errors import Corrupt, InvalidInput
from repart.storage.engine import make_engine, read_only

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
HEAD_REVISION = "0010"
"""The newest migration script's revision (tests check it against the scripts: ``head_revision``).
Revisions are numbered with four digits, so their text order is their order."""


def alembic_config(engine: Engine) -> Config:
    """An Alembic configuration for ``engine`` with the package's migration scripts."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False))
    return config


def upgrade(engine_or_url: Engine | str | None = None) -> str | None:
    """Run every pending revision up to head, all in one transaction; the revision the database was at
    before (None: none, an empty database).

    ``engine_or_url`` is an engine, or a URL resolved like ``make_engine`` (``$REPART_DB``, then the
    SQLite default); an engine created here is disposed of before returning. A database that a newer
    repart upgraded is refused as ``check_revision`` refuses it, and left as it is; one at head is left
    as it is too (nothing runs, nothing is checked). On SQLite, revisions that leave a row referring to
    a missing one, where there was none before, are refused with ``Corrupt`` and nothing is committed
    (``_check_foreign_keys``).
    """
    from alembic import command

    owned = not isinstance(engine_or_url, Engine)
    engine = make_engine(engine_or_url) if not isinstance(engine_or_url, Engine) else engine_or_url
    try:
        config = alembic_config(engine)
        with engine.connect() as connection, _foreign_keys_off(connection), connection.begin():
            before = _revision(connection)
            if before is not None and before > HEAD_REVISION:
                raise _newer(before)
            if before == HEAD_REVISION:
                return before
            dangling = _dangling_references(connection)
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
            _check_foreign_keys(connection, dangling)
        return before
    finally:
        if owned:
            engine.dispose()


@contextmanager
def _foreign_keys_off(connection: Connection) -> Iterator[None]:
    """On SQLite, foreign keys off while the revisions run, on again afterwards.

    SQLite alters a table by copying it (Alembic's batch mode): it creates the new table, copies the
    rows, drops the old one and renames the new one. With foreign keys on, the drop deletes the old
    table's rows first and cascades to every table that refers to it (a region's versions, plans and
    snapshots, a plan's moves). The pragma has no effect inside a transaction, so it is set on the
    driver's connection before the upgrade's transaction begins; ``_check_foreign_keys`` checks the
    result before it commits."""
    if connection.dialect.name != "sqlite":
        yield
        return
    driver = connection.connection.driver_connection
    assert driver is not None
    driver.execute("PRAGMA foreign_keys=OFF")
    try:
        yield
    finally:
        driver.execute("PRAGMA foreign_keys=ON")


def _dangling_references(connection: Connection) -> Counter[tuple[str, str]]:
    """On SQLite, how many rows of each table refer to a missing row of each parent table (``PRAGMA
    foreign_key_check``); empty elsewhere (PostgreSQL checks every reference as it is written)."""
    if connection.dialect.name != "sqlite":
        return Counter()
    rows = connection.exec_driver_sql("PRAGMA foreign_key_check").all()
    return Counter((str(table), str(parent)) for table, _, parent, _ in rows)


def _check_foreign_keys(connection: Connection, before: Counter[tuple[str, str]]) -> None:
    """On SQLite, refuse to commit revisions that left more rows referring to missing ones than there
    were ``before`` them (they ran with foreign keys off: ``_foreign_keys_off``); rows that referred to
    missing ones already are the database's, not the upgrade's. ``Corrupt`` in one line."""
    added = _dangling_references(connection) - before
    if added:
        (table, parent), count = sorted(added.items())[0]
        raise Corrupt(
            f"the schema upgrade would leave {sum(added.values())} more row(s) referring to missing rows "
            f"({count} of table {table} referring to {parent}); nothing was committed"
        )


def head_revision() -> str:
    """The newest revision of the package's migration scripts, as Alembic reads them."""
    from alembic.script import ScriptDirectory

    head = ScriptDirectory(str(MIGRATIONS)).get_current_head()
    if head is None:
        raise RuntimeError(f"no Alembic revisions found in {MIGRATIONS}")
    return head


def current_revision(engine: Engine) -> str | None:
    """The revision the database is at; None for a database that was never upgraded. Only reads: it
    works while another process holds SQLite's write lock."""
    with read_only(engine).connect() as connection:
        return _revision(connection)


def check_revision(engine: Engine) -> None:
    """Refuse a database that is not at ``HEAD_REVISION`` with InvalidInput naming ``db``, both
    revisions and what to do: an older or empty one is brought to this code's revision by ``repart db
    upgrade``; one that a newer repart upgraded needs that repart."""
    revision = current_revision(engine)
    if revision == HEAD_REVISION:
        return
    if revision is None:
        raise InvalidInput(
            "db",
            f"has no schema revision (no repart tables) and this repart needs {HEAD_REVISION}: run "
            "`repart db upgrade` to create them",
        )
    if revision > HEAD_REVISION:
        raise _newer(revision)
    raise InvalidInput(
        "db",
        f"is at schema revision {revision} and this repart needs {HEAD_REVISION}: run `repart db upgrade` "
        "to upgrade it",
    )


def _newer(revision: str) -> InvalidInput:
    """The refusal of a database at ``revision``, which a newer repart upgraded."""
    return InvalidInput(
        "db",
        f"is at schema revision {revision}, newer than this repart's {HEAD_REVISION}: a newer repart "
        "upgraded it, so run that one (or upgrade this one)",
    )


def _revision(connection: Connection) -> str | None:
    """The revision recorded in the database of ``connection``; None without Alembic's table or row."""
    if not inspect(connection).has_table("alembic_version"):
        return None
    revision = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
    return None if revision is None else str(revision)
