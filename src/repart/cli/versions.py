"""``repart versions list|show|diff``: a region's stored partition functions (DESIGN §2, §6, §7)."""

from __future__ import annotations

import json
from typing import Annotated, Any

import typer
from rich.table import Table
from rich.text import Text
from sqlalchemy.orm import Session

from repart.cli.database import (
    DbOption,
    JsonOption,
    console,
    number,
    print_json,
    read_query,
    timestamp,
)
from repart.cli.errors import reports_bad_input
from repart.migration import MigrationPlan, plan_migration
from repart.partitioning import PartitionFunction
from repart.storage import get_version, list_versions, version_function
from repart.storage.models import Version

versions_app = typer.Typer(no_args_is_help=True, help="List, show and compare partition-function versions.")

RegionName = Annotated[str, typer.Argument(help="Region name.")]
VersionNumber = Annotated[int, typer.Argument(help="Version number (1, 2, …).")]
SHOWN_MOVES = 20


def version_dict(row: Version, function: PartitionFunction) -> dict[str, Any]:
    """A version's metadata as a JSON object."""
    return {
        "version": row.number,
        "N": row.n_channels,
        "status": row.status,
        "digest": row.digest,
        "algorithm": row.algorithm,
        "explicit_size": len(function.explicit),
        "slot_overrides": len(function.slot_overrides),
        "parent": row.parent_number,
        "created_at": timestamp(row.created_at),
    }


def plan_dict(plan: MigrationPlan) -> dict[str, Any]:
    """A migration plan's moves and prediction as a JSON object."""
    runs = plan.slot_moves.tolist()
    return {
        "source_n_channels": plan.source_n_channels,
        "target_n_channels": plan.target_n_channels,
        "explicit_moves": [
            {"key": m.key, "source": m.source, "target": m.target, "weight": m.weight}
            for m in plan.explicit_moves
        ],
        "slot_moves": [
            dict(zip(("first_slot", "last_slot", "source", "target"), run, strict=True)) for run in runs
        ],
        "slots_moved": sum(last - first + 1 for first, last, _, _ in runs),
        "channels_losing_keys": list(plan.channels_losing_keys),
        "channels_gaining_keys": list(plan.channels_gaining_keys),
        "predicted_cost": plan.cost,
        "predicted_m": plan.m,
    }


def print_plan(plan: dict[str, Any], title: str) -> None:
    """A plan for people: a summary, then the first explicit moves and slot runs."""
    out = console()
    summary = Table(title=title, show_header=False)
    summary.add_column("field", style="bold")
    summary.add_column("value")
    summary.add_row("N", f"{plan['source_n_channels']} → {plan['target_n_channels']}")
    summary.add_row("explicit moves", str(len(plan["explicit_moves"])))
    summary.add_row("slot-move runs", f"{len(plan['slot_moves'])} ({plan['slots_moved']} slots)")
    summary.add_row("channels losing keys", ", ".join(map(str, plan["channels_losing_keys"])) or "-")
    summary.add_row("channels gaining keys", ", ".join(map(str, plan["channels_gaining_keys"])) or "-")
    summary.add_row("predicted m", number(plan["predicted_m"]))
    out.print(summary)
    if plan["explicit_moves"]:
        moves = Table(title=f"explicit moves (first {SHOWN_MOVES})")
        for column in ("key", "from", "to", "weight"):
            moves.add_column(column)
        for m in plan["explicit_moves"][:SHOWN_MOVES]:
            moves.add_row(Text(repr(m["key"])), str(m["source"]), str(m["target"]), number(m["weight"]))
        out.print(moves)
    if plan["slot_moves"]:
        runs = Table(title=f"slot moves (first {SHOWN_MOVES} runs)")
        for column in ("slots", "from", "to"):
            runs.add_column(column)
        for r in plan["slot_moves"][:SHOWN_MOVES]:
            runs.add_row(f"{r['first_slot']}..{r['last_slot']}", str(r["source"]), str(r["target"]))
        out.print(runs)


@versions_app.command("list")
@reports_bad_input
def list_(region: RegionName, db: DbOption = None, as_json: JsonOption = False) -> None:
    """List a region's versions, oldest first."""
    rows = read_query(db, lambda s: [version_dict(v, version_function(v)) for v in list_versions(s, region)])
    if as_json:
        print_json(rows)
        return
    table = Table(title=f"versions of {region}")
    for column in (
        "version",
        "N",
        "status",
        "algorithm",
        "explicit",
        "overrides",
        "parent",
        "created",
        "digest",
    ):
        table.add_column(column)
    for v in rows:
        table.add_row(
            str(v["version"]),
            str(v["N"]),
            v["status"],
            v["algorithm"],
            str(v["explicit_size"]),
            str(v["slot_overrides"]),
            str(v["parent"] or "-"),
            v["created_at"],
            v["digest"][:12],
        )
    console().print(table)


@versions_app.command("show")
@reports_bad_input
def show(
    region: RegionName, version: VersionNumber, db: DbOption = None, as_json: JsonOption = False
) -> None:
    """Show a version: metadata, explicit map size, slot overrides and its build report."""

    def work(session: Session) -> dict[str, Any]:
        row = get_version(session, region, version)
        return {
            **version_dict(row, version_function(row)),
            "report": json.loads(row.report_json),
            "function": json.loads(row.function_json),
        }

    shown = read_query(db, work)
    if as_json:
        print_json(shown)
        return
    table = Table(title=f"version {version} of {region}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    for field, value in shown.items():
        if field not in ("report", "function"):
            table.add_row(field, Text(str(value)))
    for field, value in shown["report"].items():
        table.add_row(f"report.{field}", Text(json.dumps(value)))
    console().print(table)


@versions_app.command("diff")
@reports_bad_input
def diff(
    region: RegionName,
    a: Annotated[int, typer.Argument(help="Source version.")],
    b: Annotated[int, typer.Argument(help="Target version.")],
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """The migration plan from version A to version B: explicit moves, slot-move runs, channels."""

    def work(session: Session) -> dict[str, Any]:
        source = version_function(get_version(session, region, a))
        target = version_function(get_version(session, region, b))
        return {"from_version": a, "to_version": b, **plan_dict(plan_migration(source, target))}

    plan = read_query(db, work)
    if as_json:
        print_json(plan)
    else:
        print_plan(plan, f"{region}: version {a} → {b}")
