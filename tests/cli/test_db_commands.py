"""``repart db upgrade|current``, and the schema revision check that the CLI, the daemon and the job's
client share: a database at another revision than the code's is refused in one line naming both.

Every test runs on SQLite and PostgreSQL (``empty_url``: a fresh database, never migrated). A database
"made by an older repart" is one migrated up to an older revision, as that repart left it.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from alembic import command
from alembic.script import ScriptDirectory
from sqlalchemy import text

from repart.controller.daemon import Daemon, DaemonConfig
from repart.errors import InvalidInput
from repart.storage import make_engine
from repart.storage.client import SqlControllerClient
from repart.storage.schema import HEAD_REVISION, MIGRATIONS, alembic_config, check_revision
from tests.cli.helpers import one_error, repart, repart_json

OLDER = "0004"


def migrate_to(url: str, revision: str) -> None:
    """Migrate the database at ``url`` up to ``revision`` (not to head)."""
    engine = make_engine(url)
    try:
        config = alembic_config(engine)
        with engine.begin() as connection:
            config.attributes["connection"] = connection
            command.upgrade(config, revision)
    finally:
        engine.dispose()


def refusals(url: str) -> list[InvalidInput]:
    """What the job's client and the daemon raise on the database at ``url``."""
    engine = make_engine(url)
    raised = []
    try:
        for construct in (
            lambda: SqlControllerClient(engine),
            lambda: Daemon(engine, DaemonConfig(interval_seconds=1, lease_ttl_seconds=5)),
        ):
            with pytest.raises(InvalidInput) as refused:
                construct()
            raised.append(refused.value)
    finally:
        engine.dispose()
    return raised


def test_a_database_made_by_an_older_repart_is_refused_until_db_upgrade(empty_url: str) -> None:
    migrate_to(empty_url, OLDER)
    for refusal in refusals(empty_url):
        assert refusal.field == "db"
        assert str(refusal) == (
            f"db is at schema revision {OLDER} and this repart needs {HEAD_REVISION}: run `repart db "
            "upgrade` to upgrade it"
        )
    status = repart(empty_url, "status")
    assert status.exit_code == 2
    assert one_error(status.output).startswith(f"error: --db is at schema revision {OLDER} and this repart")

    assert repart_json(empty_url, "db", "current") == {
        "database": empty_url,
        "revision": OLDER,
        "head": HEAD_REVISION,
        "up_to_date": False,
    }
    assert repart_json(empty_url, "db", "upgrade") == {
        "database": empty_url,
        "from_revision": OLDER,
        "revision": HEAD_REVISION,
    }
    assert repart_json(empty_url, "db", "current")["up_to_date"] is True

    engine = make_engine(empty_url)
    try:
        check_revision(engine)
        SqlControllerClient(engine)
        Daemon(engine, DaemonConfig(interval_seconds=1, lease_ttl_seconds=5)).stop()
    finally:
        engine.dispose()
    assert repart(empty_url, "status").exit_code == 0


def test_an_empty_database_is_refused_and_db_upgrade_creates_its_tables(empty_url: str) -> None:
    make_engine(empty_url).dispose()  # SQLite: the file exists, with no tables
    for refusal in refusals(empty_url):
        assert str(refusal) == (
            f"db has no schema revision (no repart tables) and this repart needs {HEAD_REVISION}: run "
            "`repart db upgrade` to create them"
        )
    assert repart_json(empty_url, "db", "current")["revision"] is None
    upgraded = repart(empty_url, "db", "upgrade")
    assert upgraded.exit_code == 0, upgraded.output
    assert upgraded.stdout == (
        f"database {empty_url} upgraded from no schema revision to schema revision {HEAD_REVISION}\n"
    )
    again = repart(empty_url, "db", "upgrade")
    assert again.stdout == f"database {empty_url} is at schema revision {HEAD_REVISION} already\n"
    current = repart(empty_url, "db", "current")
    assert current.stdout == (
        f"database {empty_url} is at schema revision {HEAD_REVISION}; this repart's newest is "
        f"{HEAD_REVISION}\n"
    )


def test_a_database_upgraded_by_a_newer_repart_is_refused_naming_both(empty_url: str) -> None:
    migrate_to(empty_url, "head")
    engine = make_engine(empty_url)
    try:
        with engine.begin() as connection:
            connection.execute(text("UPDATE alembic_version SET version_num = '0099'"))
    finally:
        engine.dispose()
    for refusal in refusals(empty_url):
        assert refusal.field == "db"
        assert str(refusal) == (
            f"db is at schema revision 0099, newer than this repart's {HEAD_REVISION}: a newer repart "
            "upgraded it, so run that one (or upgrade this one)"
        )
    current = repart_json(empty_url, "db", "current")
    assert (current["revision"], current["up_to_date"]) == ("0099", False)


def test_db_commands_refuse_a_missing_database(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'missing.db'}"
    for command_words in (["db", "upgrade"], ["db", "current"]):
        result = repart(url, *command_words)
        assert result.exit_code == 2
        assert "create it with `repart init`" in one_error(result.output)
    assert not (tmp_path / "missing.db").exists()


def test_revisions_are_numbered_so_that_text_order_is_their_order() -> None:
    """The check tells a newer database from an older one by comparing revision ids as text."""
    scripts = ScriptDirectory(str(MIGRATIONS))
    revisions = [script.revision for script in scripts.walk_revisions()]  # newest first
    assert revisions == sorted(revisions, reverse=True)
    assert all(len(revision) == 4 and revision.isdigit() for revision in revisions)
    assert revisions[0] == HEAD_REVISION
