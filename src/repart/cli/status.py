"""``repart status``: per region, its mode, the applied version, N, the open plan, the last event and
its backoff after failed ticks."""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated, Any

import typer

from repart.cli.database import DbOption, JsonOption, console, print_json, read_rows
from repart.cli.errors import reports_bad_input
from repart.storage.views import region_status

if TYPE_CHECKING:
    from sqlalchemy import Connection


@reports_bad_input
def status(
    region: Annotated[str | None, typer.Argument(help="Only this region (default: all).")] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Show each region's mode (and why), applied version, N, pending plan, last event and backoff
    (failed ticks in a row and when the daemon ticks the region again; `repart resume REGION` ends it)."""

    from repart.storage.overview import region_overviews

    def work(connection: Connection) -> list[dict[str, Any]]:
        return [region_status(overview) for overview in region_overviews(connection, region)]

    rows = read_rows(db, work)
    if as_json:
        print_json(rows)
    else:
        print_table(rows)


def print_table(rows: list[dict[str, Any]]) -> None:
    """The regions' status as a table on stdout (rich is imported here: ``--json`` does not load it)."""
    from rich.table import Table
    from rich.text import Text

    table = Table(title="status")
    for column in ("region", "mode", "applied version", "N", "pending plan", "last event", "backoff"):
        table.add_column(column)
    for r in rows:
        plan, event = r["pending_plan"], r["last_event"]
        table.add_row(
            r["region"],
            Text(r["mode"] if r["mode_reason"] is None else f"{r['mode']} ({r['mode_reason']})"),
            "-" if r["applied_version"] is None else str(r["applied_version"]),
            str(r["N"]),
            "-"
            if plan is None
            else f"{plan['id']} ({plan['from_version']} → {plan['to_version']}, {plan['status']})",
            Text(
                "-" if event is None else f"{event['at']} {event['kind']}/{event['rule']}: {event['message']}"
            ),
            Text(_backoff(r["backoff"])),
        )
    console().print(table)


def _backoff(backoff: dict[str, Any] | None) -> str:
    """A region's backoff in a table cell: its failed ticks, its next try and its last error."""
    if backoff is None:
        return "-"
    return f"{backoff['tick_failures']} failed, next at {backoff['retry_at']}: {backoff['last_error']}"
