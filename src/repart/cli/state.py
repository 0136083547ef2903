"""``repart state verify``: check a job's state store against its generation (DESIGN §9, §12.4).

Reads every data file the current generation lists and compares its rows, checksum and slots with the
generation's entry (``StateStore.damaged_files``), after checking the manifest and the generation
document themselves. Exits 0 when the store is intact and 4 (``Corrupt``) when anything is damaged,
listing every damaged file; 2 when there is no store at the path.
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
