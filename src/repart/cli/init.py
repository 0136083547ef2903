"""``repart init``: create the database and bring its schema to the newest revision (DESIGN §7)."""

from __future__ import annotations

import typer

from repart.cli.database import DbOption, JsonOption, print_json
from repart.cli.errors import reports_bad_input
from repart.storage import current_revision, database_url, make_engine, upgrade


@reports_bad_input
def init(db: DbOption = None, as_json: JsonOption = False) -> None:
    """Create the database (and its directory) and run every schema migration; safe to run again."""
    engine = make_engine(db)
    try:
        upgrade(engine)
        revision = current_revision(engine)
    finally:
        engine.dispose()
    url = database_url(db).render_as_string(hide_password=True)
    if as_json:
        print_json({"database": url, "revision": revision})
    else:
        typer.echo(f"database {url} is at schema revision {revision}")
