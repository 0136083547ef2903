"""``repart versions list|show|diff``: a region's stored partition functions.

``diff`` shows the migration plan between two versions with the numbers ``plans show`` gives for the
same migration (``migration_between``): the stored plan when there is one.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from repart.cli.captions import B_LB, metrics_caption
from repart.cli.database import (
    DbOption,
    JsonOption,
    console,
    number,
    print_json,
    read_query,
)
from repart.cli.errors import reports_bad_input
from repart.storage.views import version_dict

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from repart.migration import MigrationPlan

versions_app = typer.Typer(no_args_is_help=True, help="List, show and compare partition-function versions.")

RegionName = Annotated[str, typer.Argument(help="Region name.")]
VersionNumber = Annotated[int, typer.Argument(help="Version number (1, 2, …).")]
SHOWN_MOVES = 20


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
        "consolidations": [
            {"key": c.key, "source": c.source, "target": c.target, "weight": c.weight}
            for c in plan.consolidations
        ],
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
    summary.add_row("consolidations", str(len(plan["consolidations"])))
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
    if plan["consolidations"]:
        merges = Table(title=f"consolidations: partial state merged into the home (first {SHOWN_MOVES})")
        for column in ("key", "from", "into", "weight"):
            merges.add_column(column)
        for c in plan["consolidations"][:SHOWN_MOVES]:
            merges.add_row(Text(repr(c["key"])), str(c["source"]), str(c["target"]), number(c["weight"]))
        out.print(merges)
    if plan["slot_moves"]:
        runs = Table(title=f"slot moves (first {SHOWN_MOVES} runs)")
        for column in ("slots", "from", "to"):
            runs.add_column(column)
        for r in plan["slot_moves"][:SHOWN_MOVES]:
            runs.add_row(f"{r['first_slot']}..{r['last_slot']}", str(r["source"]), str(r["target"]))
        out.print(runs)


def print_split_keys(entries: list[dict[str, Any]]) -> None:
    """Split keys for people (``{"key", "candidates", "weights"}`` objects): a table, nothing if none."""
    if not entries:
        return
    split = Table(title="split keys (home first)")
    for column in ("key", "candidates", "weights"):
        split.add_column(column)
    for entry in entries:
        split.add_row(
            Text(repr(entry["key"])),
            ", ".join(map(str, entry["candidates"])),
            ", ".join(f"{weight:.3f}" for weight in entry["weights"]),
        )
    console().print(split)


@versions_app.command("list")
@reports_bad_input
def list_(region: RegionName, db: DbOption = None, as_json: JsonOption = False) -> None:
    """List a region's versions, oldest first."""
    from repart.storage import list_versions, stored_function

    rows = read_query(db, lambda s: [version_dict(v, stored_function(v)) for v in list_versions(s, region)])
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
        "split",
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
            str(len(v["split_keys"])),
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

    from repart.storage import get_version, stored_function

    def work(session: Session) -> dict[str, Any]:
        row = get_version(session, region, version)
        return {
            **version_dict(row, stored_function(row)),
            "report": json.loads(row.report_json),
            "function": json.loads(row.function_json),
        }

    shown = read_query(db, work)
    if as_json:
        print_json(shown)
        return
    # A built version's report predicts b and max/mean load (predicted_b, predicted_load).
    report = shown["report"]
    caption = (metrics_caption(*([B_LB] if "b_lb" in report else []))) if "predicted_b" in report else None
    table = Table(title=f"version {version} of {region}", show_header=False, caption=caption)
    table.add_column("field", style="bold")
    table.add_column("value")
    for field, value in shown.items():
        if field not in ("report", "function", "split_keys"):
            table.add_row(field, Text(str(value)))
    for field, value in shown["report"].items():
        table.add_row(f"report.{field}", Text(json.dumps(value)))
    console().print(table)
    print_split_keys(shown["split_keys"])


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
        plan, basis = migration_between(session, region, a, b)
        return {"from_version": a, "to_version": b, **basis, **plan_dict(plan)}

    plan = read_query(db, work)
    if as_json:
        print_json(plan)
        return
    print_plan(plan, f"{region}: version {a} → {b}")
    if plan["plan_id"] is not None:
        weights = f"those of stored plan {plan['plan_id']} (the window it was decided on)"
    elif plan["window_seqs"]:
        weights = f"from the latest window, seqs {', '.join(map(str, plan['window_seqs']))}"
    else:
        weights = "none (the region has no window with keys): moves weigh 0 and m is unknown"
    console().print(f"weights: {weights}")


def migration_between(session: Session, region: str, a: int, b: int) -> tuple[MigrationPlan, dict[str, Any]]:
    """The migration plan from version ``a`` to version ``b`` of ``region``, and what weighs its moves
    (``{"plan_id": …, "window_seqs": […]}``); NotFound for a version that does not exist.

    The stored plan from ``a`` to ``b``, when the region has one whose moves were not pruned (what the
    tick or an operator's ``scale`` or ``rollback`` activated, weighed by the window it decided on): the
    plan ``plans show`` shows, so both give the same moves, weights and predicted m. Otherwise it is
    computed as ``scale`` and ``rollback`` compute theirs: ``plan_migration`` weighed by the region's
    latest merged window (its last x − 1 snapshots) with the region's resources; without keys in that
    window the moves weigh 0.0 and m is None.
    """
    from repart.controller.settings import ControllerSettings
    from repart.controller.state_step import repartition_plan
    from repart.controller.window import merge_snapshots, window_size
    from repart.migration import MigrationPlan, plan_migration
    from repart.partitioning.state_partitions import StatePartitions
    from repart.storage import (
        RegionConfig,
        get_version,
        latest_snapshots,
        list_plans,
        region_by_name,
        stored_function,
    )

    source, target = get_version(session, region, a), get_version(session, region, b)
    for stored in list_plans(session, region):
        if (stored.from_version, stored.to_version) == (a, b) and stored.plan_json is not None:
            return MigrationPlan.from_json(stored.plan_json), {"plan_id": stored.id, "window_seqs": []}
    config = RegionConfig.from_row(region_by_name(session, region))
    settings = ControllerSettings.from_config(config)
    window = latest_snapshots(session, region, window_size(settings.counters))
    estimate = merge_snapshots(window) if window else None
    if estimate is not None and (not estimate.keys or estimate.total == 0):
        estimate = None
    before, after = stored_function(source), stored_function(target)
    if isinstance(before, StatePartitions) and isinstance(after, StatePartitions):
        plan = repartition_plan(before, after, config.slot_bits, None)
    elif not isinstance(before, StatePartitions) and not isinstance(after, StatePartitions):
        plan = plan_migration(before, after, estimate, settings.params.resources)
    else:  # a region's engine is fixed once it has versions
        raise TypeError("a region's versions are all of one kind")
    seqs = [] if estimate is None else [snapshot.seq for snapshot in window]
    return plan, {"plan_id": None, "window_seqs": seqs}
