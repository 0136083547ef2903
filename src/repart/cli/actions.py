"""``repart rollback|scale|resume|explain``: the operator's overrides and the last decision.

``rollback`` and ``scale`` activate a new version with a pending plan from the applied version, as the
controller's tick does, with rule ``operator``, and hold the region so that the next tick does not
undo them; ``resume`` returns a held region to its previous mode and ends its backoff; ``explain``
shows the newest decision event with its numbers. Bad input (an unknown region or version, N outside
the region's bounds, a plan being applied) is reported without a traceback and exits 2, and nothing is
written.
"""

from __future__ import annotations

import json
from dataclasses import asdict
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table
from rich.text import Text

from repart.cli.captions import B_LB, WHERE_EXPLAINED, M, metrics_caption
from repart.cli.database import (
    DbOption,
    JsonOption,
    console,
    number,
    open_database,
    print_json,
    query,
    read_query,
)
from repart.cli.errors import reports_bad_input
from repart.cli.versions import print_split_keys

if TYPE_CHECKING:
    from repart.controller.actions import ActionResult

# The decision's figures ``explain`` shows, each max/mean load beside its b.
DECISION_FIGURES = (
    "n_before",
    "n_next",
    "b_before",
    "load_before",
    "threshold",
    "predicted_b",
    "predicted_load",
    "predicted_m",
    "plan_m",
)

RegionName = Annotated[str, typer.Argument(help="Region name.")]
ReasonOption = Annotated[
    str | None,
    typer.Option(
        help="Why, in the operator's words: recorded with the hold it puts the region in.", show_default=False
    ),
]


@reports_bad_input
def rollback(
    region: RegionName,
    to: Annotated[int, typer.Option("--to", help="The version whose function to go back to.")],
    reason: ReasonOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Activate a new version with version V's function and a plan to it from the applied version.

    The region is then held, so that the next tick does not undo the rollback: `repart resume REGION`
    returns it to its mode.
    """
    from repart.controller.service import rollback as rollback_region

    with open_database(db) as engine:
        result = rollback_region(engine, region, to, reason=reason)
    _show(result, as_json)


@reports_bad_input
def scale(
    region: RegionName,
    channels: Annotated[int, typer.Option("--channels", help="The channel count N to run with.")],
    reason: ReasonOption = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Activate the next function on N channels, built from the applied version, with its plan.

    The region is then held, so that the next tick does not scale it back: `repart resume REGION`
    returns it to its mode.
    """
    from repart.controller.service import scale as scale_region

    with open_database(db) as engine:
        result = scale_region(engine, region, channels, reason=reason)
    _show(result, as_json)


@reports_bad_input
def explain(region: RegionName, db: DbOption = None, as_json: JsonOption = False) -> None:
    """Why the region runs what it runs: its last decision, its rule and its numbers."""
    from repart.controller.actions import explain as explain_region

    shown = read_query(db, lambda session: explain_region(session, region))
    if as_json:
        print_json(shown)
        return
    out = console()
    table = Table(title=f"last decision of {region}", show_header=False, caption=metrics_caption(B_LB, M))
    table.add_column("field", style="bold")
    table.add_column("value")
    for field in ("kind", "rule", "message", "at", "version", "plan_id", "policy", "held_by", "algorithm"):
        table.add_row(field, Text("-" if shown[field] is None else str(shown[field])))
    for field in DECISION_FIGURES:
        table.add_row(field, _cell(shown[field]))
    for field in ("b_lb", "memory", "split_keys", "d"):
        if shown[field] is not None:
            table.add_row(field, _cell(shown[field]))
    for name, value in (shown["policy_numbers"] or {}).items():
        table.add_row(f"policy.{name}", _cell(value))
    choice = shown["state_count"]
    if choice is not None:
        for name in ("chosen", "rule", "chosen_b", "rule_b", "dominant_key"):
            table.add_row(f"state_count.{name}", _cell(choice.get(name)))
        table.add_row("predicted_bytes", _cell(shown["predicted_bytes"]))
    backoff = shown["backoff"]
    if backoff is not None:
        table.add_row(
            "backoff",
            Text(
                f"{backoff['tick_failures']} failed tick(s) in a row, next at {backoff['retry_at']}: "
                f"{backoff['last_error']}"
            ),
        )
    out.print(table)
    if shown["candidates"]:
        candidates = Table(title="candidates", caption=WHERE_EXPLAINED)
        for column in ("algorithm", "b", "max/mean", "m", "objective"):
            candidates.add_column(column, justify="left" if column == "algorithm" else "right")
        for candidate in shown["candidates"]:
            candidates.add_row(
                str(candidate["algorithm"]),
                _cell(candidate["predicted_b"]),
                _cell(candidate["predicted_load"]),
                _cell(candidate["predicted_m"]),
                _cell(candidate["objective"]),
            )
        out.print(candidates)
    print_split_keys(shown["head"])


def _show(result: ActionResult, as_json: bool) -> None:
    if as_json:
        print_json(asdict(result))
        return
    table = Table(title=f"{result.action}: {result.region}", show_header=False)
    table.add_column("field", style="bold")
    table.add_column("value")
    table.add_row("version", f"{result.from_version} → {result.version} (pending plan {result.plan_id})")
    table.add_row("N", str(result.n_channels))
    table.add_row("digest", result.digest[:12])
    table.add_row("predicted m", number(result.plan_m))
    table.add_row("reason", Text(result.reason))
    hint = f"`repart resume {result.region}` lets the controller act"
    table.add_row("mode", Text(f"{result.mode} ({result.mode_reason}); {hint}"))
    console().print(table)


@reports_bad_input
def resume(region: RegionName, db: DbOption = None, as_json: JsonOption = False) -> None:
    """Return a held region to the mode it had before it was held (`auto` if none), and end its backoff
    after failed ticks, so that the daemon ticks it at its next sweep."""
    from repart.controller.service import resume as resume_region
    from repart.storage.views import mode_dict

    shown = query(db, lambda session: mode_dict(resume_region(session, region)))
    if as_json:
        print_json(shown)
        return
    reason = "" if shown["mode_reason"] is None else f" ({shown['mode_reason']})"
    console().print(Text(f"{region}: mode {shown['mode']}{reason}; the daemon ticks it at its next sweep"))


def _cell(value: Any) -> str:
    """A number for a table cell; other JSON values as JSON."""
    if isinstance(value, float):
        return number(value)
    return "-" if value is None else json.dumps(value)
