"""``repart snapshot ingest``: store snapshot documents that Spark jobs wrote (DESIGN §3, §8).

Each file holds one snapshot JSON document (``repart/storage/snapshot.schema.json``) and is ingested
in its own transaction: all of it or none of it. A rejected file does not stop the others; the
command reports every file and exits 2 if any was rejected.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text
from sqlalchemy import Engine

from repart.cli.database import DbOption, JsonOption, console, open_database, print_json
from repart.cli.errors import USAGE_ERROR, reports_bad_input
from repart.storage import ingest_snapshot, parse_snapshot, run_in_transaction

snapshot_app = typer.Typer(no_args_is_help=True, help="Ingest window snapshots.")


def ingest_file(engine: Engine, path: Path) -> dict[str, Any]:
    """Ingest one snapshot file; the outcome as ``{file, status, seq, region, error}``."""
    outcome: dict[str, Any] = {
        "file": str(path),
        "status": "rejected",
        "seq": None,
        "region": None,
        "error": None,
    }
    try:
        document = json.loads(path.read_text(encoding="utf-8"))
        if isinstance(document, dict):
            outcome["region"] = document.get("region")
        snapshot = parse_snapshot(document)
        outcome["seq"] = snapshot.seq
        run_in_transaction(engine, lambda session: ingest_snapshot(session, snapshot, source=str(path)))
    except (OSError, UnicodeDecodeError) as error:
        outcome["error"] = f"cannot read the file: {error}"
    except json.JSONDecodeError as error:
        outcome["error"] = f"not JSON: {error}"
    except ValueError as error:
        outcome["error"] = str(error)
    else:
        outcome["status"] = "ingested"
    return outcome


@snapshot_app.command("ingest")
@reports_bad_input
def ingest(
    files: Annotated[list[Path], typer.Argument(help="Snapshot JSON files, one document each.")],
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Ingest snapshot files, each all or nothing; exit code 2 if any was rejected."""
    with open_database(db) as engine:
        outcomes = [ingest_file(engine, path) for path in files]
    rejected = [o for o in outcomes if o["status"] == "rejected"]
    if as_json:
        print_json(outcomes)
    else:
        table = Table(title="snapshot ingest")
        for column in ("file", "status", "region", "seq", "error"):
            table.add_column(column)
        for o in outcomes:
            style = "red" if o["status"] == "rejected" else "green"
            table.add_row(
                Text(o["file"]),
                Text(o["status"], style=style),
                Text(str(o["region"] or "-")),
                "-" if o["seq"] is None else str(o["seq"]),
                Text(o["error"] or ""),
            )
        console().print(table)
    if rejected:
        Console(stderr=True).print(
            f"[bold red]error:[/] {len(rejected)} of {len(outcomes)} file(s) rejected; "
            f"the other {len(outcomes) - len(rejected)} were ingested",
            highlight=False,
        )
        raise typer.Exit(USAGE_ERROR)
