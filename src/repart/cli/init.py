"""``repart init``: create the database and bring its schema to the newest revision."""

from __future__ import annotations

from repart.cli.database import DbOption, JsonOption, database_errors, engine_for
from repart.cli.errors import reports_bad_input
from repart.cli.schema import upgrade_and_report


@reports_bad_input
def init(db: DbOption = None, as_json: JsonOption = False) -> None:
    """Create the database (and its directory) and run every schema migration; safe to run again."""
    resolved, engine = engine_for(db)
    try:
        with database_errors(resolved.render_as_string(hide_password=True)):
            upgrade_and_report(engine, as_json)
    finally:
        engine.dispose()
