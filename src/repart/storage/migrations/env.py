"""Alembic environment: run the revisions on the connection ``repart.storage.schema`` passes in.

Run from ``repart.storage.schema.upgrade``, which configures Alembic in code (no alembic.ini) and
hands over an open connection in ``config.attributes["connection"]``. Without one, the URL in the
``sqlalchemy.url`` option is opened with ``make_engine`` (so SQLite gets WAL and foreign keys). SQLite
runs in batch mode, so later revisions can alter tables by copying them.
"""

from __future__ import annotations

from alembic import context
from sqlalchemy.engine import Connection

from repart.storage.engine import make_engine
from repart.storage.models import Base


def _run(connection: Connection) -> None:
    context.configure(
        connection=connection,
        target_metadata=Base.metadata,
        render_as_batch=connection.dialect.name == "sqlite",
    )
    with context.begin_transaction():
        context.run_migrations()


def _run_online() -> None:
    connection = context.config.attributes.get("connection")
    if connection is not None:
        _run(connection)
        return
    engine = make_engine(context.config.get_main_option("sqlalchemy.url"))
    try:
        with engine.connect() as opened:
            _run(opened)
    finally:
        engine.dispose()


if context.is_offline_mode():
    context.configure(url=context.config.get_main_option("sqlalchemy.url"), literal_binds=True)
    with context.begin_transaction():
        context.run_migrations()
else:
    _run_online()
