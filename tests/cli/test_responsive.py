"""The CLI stays responsive (issue #10): loading it loads no database layer, numpy or rich, a command
loads its own module and no other command's, and every command's ``--help`` works (a name moved into a
function or under ``TYPE_CHECKING`` and used where typer evaluates it would fail here)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import typer
from typer.main import get_command

from repart.cli.app import COMMANDS, app
from tests.cli.helpers import runner


def test_loading_the_cli_loads_no_database_layer_numpy_rich_or_spark() -> None:
    loaded = subprocess.run(
        [sys.executable, "-c", "import sys, repart.cli.app; print('\\n'.join(sorted(sys.modules)))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout.split()
    for heavy in (
        "sqlalchemy",
        "rich",
        "numpy",
        "alembic",
        "pyarrow",
        "pyspark",
        "matplotlib",
        "numba",
        "apscheduler",
    ):
        assert heavy not in loaded, f"importing repart.cli.app loads {heavy}"


def modules_loaded_by(words: list[str], url: str) -> tuple[str, list[str]]:
    """What ``repart WORDS --db URL`` prints, and the modules loaded when it is done, run in a process
    of its own (a test process has loaded everything)."""
    script = (
        "import sys\n"
        "from repart.cli.app import app\n"
        "try:\n"
        f"    app([*{words!r}, '--db', {url!r}])\n"
        "except SystemExit as stop:\n"
        "    assert not stop.code, stop.code\n"
        "print('modules:', ' '.join(sorted(sys.modules)))\n"
    )
    output = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True).stdout
    printed, modules = output.split("modules:")
    return printed, modules.split()


def status_database(tmp_path: Path) -> str:
    """A database with one region, ``ticks``."""
    url = f"sqlite:///{tmp_path / 'repart.db'}"
    for words in (["init"], ["region", "create", "ticks", "--key-type", "str"]):
        assert runner.invoke(app, [*words, "--db", url]).exit_code == 0
    return url


def test_status_loads_no_numpy_or_pydantic(tmp_path: Path) -> None:
    """``repart status`` reads the database and prints a table: no numpy (the region model validates
    with ``repart.partitioning.domain``) and no pydantic (typer below 0.29 coerces without it)."""
    printed, loaded = modules_loaded_by(["status"], status_database(tmp_path))
    assert "ticks" in printed
    assert "sqlalchemy" in loaded  # it did read the database
    for heavy in ("numpy", "pydantic", "numba", "alembic"):
        assert heavy not in loaded, f"repart status loads {heavy}"


def test_status_loads_no_orm(tmp_path: Path) -> None:
    """``repart status`` reads the Core tables on a connection (``repart.storage.overview``), so it
    loads neither SQLAlchemy's ORM nor the mapped classes, over a quarter of its start (issue #10)."""
    url = status_database(tmp_path)
    for words in (["status"], ["status", "--json"], ["status", "ticks"]):
        printed, loaded = modules_loaded_by(words, url)
        assert "ticks" in printed and "repart.storage.tables" in loaded, words
        for heavy in ("sqlalchemy.orm", "repart.storage.models"):
            assert heavy not in loaded, f"repart {' '.join(words)} loads {heavy}"


def test_status_loads_no_other_command_and_its_json_no_rich(tmp_path: Path) -> None:
    """The app builds only the command that runs (``lazy_group``): ``repart status`` imports
    ``repart.cli.status`` and what every command shares, not the modules of the other commands (nor
    what they import, such as rich's progress bars); with ``--json`` it prints no table and loads no rich."""
    url = status_database(tmp_path)
    printed, loaded = modules_loaded_by(["status"], url)
    assert "ticks" in printed and "rich.table" in loaded
    shared = {"repart.cli", "repart.cli.app", "repart.cli.lazy_group"}  # and what every command imports:
    shared |= {"repart.cli.database", "repart.cli.errors", "repart.cli.config"}
    assert {m for m in loaded if m.startswith("repart.cli")} == {*shared, "repart.cli.status"}
    printed, loaded = modules_loaded_by(["status", "--json"], url)
    assert '"region": "ticks"' in printed
    assert not [m for m in loaded if m == "rich" or m.startswith("rich.")]


def test_the_app_lists_and_suggests_its_commands_without_building_them_first() -> None:
    """Help lists the commands in ``COMMANDS`` order, each with its help; a mistyped command is
    answered with the names it is close to, as typer answers for commands it built up front."""
    listing = runner.invoke(app, ["--help"], terminal_width=200)
    assert listing.exit_code == 0
    rows = re.findall(r"^│ (\w\S*) {2,}", listing.output, flags=re.MULTILINE)  # not "--version"
    assert rows == list(COMMANDS)
    assert "Show each region's mode" in listing.output  # status's help, read from its function
    typo = runner.invoke(app, ["statu"])
    assert typo.exit_code == 2
    assert "No such command 'statu'. Did you mean 'status', 'state'?" in typo.output


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
