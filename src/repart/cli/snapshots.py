"""``repart snapshot ingest``: store snapshot documents that Spark jobs wrote (DESIGN §3, §8).

Each file holds one snapshot JSON document (``repart/protocol/snapshot.schema.json``) and is ingested
in its own transaction: all of it or none of it. A rejected file does not stop the others; the
command reports every file and exits 2 if any was rejected. ``--spool DIR`` runs one pass over a
spool directory (``repart.controller.spool``): its files move to ``done/`` or ``rejected/``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from repart.cli.database import DbOption, JsonOption, console, open_database, print_json
from repart.cli.errors import reports_bad_input
from repart.controller.spool import IngestOutcome, ingest_file, ingest_spool
from repart.errors import InvalidInput

snapshot_app = typer.Typer(no_args_is_help=True, help="Ingest window snapshots.")


@snapshot_app.command("ingest")
@reports_bad_input
def ingest(
    files: Annotated[
        list[Path] | None, typer.Argument(help="Snapshot JSON files, one document each.", show_default=False)
    ] = None,
    spool: Annotated[
        Path | None,
        typer.Option(
            help="Also ingest the *.json files waiting in this spool directory, moving them to "
            "done/ or rejected/ (with a .reason file).",
            show_default=False,
        ),
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Ingest snapshot files, each all or nothing; exit code 2 if any was rejected."""
    if not files and spool is None:
        raise InvalidInput("FILES", "or --spool DIR must be given: nothing to ingest")
    outcomes: list[IngestOutcome] = []
    with open_database(db) as engine:
        outcomes.extend(ingest_file(engine, path) for path in files or [])
        if spool is not None:
            outcomes.extend(ingest_spool(engine, spool))
    rejected = [o for o in outcomes if o.status == "rejected"]
    if as_json:
        print_json([o.to_json() for o in outcomes])
    else:
        table = Table(title="snapshot ingest")
        for column in ("file", "status", "region", "seq", "error"):
            table.add_column(column)
        for o in outcomes:
            style = "red" if o.status == "rejected" else "green"
            table.add_row(
                Text(o.file),
                Text(o.status, style=style),
                Text(o.region or "-"),
                "-" if o.seq is None else str(o.seq),
                Text(o.error or ""),
            )
        console().print(table)
    if rejected:
        Console(stderr=True).print(
            f"[bold red]error:[/] {len(rejected)} of {len(outcomes)} file(s) rejected; "
            f"the other {len(outcomes) - len(rejected)} were ingested",
            highlight=False,
        )
        raise typer.Exit(InvalidInput.exit_code)
