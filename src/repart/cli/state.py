"""``repart state verify`` and ``repart state compact``: a job's state store (DESIGN §9, §12.4).

Reads every data file the current generation lists and compares its rows, checksum and slots with the
generation's entry (``StateStore.damaged_files``), after checking the manifest and the generation
document themselves. Exits 0 when the store is intact and 4 (``Corrupt``) when anything is damaged,
listing every damaged file; 2 when there is no store at the path.

``compact`` rewrites the files of the channels that are due (``StateStore.compact``: their slot
filters hide too many rows, or migrations left too many files per slot group) as one more
generation. Exits 0 whether or not a channel was due, 3 (``Conflict``) when another process is
writing the store, 4 when a file it reads is damaged, 2 for a threshold out of range or no store.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.markup import escape

from repart.cli.database import JsonOption, console, print_json
from repart.cli.errors import reports_bad_input
from repart.errors import Corrupt

state_app = typer.Typer(no_args_is_help=True, help="Inspect a job's keyed state store.")


@state_app.command()
@reports_bad_input
def verify(
    state: Annotated[Path, typer.Option("--state", help="The state store's directory.")],
    as_json: JsonOption = False,
) -> None:
    """Check every file of the store's current generation (rows, checksum); exit 4 on damage."""
    from repart.state.store import StateStore

    try:
        store = StateStore.open(state)
    except Corrupt as unreadable:
        _report({"state": str(state), "ok": False, "damaged": [_damage(unreadable)]}, as_json)
        raise typer.Exit(Corrupt.exit_code) from None
    damaged = store.damaged_files()
    summary = {
        "state": str(state),
        "ok": not damaged,
        "region": store.region,
        "generation": store.generation,
        "version": store.version,
        "n_channels": store.n_channels,
        "files": sum(len(store.files(channel)) for channel in range(store.n_channels)),
        "rows": store.rows(),
        "checksum": f"{store.checksum():016x}",
        "last_batch": None if store.last_batch is None else store.last_batch.batch_id,
        "damaged": [_damage(error) for error in damaged],
    }
    _report(summary, as_json)
    if damaged:
        raise typer.Exit(Corrupt.exit_code)


@state_app.command()
@reports_bad_input
def compact(
    state: Annotated[Path, typer.Option("--state", help="The state store's directory.")],
    max_filtered_share: Annotated[
        float,
        typer.Option(
            help="Compact a channel whose slot filters hide more than this share of its rows, in [0, 1)."
        ),
    ] = 0.1,
    max_files_per_group: Annotated[
        float,
        typer.Option(
            help="Compact a channel holding more than this many files per slot group, in [1, 1024]."
        ),
    ] = 1.5,
    as_json: JsonOption = False,
) -> None:
    """Rewrite the files of the channels that are due, as one more generation (exit 3 while another
    process writes the store)."""
    from repart.state.store import StateStore

    result = StateStore.open(state).compact(
        max_filtered_share=max_filtered_share, max_files_per_group=max_files_per_group
    )
    summary = {
        "state": str(state),
        "compacted": result.compacted,
        "channels": list(result.channels),
        "generation": result.generation,
        "files_before": result.files_before,
        "files_after": result.files_after,
        "replaced_files": result.replaced_files,
        "written_files": result.written_files,
        "dropped_rows": result.dropped_rows,
        "seconds": round(result.seconds, 3),
    }
    if as_json:
        print_json(summary)
        return
    if not result.compacted:
        console().print(f"state store at {escape(str(state))}: no channel is due for compaction")
        return
    console().print(
        f"state store at {escape(str(state))}: compacted {len(result.channels)} channels into generation "
        f"{result.generation}: {result.files_before} -> {result.files_after} files, "
        f"{result.dropped_rows} filtered rows dropped"
    )


def _damage(error: Corrupt) -> dict[str, str | None]:
    message = str(error)
    if error.path is not None and message.startswith(f"{error.path}: "):
        message = message[len(error.path) + 2 :]
    return {"path": error.path, "problem": message}


def _report(summary: dict[str, Any], as_json: bool) -> None:
    if as_json:
        print_json(summary)
        return
    out = console()
    for damage in summary["damaged"]:
        out.print(f"[bold red]damaged:[/] {escape(str(damage['path']))}: {escape(str(damage['problem']))}")
    if "generation" not in summary:
        out.print(
            f"state store at {escape(str(summary['state']))}: the manifest or generation document is damaged"
        )
        return
    state = "OK" if summary["ok"] else f"{len(summary['damaged'])} of {summary['files']} files damaged"
    out.print(
        f"state store at {summary['state']}: region {summary['region']}, generation {summary['generation']}, "
        f"version {summary['version']}, N={summary['n_channels']}, {summary['files']} files, "
        f"{summary['rows']} rows, checksum {summary['checksum']}: {state}"
    )
