"""``repart init``: create the database and bring its schema to the newest revision (DESIGN §7)."""

from __future__ import annotations

import typer

from repart.cli.database import DbOption, JsonOption, database_errors, engine_for, print_json
from repart.cli.errors import reports_bad_input


@reports_bad_input
def init(db: DbOption = None, as_json: JsonOption = False) -> None:
    """Create the database (and its directory) and run every schema migration; safe to run again."""
    from repart.storage import current_revision, upgrade

    resolved, engine = engine_for(db)
    url = resolved.render_as_string(hide_password=True)
    try:
        with database_errors(url):
            upgrade(engine)
            revision = current_revision(engine)
    finally:
        engine.dispose()
    if as_json:
        print_json({"database": url, "revision": revision})
    else:
        typer.echo(f"database {url} is at schema revision {revision}")
