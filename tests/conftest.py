"""Fixtures: storage and controller tests run on SQLite (a temp file) and on a real PostgreSQL 15 server;
state store tests on a local directory and on a real S3-compatible endpoint.

The PostgreSQL server is started once per session from the image's ``initdb``/``pg_ctl`` (as the
``postgres`` user, in a temp dir, on a free loopback port, without fsync) and stopped at the end, also
on failure. Each test gets a fresh, migrated database: a copy of a template migrated once per session
(a file copy for SQLite, ``CREATE DATABASE … TEMPLATE`` for PostgreSQL).

The S3 endpoint is moto's server (the ``moto[server]`` dev extra, run by ``tests/s3_endpoint.py``,
which makes its conditional puts atomic as S3's are) on a free loopback port, started once per
session and stopped by its process id; each test gets a bucket of its own. ``store_url`` is a fresh
store location on either backend (``store_backend``).
"""

from __future__ import annotations

import itertools
import shutil
import socket
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import Engine, create_engine, text

from repart.storage import make_engine, upgrade
from tests.factories import s3_bucket
from tests.s3_endpoint import running

PG_BIN = Path("/usr/lib/postgresql/15/bin")
BACKENDS = ("sqlite", "postgresql")
_TEMPLATE = "repart_template"
_counter = itertools.count()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _as_postgres(*args: str) -> None:
    subprocess.run(["runuser", "-u", "postgres", "--", *args], check=True, capture_output=True)


@pytest.fixture(scope="session")
def postgres_server() -> Iterator[str]:
    """The base URL of a throwaway PostgreSQL 15 server (skips when the binaries are missing)."""
    if not (PG_BIN / "initdb").exists():
        pytest.skip(f"PostgreSQL 15 is not installed ({PG_BIN / 'initdb'} is missing)")
    root = Path(tempfile.mkdtemp(prefix="repart-pg-"))
    data, sockets = root / "data", root / "sockets"
    sockets.mkdir()
    shutil.chown(root, "postgres")
    shutil.chown(sockets, "postgres")
    port = _free_port()
    _as_postgres(str(PG_BIN / "initdb"), "-A", "trust", "-U", "postgres", "-D", str(data))
    options = f"-p {port} -k {sockets} -c listen_addresses=127.0.0.1 -c fsync=off -c full_page_writes=off"
    _as_postgres(
        str(PG_BIN / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "log"), "-w", "start"
    )
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}"
    finally:
        _as_postgres(str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "fast", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)


def _admin(server: str) -> Engine:
    return create_engine(f"{server}/postgres", isolation_level="AUTOCOMMIT")


@pytest.fixture(scope="session")
def postgres_template(postgres_server: str) -> Iterator[str]:
    """The server's base URL, once a migrated template database exists on it."""
    admin = _admin(postgres_server)
    with admin.connect() as connection:
        connection.execute(text(f"CREATE DATABASE {_TEMPLATE}"))
    upgrade(f"{postgres_server}/{_TEMPLATE}")
    yield postgres_server
    admin.dispose()


@pytest.fixture(scope="session")
def sqlite_template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A migrated SQLite database file to copy."""
    path = tmp_path_factory.mktemp("template") / "repart.db"
    upgrade(f"sqlite:///{path}")
    return path


def _fresh_postgres(server: str, template: str | None) -> Iterator[str]:
    name = f"repart_test_{next(_counter)}"
    admin = _admin(server)
    clause = f" TEMPLATE {template}" if template else ""
    with admin.connect() as connection:
        connection.execute(text(f"CREATE DATABASE {name}{clause}"))
    try:
        yield f"{server}/{name}"
    finally:
        with admin.connect() as connection:
            connection.execute(text(f"DROP DATABASE {name} WITH (FORCE)"))
        admin.dispose()


@pytest.fixture(params=BACKENDS)
def backend(request: pytest.FixtureRequest) -> str:
    """The backend under test: ``sqlite`` or ``postgresql``."""
    return str(request.param)


@pytest.fixture
def db_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of a fresh database migrated to head."""
    if backend == "sqlite":
        path = tmp_path / "repart.db"
        shutil.copyfile(request.getfixturevalue("sqlite_template"), path)
        yield f"sqlite:///{path}"
    else:
        yield from _fresh_postgres(request.getfixturevalue("postgres_template"), _TEMPLATE)


@pytest.fixture
def empty_url(backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of a fresh, empty database (never migrated)."""
    if backend == "sqlite":
        yield f"sqlite:///{tmp_path / 'empty.db'}"
    else:
        yield from _fresh_postgres(request.getfixturevalue("postgres_server"), None)


@pytest.fixture
def engine(db_url: str) -> Iterator[Engine]:
    """An engine on a fresh migrated database, disposed of after the test."""
    created = make_engine(db_url, busy_timeout=2.0)
    yield created
    created.dispose()


STORE_BACKENDS = ("local", "s3")
#: The credentials of the local S3 endpoint (moto accepts any; they must only be present).
S3_OPTIONS = {"aws_access_key_id": "repart-test", "aws_secret_access_key": "repart-test-secret"}


@pytest.fixture(scope="session")
def s3_endpoint() -> Iterator[str]:
    """The URL of a local S3-compatible endpoint: moto's server on loopback, its conditional puts
    atomic, for the whole session."""
    with running(log=Path(tempfile.mkdtemp(prefix="repart-moto-")) / "moto.log") as url:
        yield url


@pytest.fixture
def s3_options(s3_endpoint: str) -> dict[str, str]:
    """Store options for the local S3 endpoint: its address and test credentials."""
    return {**S3_OPTIONS, "endpoint": s3_endpoint}


@pytest.fixture(params=STORE_BACKENDS)
def store_backend(request: pytest.FixtureRequest) -> str:
    """The state store backend under test: ``local`` (a directory) or ``s3`` (the local endpoint)."""
    return str(request.param)


@pytest.fixture
def store_url(store_backend: str, request: pytest.FixtureRequest, tmp_path: Path) -> str:
    """A fresh store location on the backend under test: a directory that does not exist yet, or a
    prefix in a new bucket of the local S3 endpoint (pass ``store_options`` with it)."""
    if store_backend == "local":
        return str(tmp_path / "store")
    endpoint = request.getfixturevalue("s3_endpoint")
    return f"s3://{s3_bucket(endpoint)}/state"


@pytest.fixture
def store_options(store_backend: str, request: pytest.FixtureRequest) -> dict[str, str] | None:
    """The options ``store_url`` needs: None locally, the endpoint and credentials on S3."""
    if store_backend == "local":
        return None
    return dict(request.getfixturevalue("s3_options"))


@pytest.fixture(scope="session")
def spark() -> Iterator[Any]:
    """One SparkSession (local[2], no UI, few shuffle partitions) for every test that asks for it: the
    tests under tests/spark and the demo's. pyspark is imported only when a test needs it."""
    from repart.spark.session import spark_session

    session = spark_session("local[2]", "repart-tests", shuffle_partitions=4)
    yield session
    session.stop()


STATE_STORE_SETTINGS = (
    "spark.sql.streaming.stateStore.providerClass",
    "spark.sql.streaming.stateStore.rocksdb.changelogCheckpointing.enabled",
    "spark.sql.shuffle.partitions",
)


@pytest.fixture
def spark_settings_restored(spark: Any) -> Iterator[Any]:
    """The session, its state store provider, changelog setting and shuffle partitions put back as they
    were after the test (a streaming test, ``ManagedQuery`` or the demo may change them)."""
    before = {key: spark.conf.get(key, None) for key in STATE_STORE_SETTINGS}
    yield spark
    for key, value in before.items():
        if value is None:
            spark.conf.unset(key)
        else:
            spark.conf.set(key, value)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """A test that uses the ``spark`` fixture is a Spark test: ``pytest -m 'not spark'`` leaves it out
    (``make test`` runs the rest on two workers beside the Spark tests' one process, one Spark at a
    time)."""
    for item in items:
        if "spark" in getattr(item, "fixturenames", ()):
            item.add_marker(pytest.mark.spark)
