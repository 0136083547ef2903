"""The ``repart`` application: one typer app, one module per command group.

The app names each command and where it lives; a command's module is imported, and its command built,
only when the command runs or help lists it (``lazy_group``), so that ``repart status`` does not load
the other commands' modules.
"""

from __future__ import annotations

from typing import Annotated

import typer

import repart
from repart.cli.lazy_group import lazy_group

# Each command, in the order help lists them: its name and its function or Typer ("module:attribute").
COMMANDS = {
    "demo": "repart.cli.demo:demo",
    "simulate": "repart.cli.simulate:simulate",
    "simulate-grouping": "repart.cli.simulate_grouping:simulate_grouping",
    "replay": "repart.cli.replay:replay",
    "init": "repart.cli.init:init",
    "db": "repart.cli.schema:db_app",
    "status": "repart.cli.status:status",
    "tick": "repart.cli.tick:tick",
    "run": "repart.cli.run:run",
    "serve": "repart.cli.serve:serve",
    "rollback": "repart.cli.actions:rollback",
    "scale": "repart.cli.actions:scale",
    "resume": "repart.cli.actions:resume",
    "explain": "repart.cli.actions:explain",
    "region": "repart.cli.regions:region_app",
    "snapshot": "repart.cli.snapshots:snapshot_app",
    "versions": "repart.cli.versions:versions_app",
    "plans": "repart.cli.plans:plans_app",
    "state": "repart.cli.state:state_app",
    "events": "repart.cli.events:events_app",
    "batches": "repart.cli.batches:batches_app",
    "token": "repart.cli.tokens:token_app",
}

app = typer.Typer(
    cls=lazy_group(COMMANDS),
    no_args_is_help=True,
    add_completion=True,
    help="repart: elastic repartitioning for stateful Spark pipelines.",
)


def _print_version(requested: bool) -> None:
    """Print repart's version (``repart.__version__``, which the package metadata is built from) and
    exit (``--version``)."""
    if requested:
        typer.echo(f"repart {repart.__version__}")
        raise typer.Exit()


@app.callback()
def _root(
    _version: Annotated[
        bool,
        typer.Option(
            "--version", help="Print repart's version and exit.", callback=_print_version, is_eager=True
        ),
    ] = False,
) -> None:
    """repart: elastic repartitioning for stateful Spark pipelines."""


def main() -> None:
    app()
