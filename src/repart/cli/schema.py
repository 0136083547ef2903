"""``repart db upgrade|current``: the schema revision of the controller's database.

A repart reads and writes the database at one schema revision, its newest migration's; every other
database command, the daemon and a job's client refuse a database at another one. ``repart db
upgrade`` runs the pending migrations (Alembic's upgrade to head, in one transaction) on a database
that exists; ``repart init`` does the same and creates the database first. ``repart db current``
shows the database's revision and the code's.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import typer

from repart.cli.database import DbOption, JsonOption, existing_database, print_json
from repart.cli.errors import reports_bad_input

if TYPE_CHECKING:
    from sqlalchemy import Engine

db_app = typer.Typer(help="The database's schema revision: upgrade it to this repart's, or show it.")


@db_app.command("upgrade")
@reports_bad_input
def upgrade(db: DbOption = None, as_json: JsonOption = False) -> None:
    """Run the pending schema migrations on an existing database; safe to run again."""
    with existing_database(db) as engine:
        upgrade_and_report(engine, as_json)


@db_app.command("current")
@reports_bad_input
def current(db: DbOption = None, as_json: JsonOption = False) -> None:
    """Show the database's schema revision and the newest this repart has."""
    from repart.storage.schema import HEAD_REVISION, current_revision

    with existing_database(db) as engine:
        revision = current_revision(engine)
        url = engine.url.render_as_string(hide_password=True)
    if as_json:
        print_json(
            {
                "database": url,
                "revision": revision,
                "head": HEAD_REVISION,
                "up_to_date": revision == HEAD_REVISION,
            }
        )
        return
    typer.echo(f"database {url} is at {_revision(revision)}; this repart's newest is {HEAD_REVISION}")


def upgrade_and_report(engine: Engine, as_json: bool) -> None:
    """Upgrade the database of ``engine`` to this repart's schema revision and print what was done:
    the revision it was at and the one it is at (the same when there was nothing to do)."""
    from repart.storage.schema import current_revision, upgrade

    before = upgrade(engine)
    after = current_revision(engine)
    url = engine.url.render_as_string(hide_password=True)
    if as_json:
        print_json({"database": url, "from_revision": before, "revision": after})
    elif before == after:
        typer.echo(f"database {url} is at {_revision(after)} already")
    else:
        typer.echo(f"database {url} upgraded from {_revision(before)} to {_revision(after)}")


def _revision(revision: str | None) -> str:
    """``schema revision 0005``, or ``no schema revision`` for an empty database."""
    return "no schema revision" if revision is None else f"schema revision {revision}"
