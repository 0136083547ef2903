"""``repart state verify|compact|vacuum|upgrade``: a job's state store, at a path or a URL.

``--state`` is a directory or an object store URL (``file://``, ``s3://``, ``gs://``, ``az://``), with
credentials from the usual environment variables (``AWS_ACCESS_KEY_ID``, ...).

- ``verify`` reads every data file the newest generation lists and compares its rows, checksum and
  slots with its entry (``StateStore.damaged_files``), after reading the commit log. Exits 0 when the
  store is intact and 4 (``Corrupt``) when anything is damaged, listing every damaged file.
- ``compact`` folds deltas into base files and rewrites the channels that filters or migrations left
  scattered, for the channels that are due (``StateStore.compact``), as one more generation. Exits 0
  whether or not a channel was due, 3 (``Conflict``) when another writer's commit removed a file it
  replaces.
- ``vacuum`` deletes the objects that neither the newest generation nor any generation committed
  within ``--retain`` lists, once they are older than that (``StateStore.vacuum``).
- ``upgrade`` converts a store of format 1 or 2 to format 3 by one verified commit that copies no data.

Every command exits 2 for an option out of range or no store, 4 for damaged state, 5 when an object
store does not answer.
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import Annotated, Any

import typer
from rich.markup import escape

from repart.cli.config import state_option
from repart.cli.database import JsonOption, console, print_json
from repart.cli.errors import reports_bad_input
from repart.errors import Corrupt, InvalidInput

state_app = typer.Typer(no_args_is_help=True, help="Inspect and maintain a job's keyed state store.")

StateOption = Annotated[
    str | None,
    typer.Option(
        "--state",
        help="The state store: a directory, or a file://, s3://, gs:// or az:// URL "
        "(default: state in repart.toml or the file $REPART_CONFIG names).",
        show_default=False,
    ),
]
_DURATION = re.compile(r"([0-9]+(?:\.[0-9]+)?)(s|m|h|d)")
_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


@state_app.command()
@reports_bad_input
def verify(state: StateOption = None, as_json: JsonOption = False) -> None:
    """Check every file of the store's newest generation (rows, checksum); exit 4 on damage."""
    state = state_option(state)
    from repart.state.store import StateStore

    try:
        store = StateStore.open(state)
    except Corrupt as unreadable:
        _report({"state": state, "ok": False, "damaged": [_damage(unreadable)]}, as_json)
        raise typer.Exit(Corrupt.exit_code) from None
    damaged = store.damaged_files()
    summary = {
        "state": state,
        "ok": not damaged,
        "format": store.format,
        "region": store.region,
        "generation": store.generation,
        "version": store.version,
        "n_channels": store.n_channels,
        "files": len(store.all_files()),
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
    state: StateOption = None,
    max_filtered_share: Annotated[
        float,
        typer.Option(
            help="Compact a channel whose slot filters hide more than this share of its rows, in [0, 1)."
        ),
    ] = 0.1,
    max_files_per_group: Annotated[
        float,
        typer.Option(
            help="Compact a channel holding more than this many base files per slot group, in [1, 1024]."
        ),
    ] = 1.5,
    max_delta_share: Annotated[
        float,
        typer.Option(
            help="Compact a channel whose deltas hold more than this share of its base rows, in [0, 1000]."
        ),
    ] = 1.0,
    max_delta_files: Annotated[
        int, typer.Option(help="Compact a channel holding more than this many deltas, in [1, 100000].")
    ] = 32,
    as_json: JsonOption = False,
) -> None:
    """Fold deltas and rewrite scattered files of the channels that are due, as one more generation."""
    state = state_option(state)
    from repart.state.compact import CompactionPolicy
    from repart.state.store import StateStore

    policy = CompactionPolicy(max_filtered_share, max_files_per_group, max_delta_share, max_delta_files)
    result = StateStore.open(state).compact(policy)
    summary = {
        "state": state,
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
        console().print(f"state store at {escape(state)}: no channel is due for compaction")
        return
    console().print(
        f"state store at {escape(state)}: compacted {len(result.channels)} channels into generation "
        f"{result.generation}: {result.files_before} -> {result.files_after} files, "
        f"{result.dropped_rows} rows dropped (filtered, or folded from deltas)"
    )


@state_app.command()
@reports_bad_input
def vacuum(
    state: StateOption = None,
    retain: Annotated[
        str,
        typer.Option(
            help="Keep whatever a generation committed this recently lists, and every object younger: "
            "a duration such as 90s, 30m, 2h or 7d, from 0s to 3650d."
        ),
    ] = "1h",
    as_json: JsonOption = False,
) -> None:
    """Delete the objects no recent generation lists, once older than --retain."""
    state = state_option(state)
    from repart.state.store import StateStore

    result = StateStore.open(state).vacuum(parse_duration(retain, "retain"))
    summary = {
        "state": state,
        "deleted": list(result.deleted),
        "kept_objects": result.kept_objects,
        "retain_seconds": result.retention_seconds,
    }
    if as_json:
        print_json(summary)
        return
    console().print(
        f"state store at {escape(state)}: deleted {len(result.deleted)} objects, kept {result.kept_objects}"
    )


@state_app.command()
@reports_bad_input
def upgrade(state: StateOption = None, as_json: JsonOption = False) -> None:
    """Convert a store of format 1 or 2 to format 3 (one verified commit; no data is copied)."""
    state = state_option(state)
    from repart.state.store import StateStore

    store = StateStore.open(state)
    upgraded = store.upgrade()
    summary = {"state": state, "upgraded": upgraded, "format": store.format, "generation": store.generation}
    if as_json:
        print_json(summary)
        return
    told = "upgraded to format 3" if upgraded else "is format 3 already"
    console().print(f"state store at {escape(state)} {told} (generation {store.generation})")


def parse_duration(text: str, field: str) -> timedelta:
    """``90s``, ``30m``, ``2h`` or ``7d`` as a timedelta in [0 s, 3650 d]; InvalidInput ``field`` else."""
    match = _DURATION.fullmatch(text.strip())
    seconds = float(match.group(1)) * _UNITS[match.group(2)] if match else -1.0
    if not 0 <= seconds <= 3650 * 86400:
        raise InvalidInput(
            field, f"must be a duration from 0s to 3650d such as 90s, 30m, 2h or 7d, got {text!r}"
        )
    return timedelta(seconds=seconds)


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
        out.print(f"state store at {escape(str(summary['state']))}: its commit log or manifest is damaged")
        return
    state = "OK" if summary["ok"] else f"{len(summary['damaged'])} of {summary['files']} files damaged"
    out.print(
        f"state store at {escape(summary['state'])}: format {summary['format']}, region {summary['region']}, "
        f"generation {summary['generation']}, version {summary['version']}, N={summary['n_channels']}, "
        f"{summary['files']} files, {summary['rows']} rows, checksum {summary['checksum']}: {state}"
    )
