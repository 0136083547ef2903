"""Running the CLI in tests: ``repart ARGS --db DB_URL`` and its ``--json`` output."""

from __future__ import annotations

import json
from typing import Any

from typer.testing import CliRunner, Result

from repart.cli.app import app

runner = CliRunner()


def repart(db_url: str, *args: str) -> Result:
    """Run ``repart ARGS --db DB_URL``."""
    return runner.invoke(app, [*args, "--db", db_url])


def repart_json(db_url: str, *args: str) -> Any:
    """Run ``repart ARGS --db DB_URL --json``, check it succeeded, and parse its stdout."""
    result = repart(db_url, *args, "--json")
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)
