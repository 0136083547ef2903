"""``repart snapshot ingest``: store snapshot documents that Spark jobs wrote.

Each file holds one snapshot JSON document (``repart/protocol/snapshot.schema.json``) and is ingested
in its own transaction: all of it or none of it. A rejected file does not stop the others; the
command reports every file and exits 2 if any was rejected. ``--spool DIR`` runs one pass over a
spool directory (``repart.controller.spool``): its files move to ``done/`` or ``rejected/``.

``repart snapshot list|delete``: a region's stored windows, and the removal of one ingested by
mistake (refused while a decision depends on it, unless ``--force``: ``repart.controller.service``).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.console import Console
from rich.table import Table
from rich.text import Text

from repart.cli.database import (
    DbOption,
    JsonOption,
    console,
    number,
    open_database,
    print_json,
    query,
    read_query,
    timestamp,
)
from repart.cli.errors import reports_bad_input
from repart.cli.snapshot_export import export
from repart.errors import InvalidInput
from repart.protocol.limits import MAX_SNAPSHOT_BYTES

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from repart.controller.spool import IngestOutcome
    from repart.storage import SnapshotSummary

snapshot_app = typer.Typer(no_args_is_help=True, help="Ingest, list, export and delete window snapshots.")
snapshot_app.command("export")(export)

RegionName = Annotated[str, typer.Argument(help="Region name.")]


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
    max_bytes: Annotated[
        int,
        typer.Option(
            help="Reject a file larger than this many bytes without reading it "
            f"(default: {MAX_SNAPSHOT_BYTES // 2**20} MiB).",
            show_default=False,
        ),
    ] = MAX_SNAPSHOT_BYTES,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Ingest snapshot files, each all or nothing; exit code 2 if any was rejected (a file larger than
    --max-bytes is rejected without being read)."""
    from repart.controller.spool import check_max_bytes, ingest_file, ingest_spool

    if not files and spool is None:
        raise InvalidInput("FILES", "or --spool DIR must be given: nothing to ingest")
    check_max_bytes(max_bytes)
    outcomes: list[IngestOutcome] = []
    with open_database(db) as engine:
        outcomes.extend(ingest_file(engine, path, max_bytes=max_bytes) for path in files or [])
        if spool is not None:
            outcomes.extend(ingest_spool(engine, spool, max_bytes=max_bytes))
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


def snapshot_dict(summary: SnapshotSummary) -> dict[str, Any]:
    """A stored window, without its items, as a JSON object."""
    return {
        "seq": summary.seq,
        "window_start": timestamp(summary.window_start),
        "window_end": timestamp(summary.window_end),
        "tuples": summary.tuples,
        "distinct_estimate": summary.distinct_estimate,
        "epsilon": summary.epsilon,
        "items": summary.items,
        "batch": summary.batch,
        "version": summary.version,
        "source": summary.source,
        "ingested_at": timestamp(summary.ingested_at),
    }


@snapshot_app.command("list")
@reports_bad_input
def list_(region: RegionName, db: DbOption = None, as_json: JsonOption = False) -> None:
    """List a region's snapshots by window seq (without their items)."""
    from repart.storage import snapshot_summaries

    rows = read_query(db, lambda s: [snapshot_dict(summary) for summary in snapshot_summaries(s, region)])
    if as_json:
        print_json(rows)
        return
    table = Table(title=f"snapshots of {region}")
    for column in (
        "seq",
        "window start",
        "window end",
        "tuples",
        "distinct",
        "ε",
        "items",
        "batch",
        "ingested",
    ):
        table.add_column(column)
    for r in rows:
        table.add_row(
            str(r["seq"]),
            r["window_start"],
            r["window_end"],
            str(r["tuples"]),
            str(r["distinct_estimate"]),
            number(r["epsilon"]),
            str(r["items"]),
            "-" if r["batch"] is None else str(r["batch"]),
            r["ingested_at"],
        )
    console().print(table)


@snapshot_app.command("delete")
@reports_bad_input
def delete(
    region: RegionName,
    seq: Annotated[
        int, typer.Option("--seq", help="The window seq to delete (see `repart snapshot list REGION`).")
    ],
    force: Annotated[
        bool, typer.Option("--force", help="Delete it even though a decision depends on it.")
    ] = False,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete a snapshot ingested by mistake, with its items, in one transaction.

    Refused (exit 3) while a decision depends on the window, unless --force: when the region's
    considered seq (the newest window a tick decided on) is at least SEQ, or an event lists SEQ among
    the windows it decided on (``window_seqs`` of activated, no-change, recommended, scaled and
    rollback events). A forced delete does not undo those decisions. Writes a ``snapshot-deleted``
    event with the seq and whether --force was given.
    """

    from repart.controller.service import delete_snapshot

    def work(session: Session) -> dict[str, Any]:
        deleted = delete_snapshot(session, region, seq, force=force)
        return {
            **snapshot_dict(deleted.snapshot),
            "forced": deleted.forced,
            "depended_on": list(deleted.depended_on),
            "event_id": deleted.event_id,
        }

    shown = query(db, work)
    if as_json:
        print_json(shown)
        return
    console().print(
        f"deleted snapshot seq {seq} of {region} ({shown['tuples']} tuples, {shown['items']} items)"
        + (f", forced although {'; '.join(shown['depended_on'])}" if shown["depended_on"] else "")
    )
