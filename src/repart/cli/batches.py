"""``repart batches list``: what a region's Spark batches reported back.

A job reports each batch once (``ControllerClient.report_batch``): a JSON payload of what it did
(rows, timings, checksums), tied to the plan it applied, if any.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from repart.cli.database import DbOption, JsonOption, console, print_json, read_query, timestamp
from repart.cli.errors import reports_bad_input

if TYPE_CHECKING:
    from repart.storage.models import BatchReport

batches_app = typer.Typer(no_args_is_help=True, help="List what a region's Spark batches reported.")

RegionName = Annotated[str, typer.Argument(help="Region name.")]
# Characters of a payload shown in a table cell (--json prints it whole).
SHOWN_PAYLOAD = 100


def batch_dict(row: BatchReport) -> dict[str, Any]:
    """A batch report as a JSON object, its payload parsed."""
    from repart.storage.jsontext import load_object

    return {
        "id": row.id,
        "batch": row.batch,
        "plan_id": row.plan_id,
        "reported_at": timestamp(row.reported_at),
        "payload": load_object(row.payload_json),
    }


@batches_app.command("list")
@reports_bad_input
def list_(region: RegionName, db: DbOption = None, as_json: JsonOption = False) -> None:
    """List a region's batch reports by batch id."""
    from repart.storage import batch_reports

    rows = read_query(db, lambda s: [batch_dict(r) for r in batch_reports(s, region)])
    if as_json:
        print_json(rows)
        return
    table = Table(title=f"batches of {region}")
    for column in ("batch", "plan", "reported", "payload"):
        table.add_column(column)
    for r in rows:
        payload = json.dumps(r["payload"], separators=(",", ":"), ensure_ascii=False)
        if len(payload) > SHOWN_PAYLOAD:
            payload = payload[: SHOWN_PAYLOAD - 1] + "…"
        table.add_row(str(r["batch"]), str(r["plan_id"] or "-"), r["reported_at"], Text(payload))
    console().print(table)
