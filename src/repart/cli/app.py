"""The ``repart`` application: one typer app, one module per command group."""

from __future__ import annotations

import typer

from repart.cli.simulate import simulate

app = typer.Typer(
    no_args_is_help=True,
    add_completion=False,
    help="repart: elastic repartitioning for stateful Spark pipelines.",
)
app.command()(simulate)


@app.callback()
def _root() -> None:
    """repart: elastic repartitioning for stateful Spark pipelines."""


def main() -> None:
    app()
