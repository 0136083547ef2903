"""Migrations, engine setup and column types (DESIGN §7)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Engine, inspect, select, text
from sqlalchemy.orm import Session

from repart.storage import current_revision, database_url, head_revision, make_engine, upgrade
from repart.storage.models import Base, Event

from .helpers import add_region, row_counts


def test_upgrade_creates_every_table_on_an_empty_database(empty_url: str) -> None:
    engine = make_engine(empty_url)
    try:
        assert current_revision(engine) is None
        upgrade(engine)
        upgrade(engine)  # idempotent
        assert current_revision(engine) == head_revision()
        tables = set(inspect(engine).get_table_names())
        assert set(Base.metadata.tables) <= tables
        assert set(row_counts(engine).values()) == {0}
    finally:
        engine.dispose()


def test_upgrade_accepts_a_url(empty_url: str) -> None:
    upgrade(empty_url)
    engine = make_engine(empty_url)
    try:
        assert current_revision(engine) == head_revision()
    finally:
        engine.dispose()


def test_models_match_the_migrated_schema(engine: Engine) -> None:
    with engine.connect() as connection:
        context = MigrationContext.configure(connection, opts={"compare_type": True})
        assert compare_metadata(context, Base.metadata) == []


def test_timestamps_are_utc_aware_on_the_way_out(engine: Engine) -> None:
    at = datetime(2026, 3, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    with Session(engine) as session, session.begin():
        session.add(Event(kind="k", rule="r", message="m", data_json="{}", at=at))
    with Session(engine) as session:
        stored = session.scalars(select(Event.at)).one()
    assert stored == at and stored.tzinfo == UTC


def test_naive_timestamps_are_rejected(engine: Engine) -> None:
    with Session(engine) as session, pytest.raises(Exception, match="timezone-aware"), session.begin():
        session.add(Event(kind="k", rule="r", message="m", data_json="{}", at=datetime(2026, 1, 1)))
        session.flush()
    assert row_counts(engine)["events"] == 0


def test_sqlite_connections_use_wal_and_foreign_keys(tmp_path: Path) -> None:
    engine = make_engine(f"sqlite:///{tmp_path / 'a' / 'b' / 'x.db'}", busy_timeout=1.5)
    try:
        with engine.connect() as connection:
            assert connection.execute(text("PRAGMA journal_mode")).scalar() == "wal"
            assert connection.execute(text("PRAGMA foreign_keys")).scalar() == 1
            assert connection.execute(text("PRAGMA busy_timeout")).scalar() == 1500
    finally:
        engine.dispose()


def test_foreign_keys_are_enforced(engine: Engine) -> None:
    add_region(engine)
    with Session(engine) as session, pytest.raises(Exception, match=r"(?i)foreign key"), session.begin():
        session.execute(text("INSERT INTO snapshot_slots (snapshot_id, slot, count) VALUES (999, 1, 1)"))


def test_database_url_prefers_argument_then_environment_then_default(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("REPART_DB", "postgresql+psycopg://u@h/db")
    assert database_url("sqlite:///x.db").render_as_string() == "sqlite:///x.db"
    assert database_url().render_as_string() == "postgresql+psycopg://u@h/db"
    monkeypatch.delenv("REPART_DB")
    monkeypatch.chdir(tmp_path)
    assert database_url().render_as_string() == "sqlite:///./.repart/repart.db"
    engine = make_engine()
    try:
        upgrade(engine)
        assert (tmp_path / ".repart" / "repart.db").is_file()
    finally:
        engine.dispose()
