"""``repart tick``: one controller iteration per region, for cron users."""

from __future__ import annotations

from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table

from repart.cli.database import DbOption, JsonOption, console, open_database, print_json
from repart.cli.errors import reports_bad_input

if TYPE_CHECKING:
    from repart.controller.tick import TickResult


@reports_bad_input
def tick(
    region: Annotated[
        str | None, typer.Option("--region", help="Tick this region only (default: every region).")
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Run measure → analyze → plan → activate once for each region (or one) and show what it did."""
    from repart.controller.tick import tick as tick_region
    from repart.storage import list_regions, read_transaction, region_by_name

    with open_database(db) as engine:
        if region is None:
            names = read_transaction(engine, lambda session: [r.name for r in list_regions(session)])
        else:
            read_transaction(engine, lambda session: region_by_name(session, region))
            names = [region]
        results = [tick_region(engine, name) for name in names]
    if as_json:
        print_json([asdict(result) for result in results])
        return
    console().print(results_table(results))


def results_table(results: list[TickResult]) -> Table:
    table = Table(title="tick")
    for column in ("region", "action", "N", "version", "plan", "build s", "storage s", "reason"):
        table.add_column(column, justify="left" if column in ("region", "action", "reason") else "right")
    for result in results:
        table.add_row(
            result.region,
            result.action,
            str(result.n_channels),
            "-" if result.version is None else str(result.version),
            "-" if result.plan_id is None else str(result.plan_id),
            f"{result.build_seconds:.3f}",
            f"{result.storage_seconds:.3f}",
            result.reason,
        )
    return table
