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


def one_error(output: str) -> str:
    """The one error message of ``output`` (the console wraps it at its width), or AssertionError."""
    assert "Traceback" not in output, output
    message = " ".join(output.split())
    assert message.startswith("error: ") and message.count("error:") == 1, output
    return message
