"""``repart plans list|show|report|prune``: a region's migration plans, what jobs report, and retention.

``report`` is what a Spark job says after applying a plan: ``applied`` (with the rows and bytes it
moved) or ``failed``. A pending plan is taken through ``applying`` in the same transaction. Jobs retry:
a report that repeats the plan's state and numbers changes nothing and succeeds. ``prune`` deletes the
moves of old plans (``repart.storage.retention``). Both go through ``repart.controller.service``.
"""

from __future__ import annotations

from enum import StrEnum
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from repart.cli.captions import M, metrics_caption
from repart.cli.database import (
    DbOption,
    JsonOption,
    console,
    number,
    print_json,
    query,
    read_query,
    timestamp,
)
from repart.cli.errors import reports_bad_input
from repart.cli.versions import plan_dict, print_plan
from repart.storage.views import plan_summary

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from repart.storage.models import Event

plans_app = typer.Typer(
    no_args_is_help=True, help="List and show migration plans; report their outcome; prune old plans' moves."
)

RegionName = Annotated[str, typer.Argument(help="Region name.")]
PlanId = Annotated[int, typer.Argument(help="Plan id (see `repart plans list REGION`).")]


class Outcome(StrEnum):
    """What a job reports about a plan."""

    applied = "applied"
    failed = "failed"


@plans_app.command("list")
@reports_bad_input
def list_(
    region: RegionName,
    recommended: Annotated[
        bool,
        typer.Option(
            "--recommended",
            help="List the recommendations a region in `recommend` mode recorded (nothing activated).",
        ),
    ] = False,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """List a region's plans, oldest first."""
    from repart.storage import list_plans

    if recommended:
        _list_recommendations(region, db, as_json)
        return
    rows = read_query(db, lambda s: [plan_summary(p) for p in list_plans(s, region)])
    if as_json:
        print_json(rows)
        return
    table = Table(title=f"plans of {region}")
    for column in (
        "id",
        "versions",
        "status",
        "predicted m",
        "explicit moves",
        "slot moves",
        "moved rows",
        "created",
    ):
        table.add_column(column)
    for p in rows:
        table.add_row(
            str(p["id"]),
            f"{p['from_version']} → {p['to_version']}",
            p["status"],
            number(p["predicted_m"]),
            str(p["explicit_moves"]),
            str(p["slot_moves"]),
            "-" if p["moved_rows"] is None else str(p["moved_rows"]),
            p["created_at"],
        )
    console().print(table)


def recommendation_summary(event: Event) -> dict[str, Any]:
    """A ``recommended`` event as what it recommends: the window it decided on, N, the candidate's
    digest, b and max/mean load before, predicted b, max/mean load and m, and its plan's moves (max/mean
    load is None in an older event that lacks it)."""
    from repart.storage.jsontext import load_object

    data = load_object(event.data_json)
    return {
        "event_id": event.id,
        "at": timestamp(event.at),
        "rule": event.rule,
        "considered_seq": data.get("considered_seq"),
        "n_before": data.get("n_before"),
        "n_next": data.get("n_channels"),
        "digest": data.get("digest"),
        "algorithm": data.get("algorithm"),
        "b_before": data.get("b_before"),
        "load_before": data.get("load_before"),
        "predicted_b": data.get("predicted_b"),
        "predicted_load": data.get("predicted_load"),
        "predicted_m": data.get("predicted_m"),
        "plan": data.get("plan"),
        "message": event.message,
    }


def _list_recommendations(region: str, db: str | None, as_json: bool) -> None:
    from repart.storage.events import region_events

    rows = read_query(
        db, lambda s: [recommendation_summary(e) for e in region_events(s, region, kind="recommended")]
    )
    if as_json:
        print_json(rows)
        return
    table = Table(title=f"recommendations for {region} (nothing activated)", caption=metrics_caption(M))
    columns = (
        "event",
        "at",
        "window seq",
        "N",
        "b before",
        "max/mean before",
        "predicted b",
        "predicted max/mean",
        "predicted m",
        "moves",
    )
    for column in columns:
        table.add_column(column)
    for r in rows:
        plan = r["plan"] or {}
        table.add_row(
            str(r["event_id"]),
            str(r["at"]),
            str(r["considered_seq"]),
            f"{r['n_before']} → {r['n_next']}",
            number(r["b_before"]),
            number(r["load_before"]),
            number(r["predicted_b"]),
            number(r["predicted_load"]),
            number(r["predicted_m"]),
            f"{plan.get('explicit_moves', 0)} keys, {plan.get('slot_moves', 0)} slots",
        )
    console().print(table)


@plans_app.command("show")
@reports_bad_input
def show(region: RegionName, plan_id: PlanId, db: DbOption = None, as_json: JsonOption = False) -> None:
    """Show a plan: status, prediction, moves and the channels that lose and gain keys (a plan whose
    moves were pruned shows its summary only; its ``plan`` is null)."""

    from repart.controller.service import plan_of_region
    from repart.migration import MigrationPlan

    def work(session: Session) -> dict[str, Any]:
        row = plan_of_region(session, region, plan_id)
        moves = None if row.plan_json is None else plan_dict(MigrationPlan.from_json(row.plan_json))
        return {**plan_summary(row), "plan": moves}

    shown = read_query(db, work)
    if as_json:
        print_json(shown)
        return
    versions = f"version {shown['from_version']} → {shown['to_version']}"
    if shown["plan"] is None:
        console().print(
            f"plan {plan_id} of {region}: {versions}, {shown['status']}; its moves were pruned at "
            f"{shown['pruned_at']} ({shown['explicit_moves']} keys, {shown['slot_moves']} slot ranges)"
        )
        return
    print_plan(shown["plan"], f"plan {plan_id} of {region}: {versions}, {shown['status']}")


@plans_app.command("report")
@reports_bad_input
def report(
    region: RegionName,
    plan_id: PlanId,
    state: Annotated[Outcome, typer.Option("--state", help="What the job did: applied or failed.")],
    moved_rows: Annotated[int | None, typer.Option(help="Rows the job moved (with --state applied).")] = None,
    moved_bytes: Annotated[
        int | None, typer.Option(help="Bytes the job moved (with --state applied).")
    ] = None,
    reason: Annotated[
        str | None,
        typer.Option(help="Why the job failed (with --state failed): the plan-failed event's message."),
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Record that a job applied a plan or failed to (its target version becomes applied or abandoned;
    a failure is a plan-failed event).

    A retry is a no-op: reporting the state the plan is already in with the same --moved-rows and
    --moved-bytes (as given the first time) changes nothing and exits 0. Another state, or other
    numbers, is a Conflict (exit 3).
    """

    from repart.controller.service import report_plan

    def work(session: Session) -> dict[str, Any]:
        row, changed = report_plan(
            session,
            region,
            plan_id,
            state.value,
            moved_rows=moved_rows,
            moved_bytes=moved_bytes,
            reason=reason,
        )
        return {**plan_summary(row), "changed": changed}

    summary = query(db, work)
    if as_json:
        print_json(summary)
    elif not summary["changed"]:
        console().print(
            f"plan {plan_id} of {region} was already reported {summary['status']}; nothing changed"
        )
    else:
        console().print(
            f"plan {plan_id} of {region} is {summary['status']} (version {summary['to_version']} "
            f"{'applied' if summary['status'] == 'applied' else 'abandoned'})"
        )


@plans_app.command("prune")
@reports_bad_input
def prune(
    region: RegionName,
    keep_versions: Annotated[
        int | None,
        typer.Option(
            "--keep-versions",
            help="Keep the moves of the plans to the K newest versions (K >= 1).",
            show_default=False,
        ),
    ] = None,
    older_than: Annotated[
        float | None,
        typer.Option(
            "--older-than",
            help="Prune the moves of the plans created more than T days ago (T > 0).",
            show_default=False,
        ),
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Delete the moves of a region's old plans (older than K versions or T days), keeping each plan's
    summary in its row and in a ``plan-pruned`` event.

    Without --keep-versions and --older-than, the region's settings plan_keep_versions and
    plan_keep_days are used, and the applied version's plan is kept. Given options that would prune
    the applied version's plan are refused (exit 2) and nothing is written. Plans a job has not
    finished applying are never pruned.
    """
    from repart.controller.service import prune_plans

    def work(session: Session) -> list[dict[str, Any]]:
        pruned = prune_plans(session, region, keep_versions=keep_versions, older_than=older_than)
        return [plan.summary for plan in pruned]

    pruned = query(db, work)
    if as_json:
        print_json({"region": region, "pruned": pruned})
        return
    moves = sum(plan["deleted_moves"] for plan in pruned)
    listed = ", ".join(str(plan["id"]) for plan in pruned) or "none"
    console().print(f"pruned the moves of {len(pruned)} plan(s) of {region} ({moves} move rows): {listed}")
