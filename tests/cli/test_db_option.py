"""``--db`` mistakes and a busy database, from the command line (issue #9, DESIGN §12.4).

Every mistake in ``--db`` is one message on stderr naming ``--db`` with exit code 2, never a traceback (the
console wraps a long message at its width); on
SQLite a read (``repart status``) works while another process holds the write lock, and a write that
cannot get the lock in time is one line with the Conflict exit code 3.
"""

from __future__ import annotations

import functools
import os
import socket
import sqlite3
from pathlib import Path

import pytest

from repart.storage import make_engine
from tests.cli.helpers import one_error, repart


def one_line_naming_db(output: str) -> bool:
    return one_error(output).startswith("error: --db ")


def closed_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])  # closed again when the block ends: nothing listens there


@pytest.mark.parametrize("command", [["status"], ["tick"]])
def test_db_mistakes_are_one_line_naming_db_with_exit_code_2(tmp_path: Path, command: list[str]) -> None:
    text_file = tmp_path / "notes.txt"
    text_file.write_text("not a database\n")
    directory = tmp_path / "a-directory"
    directory.mkdir()
    mistakes = {
        "a plain path": str(tmp_path / "repart.db"),
        "a text file": f"sqlite:///{text_file}",
        "a directory": f"sqlite:///{directory}",
        "a missing file": f"sqlite:///{tmp_path / 'missing.db'}",
        "an unreachable server": f"postgresql+psycopg://repart@127.0.0.1:{closed_port()}/repart",
        "an unknown dialect": "nosuchdb://somewhere/db",
    }
    for mistake, url in mistakes.items():
        result = repart(url, *command)
        assert result.exit_code == 2, (mistake, result.output)
        assert one_line_naming_db(result.output), (mistake, result.output)
    assert "must be a database URL" in repart(mistakes["a plain path"], *command).output
    assert "not an SQLite database" in repart(mistakes["a text file"], *command).output
    assert "cannot connect" in repart(mistakes["an unreachable server"], *command).output


def test_a_read_only_database_reads_and_refuses_writes_in_one_line(db_url: str, tmp_path: Path) -> None:
    assert repart(db_url, "region", "create", "trades", "--key-type", "str", "--channels", "2").exit_code == 0
    path = db_url.removeprefix("sqlite:///")
    read_only = f"sqlite:///file:{path}?mode=ro&uri=true"  # read-only for root too, unlike chmod
    assert repart(read_only, "status").exit_code == 0
    result = repart(read_only, "tick")
    assert result.exit_code == 2, result.output
    assert one_line_naming_db(result.output) and "read-only" in result.output


@pytest.mark.skipif(os.geteuid() == 0, reason="root writes to a file without write permission")
def test_a_file_without_write_permission_is_one_line(db_url: str) -> None:
    assert repart(db_url, "region", "create", "trades", "--key-type", "str", "--channels", "2").exit_code == 0
    path = Path(db_url.removeprefix("sqlite:///"))
    path.chmod(0o444)
    try:
        result = repart(db_url, "tick")
        assert result.exit_code == 2 and one_line_naming_db(result.output), result.output
    finally:
        path.chmod(0o644)


def test_status_reads_while_another_process_holds_the_write_lock_and_a_write_is_a_conflict(
    db_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    assert repart(db_url, "region", "create", "trades", "--key-type", "str", "--channels", "2").exit_code == 0
    holder = sqlite3.connect(db_url.removeprefix("sqlite:///"), isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")
    try:
        status = repart(db_url, "status", "--json")
        assert status.exit_code == 0, status.output
        assert '"region": "trades"' in status.stdout
        # The write waits 0.05 s per attempt instead of the default 5 s, so the test is quick.
        monkeypatch.setattr(
            "repart.storage.engine.make_engine", functools.partial(make_engine, busy_timeout=0.05)
        )
        tick = repart(db_url, "tick")
        assert tick.exit_code == 3, tick.output
        assert "database is locked" in one_error(tick.output)
    finally:
        holder.rollback()
        holder.close()
    assert repart(db_url, "tick").exit_code == 0


UNSUPPORTED_URLS = [
    "mysql://repart@localhost/repart",
    "postgresql+asyncpg://repart@localhost/repart",
    "postgresql+psycopg2://repart@localhost/repart",
    "oracle://repart@localhost/repart",
    "mssql+pyodbc://localhost/repart",
    "sqlite+aiosqlite:///repart.db",
]


@pytest.mark.parametrize("url", UNSUPPORTED_URLS)
@pytest.mark.parametrize("command", [["status"], ["init"], ["run", "--once"]])
def test_an_unsupported_dialect_is_one_line_naming_the_accepted_ones(url: str, command: list[str]) -> None:
    result = repart(url, *command)
    assert result.exit_code == 2, result.output
    message = one_error(result.output)
    assert message.startswith("error: --db must name a supported database"), message
    assert "sqlite" in message and "postgresql+psycopg" in message and url in message
