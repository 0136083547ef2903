"""Migrations, engine setup and column types (DESIGN §7)."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import replace
from datetime import UTC, datetime, timedelta, timezone
from pathlib import Path
from types import NoneType
from typing import Any, get_args, get_origin, get_type_hints

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import Column, Engine, Integer, Table, Text, inspect, select, text
from sqlalchemy.exc import IntegrityError, StatementError
from sqlalchemy.orm import DeclarativeBase, Mapped, Session
from sqlalchemy.types import TypeDecorator
from typer.testing import CliRunner

from repart.cli.app import app
from repart.controller.policy import FixedPolicy, TargetUtilizationPolicy
from repart.controller.settings import ControllerSettings
from repart.errors import Conflict, Corrupt
from repart.storage import (
    RegionStatus,
    current_revision,
    database_url,
    head_revision,
    make_engine,
    run_in_transaction,
    upgrade,
)
from repart.storage.models import Base, Event, Region
from repart.storage.regions import RegionConfig
from repart.storage.retention import PlanRetention, prune_plans
from repart.storage.schema import HEAD_REVISION, alembic_config
from tests.factories import add_applied_chain, add_region, database_dump, row_counts


def upgrade_to(engine: Engine, revision: str) -> None:
    """Bring an empty database to schema ``revision`` (not the head), as Alembic runs a revision."""
    config = alembic_config(engine)
    with engine.begin() as connection:
        config.attributes["connection"] = connection
        command.upgrade(config, revision)


def test_upgrade_creates_every_table_on_an_empty_database(empty_url: str) -> None:
    engine = make_engine(empty_url)
    try:
        assert current_revision(engine) is None
        upgrade(engine)
        upgrade(engine)  # idempotent
        assert current_revision(engine) == head_revision() == HEAD_REVISION
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


def annotated_columns(model: type[Any]) -> dict[str, tuple[type, bool]]:
    """``{attribute: (Python type, may be None)}`` of ``model``'s own ``Mapped`` annotations, its
    relationships left out."""
    hints = get_type_hints(model)
    relationships = set(inspect(model).relationships.keys())
    typed: dict[str, tuple[type, bool]] = {}
    for name in model.__annotations__:
        if name in relationships or get_origin(hints[name]) is not Mapped:
            continue
        (annotated,) = get_args(hints[name])
        values = [t for t in get_args(annotated) or (annotated,) if t is not NoneType]
        assert len(values) == 1, (model.__name__, name, annotated)
        typed[name] = (values[0], NoneType in get_args(annotated))
    return typed


def table_columns(table: Table) -> dict[str, tuple[type, bool]]:
    """``{column: (Python type, nullable)}`` of ``table`` (a decorated type's is its implementation's)."""
    types = {
        column.key: column.type.impl_instance if isinstance(column.type, TypeDecorator) else column.type
        for column in table.columns
    }
    return {column.key: (types[column.key].python_type, bool(column.nullable)) for column in table.columns}


def test_every_model_types_exactly_its_tables_columns() -> None:
    """The ORM classes map the Core tables (``__table__``) and annotate each column for type checkers:
    a column annotated under another name, left out, with another Python type, or with None allowed
    or not unlike the column's nullability, fails here (SQLAlchemy itself does not check this)."""
    models = [mapper.class_ for mapper in Base.registry.mappers]
    assert {model.__table__.name for model in models} == set(Base.metadata.tables)
    for model in models:
        assert annotated_columns(model) == table_columns(model.__table__), model.__name__


@pytest.mark.parametrize(
    ("annotations", "agree"),
    [
        ({"id": Mapped[int], "note": Mapped[str | None]}, True),
        ({"id": Mapped[int], "nots": Mapped[str | None]}, False),  # misnamed
        ({"id": Mapped[int], "note": Mapped[str]}, False),  # None not allowed, the column is nullable
        ({"id": Mapped[int], "note": Mapped[bytes | None]}, False),  # another type
        ({"id": Mapped[int]}, False),  # a column left out
    ],
)
def test_the_type_check_catches_a_wrong_annotation(annotations: dict[str, Any], agree: bool) -> None:
    class Other(DeclarativeBase):  # not Base: the check above reads every class mapped on Base
        pass

    table = Table("t", Other.metadata, Column("id", Integer, primary_key=True), Column("note", Text))
    model = type("Model", (Other,), {"__table__": table, "__annotations__": annotations})
    assert (annotated_columns(model) == table_columns(table)) is agree


def test_timestamps_are_utc_aware_on_the_way_out(engine: Engine) -> None:
    at = datetime(2026, 3, 1, 12, 0, tzinfo=timezone(timedelta(hours=2)))
    with Session(engine) as session, session.begin():
        session.add(Event(kind="k", rule="r", message="m", data_json="{}", at=at))
    with Session(engine) as session:
        stored = session.scalars(select(Event.at)).one()
    assert stored == at and stored.tzinfo == UTC


def test_naive_timestamps_are_rejected(engine: Engine) -> None:
    with Session(engine) as session, pytest.raises(StatementError, match="timezone-aware"), session.begin():
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
    with Session(engine) as session, pytest.raises(IntegrityError, match=r"(?i)foreign key"), session.begin():
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


def test_revision_0002_backfills_the_region_status_from_versions_and_decisions(empty_url: str) -> None:
    engine = make_engine(empty_url)
    try:
        upgrade_to(engine, "0001")
        t0 = datetime(2026, 1, 1, tzinfo=UTC)
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO regions (id, name, key_type, n_channels_initial, resources, alpha, sigma, "
                    "algorithm, utility, policy, min_channels, max_channels, tail_aware, slot_bits, "
                    "consistent_method, settings_json, created_at, updated_at) VALUES (1, 'trades', 'str', "
                    "2, 'LCL', 1.2, 0.1, 'auto', 'APM', 'fixed', 1, 8, false, 4, 'jump', '{}', :t, :t)"
                ),
                {"t": t0},
            )
            for number, parent, n, status, minutes in [
                (1, None, 2, "applied", 0),
                (2, 1, 4, "abandoned", 1),
                (3, 1, 2, "planned", 2),
            ]:
                connection.execute(
                    text(
                        "INSERT INTO versions (region_id, number, parent_number, n_channels, digest, "
                        "function_json, algorithm, status, report_json, created_at) VALUES (1, :number, "
                        ":parent, :n, 'd', '{}', 'readj', :status, '{}', :at)"
                    ),
                    {
                        "number": number,
                        "parent": parent,
                        "n": n,
                        "status": status,
                        "at": t0 + timedelta(minutes=minutes),
                    },
                )
            for kind, seq in [("activated", 5), ("no-change", 7), ("rollback", None)]:
                connection.execute(
                    text(
                        "INSERT INTO events (region_id, at, kind, rule, message, data_json) "
                        "VALUES (1, :t, :kind, 'r', 'm', :data)"
                    ),
                    {"t": t0, "kind": kind, "data": "{}" if seq is None else f'{{"considered_seq": {seq}}}'},
                )
        upgrade(engine)
        with Session(engine) as session:
            row = session.scalars(select(Region)).one()
            assert RegionStatus.of(row) == RegionStatus(1, 3, 7, t0 + timedelta(minutes=1))
            assert row.lease_token == 0
    finally:
        engine.dispose()


def test_revision_0006_keeps_plans_and_starts_regions_without_failures(empty_url: str) -> None:
    engine = make_engine(empty_url)
    try:
        upgrade(engine)
        add_applied_chain(engine, "trades", (2, 3), pending=4)
        with engine.connect() as connection:
            plans_before = connection.execute(
                text("SELECT id, status, plan_json FROM plans ORDER BY id")
            ).all()
        moves = row_counts(engine)["plan_moves"]
        config = alembic_config(engine)
        sqlite = engine.dialect.name == "sqlite"
        with engine.connect() as connection:
            driver = connection.connection.driver_connection
            if sqlite:  # as upgrade() does: a table copy must not cascade
                driver.execute("PRAGMA foreign_keys=OFF")
            with connection.begin():
                config.attributes["connection"] = connection
                command.downgrade(config, "0005")
            if sqlite:
                driver.execute("PRAGMA foreign_keys=ON")
        with engine.connect() as connection:
            assert "tick_failures" not in {c["name"] for c in inspect(connection).get_columns("regions")}
        assert current_revision(engine) == "0005"
        upgrade(engine)
        with engine.connect() as connection:
            plans_after = connection.execute(
                text("SELECT id, status, plan_json FROM plans ORDER BY id")
            ).all()
            added = connection.execute(text("SELECT tick_failures, retry_at, last_error FROM regions")).all()
            pruned = connection.execute(text("SELECT pruned_at FROM plans")).scalars().all()
        assert plans_after == plans_before and len(plans_before) == 2
        assert row_counts(engine)["plan_moves"] == moves and moves > 0
        assert added == [(0, None, None)] and pruned == [None, None]
    finally:
        engine.dispose()


def test_upgrading_a_database_with_data_keeps_every_row(empty_url: str) -> None:
    """Revisions 0004 to 0006 copy the regions table on SQLite (batch mode); the copy must not cascade
    to the region's versions, plans and snapshots."""
    engine = make_engine(empty_url)
    try:
        upgrade_to(engine, "0003")
        t0 = datetime(2026, 1, 1, tzinfo=UTC)
        with engine.begin() as connection:
            connection.execute(
                text(
                    "INSERT INTO regions (id, name, key_type, n_channels_initial, resources, alpha, sigma, "
                    "algorithm, utility, policy, min_channels, max_channels, tail_aware, slot_bits, "
                    "consistent_method, settings_json, created_at, updated_at, lease_token) VALUES (1, "
                    "'trades', 'str', 2, 'LCL', 1.2, 0.1, 'auto', 'APM', 'fixed', 1, 8, false, 4, 'jump', "
                    "'{}', :t, :t, 0)"
                ),
                {"t": t0},
            )
            connection.execute(
                text(
                    "INSERT INTO versions (region_id, number, parent_number, n_channels, digest, "
                    "function_json, algorithm, status, report_json, created_at) VALUES (1, 1, NULL, 2, "
                    "'d', '{}', 'readj', 'applied', '{}', :t)"
                ),
                {"t": t0},
            )
        before = {table: count for table, count in row_counts(engine).items() if count}
        upgrade(engine)
        assert {table: count for table, count in row_counts(engine).items() if count} == before
        assert before == {"regions": 1, "versions": 1}
    finally:
        engine.dispose()


def test_revision_0007_maps_cooldown_and_hysteresis_onto_the_batch_settings(empty_url: str) -> None:
    engine = make_engine(empty_url)
    try:
        upgrade_to(engine, "0005")
        t0 = datetime(2026, 1, 1, tzinfo=UTC)
        settings = [
            '{"target_utilization": 0.5, "cooldown_seconds": 61, "hysteresis": 0.2, "counters": 4}',
            '{"hysteresis": 0.1}',
            '{"cooldown_seconds": 25, "hysteresis": 0}',
            '{"rebalance_threshold": 2.0}',
        ]
        with engine.begin() as connection:
            for region_id, text_settings in enumerate(settings, start=1):
                connection.execute(
                    text(
                        "INSERT INTO regions (id, name, key_type, n_channels_initial, resources, alpha, "
                        "sigma, algorithm, utility, policy, min_channels, max_channels, tail_aware, "
                        "slot_bits, consistent_method, settings_json, created_at, updated_at, mode, "
                        "lease_token) VALUES (:id, :name, 'str', 2, 'LCL', 1.2, 0.1, 'auto', 'APM', "
                        "'target-utilization', 1, 8, false, 4, 'jump', :settings, :t, :t, 'auto', 0)"
                    ),
                    {"id": region_id, "name": f"r{region_id}", "settings": text_settings, "t": t0},
                )
            for seq in range(4):  # region 1's snapshots were ingested 30 s apart
                moment = t0 + timedelta(seconds=30 * seq)
                connection.execute(
                    text(
                        "INSERT INTO snapshots (region_id, seq, window_start, window_end, tuples, "
                        "distinct_estimate, epsilon, key_type, slot_bits, ingested_at) VALUES (1, :seq, "
                        ":start, :end, 0, 0, 0.0, 'str', 4, :at)"
                    ),
                    {"seq": seq, "start": moment, "end": moment + timedelta(seconds=1), "at": moment},
                )
        upgrade(engine)
        with Session(engine) as session:
            mapped = {
                row.name: row.settings_json for row in session.scalars(select(Region).order_by(Region.id))
            }
        assert json.loads(mapped["r1"]) == {
            "target_utilization": 0.5,
            "utilization_band": [0.4, 0.6],
            "stabilization_batches": 3,  # ceil(61 / 30)
            "counters": 4,
        }
        assert json.loads(mapped["r2"]) == {
            "target_utilization": 0.8,
            "utilization_band": [pytest.approx(0.72), pytest.approx(0.88)],
        }
        assert json.loads(mapped["r3"]) == {"stabilization_batches": 3}  # no snapshots: ceil(25 / 10)
        assert json.loads(mapped["r4"]) == {"rebalance_threshold": 2.0}
    finally:
        engine.dispose()


def test_regions_with_a_target_outside_the_default_band_still_tick_after_revision_0007(
    empty_url: str,
) -> None:
    """The old code accepted any target in (0, 1]; after the upgrade such a region's settings still
    build, under either policy, with the default band widened to hold the target."""
    engine = make_engine(empty_url)
    try:
        upgrade_to(engine, "0006")
        t0 = datetime(2026, 1, 1, tzinfo=UTC)
        regions = {
            "high-tu": ("target-utilization", '{"target_utilization": 0.95, "cooldown_seconds": 60}'),
            "high-fixed": ("fixed", '{"target_utilization": 0.95}'),
            "low-tu": ("target-utilization", '{"target_utilization": 0.3}'),
            "low-fixed": ("fixed", '{"target_utilization": 0.3, "hysteresis": 0.5}'),
        }
        with engine.begin() as connection:
            for region_id, (name, (policy, text_settings)) in enumerate(regions.items(), start=1):
                connection.execute(
                    text(
                        "INSERT INTO regions (id, name, key_type, n_channels_initial, resources, alpha, "
                        "sigma, algorithm, utility, policy, min_channels, max_channels, tail_aware, "
                        "slot_bits, consistent_method, settings_json, created_at, updated_at, mode, "
                        "lease_token) VALUES (:id, :name, 'str', 2, 'LCL', 1.2, 0.1, 'auto', 'APM', "
                        ":policy, 1, 8, false, 12, 'jump', :settings, :t, :t, 'auto', 0)"
                    ),
                    {"id": region_id, "name": name, "policy": policy, "settings": text_settings, "t": t0},
                )
        upgrade(engine)
        with Session(engine) as session:
            configs = {row.name: RegionConfig.from_row(row) for row in session.scalars(select(Region))}
        policies = {name: ControllerSettings.from_config(config).policy for name, config in configs.items()}
        assert isinstance(policies["high-fixed"], FixedPolicy)
        assert isinstance(policies["low-fixed"], FixedPolicy)
        switched: dict[str, TargetUtilizationPolicy] = {}
        for name, config in configs.items():  # a fixed region's settings as that policy reads them
            policy = ControllerSettings.from_config(replace(config, policy="target-utilization")).policy
            assert isinstance(policy, TargetUtilizationPolicy)
            switched[name] = policy
        assert {name: policy.band for name, policy in switched.items()} == {
            "high-tu": (0.4, 0.95),
            "high-fixed": (0.4, 0.95),
            "low-tu": (0.3, 0.9),
            "low-fixed": (pytest.approx(0.15), pytest.approx(0.45)),  # the hysteresis's band
        }
        assert switched["high-tu"].stabilization_batches == 6  # ceil(60 / 10)
    finally:
        engine.dispose()


def _downgrade_sqlite(engine: Engine, revision: str) -> None:
    """Take a SQLite database back to ``revision``, foreign keys off as ``upgrade`` runs them."""
    config = alembic_config(engine)
    with engine.connect() as connection:
        driver = connection.connection.driver_connection
        driver.execute("PRAGMA foreign_keys=OFF")
        with connection.begin():
            config.attributes["connection"] = connection
            command.downgrade(config, revision)
        driver.execute("PRAGMA foreign_keys=ON")


def _add_dangling_event(path: Path) -> None:
    """An event row of region 99, which does not exist (written with foreign keys off)."""
    database = sqlite3.connect(path)
    try:
        database.execute("PRAGMA foreign_keys=OFF")
        database.execute(
            "INSERT INTO events (region_id, at, kind, rule, message, data_json) "
            "SELECT 99, at, kind, rule, message, data_json FROM events LIMIT 1"
        )
        database.commit()
    finally:
        database.close()


@pytest.mark.parametrize("pending", [False, True], ids=["at-head", "one-revision-pending"])
def test_a_dangling_row_from_before_does_not_fail_an_upgrade(tmp_path: Path, pending: bool) -> None:
    path = tmp_path / "repart.db"
    url = f"sqlite:///{path}"
    engine = make_engine(url)
    try:
        upgrade(engine)
        add_applied_chain(engine, "r", (2, 3))
        if pending:
            _downgrade_sqlite(engine, "0005")
        _add_dangling_event(path)
        assert upgrade(engine) == ("0005" if pending else HEAD_REVISION)
        assert current_revision(engine) == HEAD_REVISION
    finally:
        engine.dispose()
    assert CliRunner().invoke(app, ["db", "upgrade", "--db", url]).exit_code == 0


def test_an_upgrade_that_leaves_a_new_dangling_row_is_corrupt_and_commits_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "repart.db"
    url = f"sqlite:///{path}"
    engine = make_engine(url)
    try:
        upgrade(engine)
        add_applied_chain(engine, "r", (2, 3))
        _downgrade_sqlite(engine, "0005")
        before = row_counts(engine)
        real_upgrade = command.upgrade

        def breaking_upgrade(config: Any, revision: str) -> None:
            real_upgrade(config, revision)
            config.attributes["connection"].exec_driver_sql("DELETE FROM regions")

        monkeypatch.setattr(command, "upgrade", breaking_upgrade)
        with pytest.raises(Corrupt) as refused:
            upgrade(engine)
        assert "nothing was committed" in str(refused.value)
        assert current_revision(engine) == "0005"
        assert row_counts(engine) == before
        result = CliRunner().invoke(app, ["db", "upgrade", "--db", url])
        assert result.exit_code == 4, result.output
        assert "Traceback" not in result.output and len(result.output.strip().splitlines()) == 1
    finally:
        engine.dispose()


def test_revision_0006_refuses_to_downgrade_once_a_plan_is_pruned(empty_url: str) -> None:
    engine = make_engine(empty_url)
    try:
        upgrade(engine)
        add_applied_chain(engine, "trades", (2, 3, 4))
        now = datetime.now(UTC)
        retention = PlanRetention(keep_versions=1)  # the plan to version 2; 3 is applied
        pruned = run_in_transaction(
            engine, lambda s: prune_plans(s, "trades", retention, now, strict=True, rule="operator")
        )
        assert len(pruned) == 1
        before = database_dump(engine)
        with pytest.raises(Conflict) as refused:
            if engine.dialect.name == "sqlite":
                _downgrade_sqlite(engine, "0005")
            else:
                config = alembic_config(engine)
                with engine.begin() as connection:
                    config.attributes["connection"] = connection
                    command.downgrade(config, "0005")
        assert "the moves of 1 plan(s) were pruned" in str(refused.value)
        assert current_revision(engine) == HEAD_REVISION
        assert database_dump(engine) == before
    finally:
        engine.dispose()


def test_revision_0010_refuses_to_downgrade_while_a_spark_state_region_exists(empty_url: str) -> None:
    engine = make_engine(empty_url)
    try:
        upgrade(engine)
        add_region(engine, "agg", "str", engine="spark-state")
        before = database_dump(engine)
        with pytest.raises(Conflict) as refused:
            if engine.dialect.name == "sqlite":
                _downgrade_sqlite(engine, "0009")
            else:
                config = alembic_config(engine)
                with engine.begin() as connection:
                    config.attributes["connection"] = connection
                    command.downgrade(config, "0009")
        assert "1 region(s) control Spark-managed state" in str(refused.value)
        assert current_revision(engine) == HEAD_REVISION
        assert database_dump(engine) == before
    finally:
        engine.dispose()


def test_revision_0009_binds_job_tokens_to_their_region_id(empty_url: str) -> None:
    engine = make_engine(empty_url)
    try:
        upgrade_to(engine, "0008")
        t0 = datetime(2026, 1, 1, tzinfo=UTC)
        with engine.begin() as connection:
            for region_id, name in ((3, "kept"), (7, "other")):
                connection.execute(
                    text(
                        "INSERT INTO regions (id, name, key_type, n_channels_initial, resources, alpha, "
                        "sigma, algorithm, utility, policy, min_channels, max_channels, tail_aware, "
                        "slot_bits, consistent_method, settings_json, created_at, updated_at, mode, "
                        "lease_token) VALUES (:id, :name, 'str', 2, 'LCL', 1.2, 0.1, 'auto', 'APM', "
                        "'target-utilization', 1, 8, false, 4, 'jump', '{}', :t, :t, 'auto', 0)"
                    ),
                    {"id": region_id, "name": name, "t": t0},
                )
            for token_id, scope in enumerate(("job:kept", "job:gone", "read", "job:other"), start=1):
                connection.execute(
                    text(
                        "INSERT INTO api_tokens (id, secret_sha256, scope, created_at) "
                        "VALUES (:id, :digest, :scope, :t)"
                    ),
                    {"id": token_id, "digest": "0" * 64, "scope": scope, "t": t0},
                )
        upgrade(engine)
        with engine.connect() as connection:
            rows = connection.execute(
                text("SELECT id, scope, region_id, revoked_at FROM api_tokens ORDER BY id")
            ).all()
        assert [(row.id, row.scope, row.region_id, row.revoked_at is None) for row in rows] == [
            (1, "job:kept", 3, True),
            (2, "job:gone", None, False),  # its region no longer exists: revoked
            (3, "read", None, True),
            (4, "job:other", 7, True),
        ]
        with Session(engine) as session:
            session.execute(text("DELETE FROM regions WHERE id = 7"))
            session.commit()
            remaining = session.execute(text("SELECT id FROM api_tokens ORDER BY id")).scalars().all()
        assert remaining == [1, 2, 3]  # a region's tokens go with it
    finally:
        engine.dispose()
