"""The CLI stays responsive (issue #10): loading it loads no database layer or numpy, and every
command's ``--help`` works (a name moved into a function or under ``TYPE_CHECKING`` and used where
typer evaluates it would fail here)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import typer
from typer.main import get_command

from repart.cli.app import app
from tests.cli.helpers import runner


def test_loading_the_cli_loads_no_database_layer_numpy_or_spark() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, repart.cli.app; print('\\n'.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for heavy in (
        "sqlalchemy",
        "numpy",
        "alembic",
        "pyarrow",
        "pyspark",
        "matplotlib",
        "numba",
        "apscheduler",
    ):
        assert heavy not in loaded, f"importing repart.cli.app loads {heavy}"


def test_status_loads_no_numpy_or_pydantic(tmp_path: Path) -> None:
    """``repart status`` reads the database and prints a table: no numpy (the region model validates
    with ``repart.partitioning.domain``) and no pydantic (typer below 0.29 coerces without it)."""
    url = f"sqlite:///{tmp_path / 'repart.db'}"
    for words in (["init"], ["region", "create", "ticks", "--key-type", "str"]):
        assert runner.invoke(app, [*words, "--db", url]).exit_code == 0
    script = (
        "import sys\n"
        "from repart.cli.app import app\n"
        "try:\n"
        f"    app(['status', '--db', {url!r}])\n"
        "except SystemExit as stop:\n"
        "    assert not stop.code, stop.code\n"
        "print('modules:', ' '.join(sorted(sys.modules)))\n"
    )
    output = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    assert "ticks" in output
    loaded = output.split("modules:")[1].split()
    assert "sqlalchemy" in loaded  # it did read the database
    for heavy in ("numpy", "pydantic", "numba", "alembic"):
        assert heavy not in loaded, f"repart status loads {heavy}"


def command_paths(group: typer.Typer) -> list[list[str]]:
    """Every command of the CLI as the words that name it."""
    paths: list[list[str]] = []

    def walk(command: object, prefix: list[str]) -> None:
        subcommands = getattr(command, "commands", None)
        if not subcommands:
            paths.append(prefix)
            return
        for name, sub in subcommands.items():
            walk(sub, [*prefix, name])

    walk(get_command(group), [])
    return paths


def test_every_command_has_help() -> None:
    paths = command_paths(app)
    assert len(paths) >= 28 and ["events", "list"] in paths and ["resume"] in paths
    for path in paths:
        result = runner.invoke(app, [*path, "--help"])
        assert result.exit_code == 0, (path, result.output)
        assert "Usage" in result.output
