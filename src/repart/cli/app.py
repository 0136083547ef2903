"""The ``repart`` application: one typer app, one module per command group."""

from __future__ import annotations

from typing import Annotated

import typer

from repart.cli.actions import explain, resume, rollback, scale
from repart.cli.batches import batches_app
from repart.cli.demo import demo
from repart.cli.events import events_app
from repart.cli.init import init
from repart.cli.plans import plans_app
from repart.cli.regions import region_app
from repart.cli.run import run
from repart.cli.simulate import simulate
from repart.cli.simulate_grouping import simulate_grouping
from repart.cli.snapshots import snapshot_app
from repart.cli.state import state_app
from repart.cli.status import status
from repart.cli.tick import tick
from repart.cli.versions import versions_app

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="repart: elastic repartitioning for stateful Spark pipelines.",
)
app.command()(demo)
app.command()(simulate)
app.command("simulate-grouping")(simulate_grouping)
app.command()(init)
app.command()(status)
app.command()(tick)
app.command()(run)
app.command()(rollback)
app.command()(scale)
app.command()(resume)
app.command()(explain)
app.add_typer(region_app, name="region")
app.add_typer(snapshot_app, name="snapshot")
app.add_typer(versions_app, name="versions")
app.add_typer(plans_app, name="plans")
app.add_typer(state_app, name="state")
app.add_typer(events_app, name="events")
app.add_typer(batches_app, name="batches")


def _print_version(requested: bool) -> None:
    """Print the installed package's version and exit (``--version``)."""
    if requested:
        from importlib.metadata import version  # only when asked: keeps every other command's start fast

        typer.echo(f"repart {version('repart')}")
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
