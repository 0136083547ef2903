"""``repart events list``: a region's audit log, what was decided, by which rule and why.

Every decision of the controller and every operator action writes an event (kinds:
``repart.storage.EVENT_KINDS``); this command reads them back oldest first, optionally of one kind
and from a time on.
"""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Annotated

import typer
from rich.table import Table
from rich.text import Text

from repart.cli.database import DbOption, JsonOption, console, print_json, read_query
from repart.cli.errors import reports_bad_input
from repart.errors import InvalidInput
from repart.storage.event_kinds import EVENT_KINDS
from repart.storage.views import event_dict

if TYPE_CHECKING:
    pass

events_app = typer.Typer(no_args_is_help=True, help="Read a region's audit log.")


def aware_timestamp(field: str, text: str) -> datetime:
    """``text`` as an ISO-8601 timestamp with a UTC offset; InvalidInput naming ``field`` otherwise."""
    try:
        parsed = datetime.fromisoformat(text)
    except ValueError:
        parsed = None
    if parsed is None or parsed.utcoffset() is None:
        raise InvalidInput(
            field,
            f"must be an ISO-8601 timestamp with a UTC offset, such as 2026-01-01T00:00:00+00:00 or "
            f"2026-01-01T00:00Z, got {text!r}",
        )
    return parsed


@events_app.command("list")
@reports_bad_input
def list_(
    region: Annotated[
        str | None,
        typer.Argument(
            help="Region name; without it, the events of no region: region-deleted and those of "
            "deleted regions.",
            show_default=False,
        ),
    ] = None,
    kind: Annotated[
        str | None,
        typer.Option(
            "--kind", help=f"Only events of this kind: {', '.join(EVENT_KINDS)}.", show_default=False
        ),
    ] = None,
    since: Annotated[
        str | None,
        typer.Option(
            "--since",
            help="Only events at or after this ISO-8601 time with a UTC offset (2026-01-01T00:00Z).",
            show_default=False,
        ),
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """List a region's events, oldest first (newest last); without REGION, the events that belong to no
    existing region (the controller's region-deleted events and the events of deleted regions)."""
    from repart.storage import region_events

    start = None if since is None else aware_timestamp("since", since)
    rows = read_query(db, lambda s: [event_dict(e) for e in region_events(s, region, kind=kind, since=start)])
    if as_json:
        print_json(rows)
        return
    table = Table(title="events of no region" if region is None else f"events of {region}")
    for column in ("id", "at", "kind", "rule", "message"):
        table.add_column(column)
    for e in rows:
        table.add_row(str(e["id"]), e["created_at"], e["kind"], Text(e["rule"]), Text(e["message"]))
    console().print(table)
