"""Running the CLI in tests: ``repart ARGS --db DB_URL`` and its ``--json`` output."""

from __future__ import annotations

import json
import re
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


def table_rows(output: str) -> list[list[str]]:
    """The rows of the rich tables in ``output``, header rows included, each as its stripped cells."""
    return [
        [cell.strip() for cell in re.split("[│┃]", line)[1:-1]]
        for line in output.splitlines()
        if "│" in line or "┃" in line
    ]


def table_row(output: str, first: str, columns: tuple[str, ...]) -> dict[str, str]:
    """The row whose first cell is ``first``, of the table of ``output`` whose header holds ``columns``,
    as column name -> cell."""
    header: list[str] | None = None
    for row in table_rows(output):
        if all(column in row for column in columns):
            header = row
        elif header is not None and len(row) == len(header) and row[0] == first:
            return dict(zip(header, row, strict=True))
    raise AssertionError(f"no row {first!r} under a header with {columns} in:\n{output}")


def flat(output: str) -> str:
    """``output`` with every run of whitespace one space (the console wraps long lines)."""
    return " ".join(output.split())
