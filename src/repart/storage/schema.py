"""Schema management: Alembic configured in code, scripts located through the package (DESIGN §7).

``upgrade`` brings a database to the newest revision (``repart init`` and ``repart db upgrade`` call
it); it is idempotent. The scripts live in ``repart/storage/migrations``, found relative to this module,
so an installed package needs no alembic.ini.

Checking a database's revision against ``HEAD_REVISION`` reads one table and needs no Alembic, which
every CLI command does before it runs (Alembic is imported only to upgrade or to read the scripts).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from sqlalchemy import Engine, inspect, text

from repart.storage.engine import make_engine, read_only

if TYPE_CHECKING:
    from alembic.config import Config

MIGRATIONS = Path(__file__).resolve().parent / "migrations"
HEAD_REVISION = "0005"
"""The newest migration script's revision (tests check it against the scripts: ``head_revision``)."""


def alembic_config(engine: Engine) -> Config:
    """An Alembic configuration for ``engine`` with the package's migration scripts."""
    from alembic.config import Config

    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS))
    config.set_main_option("sqlalchemy.url", engine.url.render_as_string(hide_password=False))
    return config


def upgrade(engine_or_url: Engine | str | None = None) -> None:
    """Run every pending revision up to head, all in one transaction.

    ``engine_or_url`` is an engine, or a URL resolved like ``make_engine`` (``$REPART_DB``, then the
    SQLite default); an engine created here is disposed of before returning.
    """
    from alembic import command

    owned = not isinstance(engine_or_url, Engine)
    engine = make_engine(engine_or_url) if not isinstance(engine_or_url, Engine) else engine_or_url
    try:
        config = alembic_config(engine)
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, "head")
    finally:
        if owned:
            engine.dispose()


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
        if not inspect(connection).has_table("alembic_version"):
            return None
        revision = connection.execute(text("SELECT version_num FROM alembic_version")).scalar()
        return None if revision is None else str(revision)
