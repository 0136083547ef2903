"""Fixtures for the database commands: a fresh SQLite database that ``repart init`` created."""

from __future__ import annotations

from pathlib import Path

import pytest

from repart.cli.app import app
from tests.cli.helpers import runner


@pytest.fixture
def db_url(tmp_path: Path) -> str:
    """The URL of a fresh database that ``repart init`` created."""
    url = f"sqlite:///{tmp_path / 'state' / 'repart.db'}"
    result = runner.invoke(app, ["init", "--db", url])
    assert result.exit_code == 0, result.output
    return url
