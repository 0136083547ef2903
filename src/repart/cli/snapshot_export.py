"""``repart snapshot export REGION``: a region's recorded windows as a JSON list of snapshot documents,
the input of ``repart replay``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

from repart.cli.database import DbOption, JsonOption, console, print_json, read_query
from repart.cli.errors import reports_bad_input
from repart.errors import InvalidInput

if TYPE_CHECKING:
    from sqlalchemy.orm import Session


@reports_bad_input
def export(
    region: Annotated[str, typer.Argument(help="Region name.")],
    out: Annotated[
        Path | None,
        typer.Option("--out", help="Write the windows to this file instead of stdout.", show_default=False),
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Write a region's recorded windows, oldest first, as a JSON list of snapshot documents (the input
    of `repart replay`); with --out, print what was written (--json: as JSON)."""
    documents = read_query(db, lambda session: region_documents(session, region))
    text = json.dumps(documents, ensure_ascii=False, allow_nan=False)
    if out is None:
        typer.echo(text)
        return
    try:
        out.write_text(text + "\n", encoding="utf-8")
    except OSError as problem:
        raise InvalidInput(
            "--out", f"must be a writable file, got {str(out)!r} ({problem.strerror})"
        ) from None
    shown = {"region": region, "windows": len(documents), "out": str(out)}
    if as_json:
        print_json(shown)
        return
    console().print(f"{region}: {len(documents)} window(s) written to {out}")


def region_documents(session: Session, region: str) -> list[dict[str, Any]]:
    """Every stored window of ``region`` as its snapshot document, oldest first."""
    from repart.storage import latest_snapshots, snapshot_summaries

    count = len(snapshot_summaries(session, region))
    if count == 0:
        return []
    return [snapshot.to_document() for snapshot in latest_snapshots(session, region, count)]
