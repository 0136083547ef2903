"""The controller's operations, each with all of its validation, for the CLI and Python callers.

Every change an operator or a job makes to a region goes through one function here: ``create_region``,
``update_region`` (its mode too), ``delete_region``, ``resume``, ``scale``, ``rollback``,
``ingest_snapshot``, ``delete_snapshot``, ``report_plan`` and ``prune_plans``. Each checks its input
(``InvalidInput`` naming the field and what is accepted), then calls the storage functions, which
accept only checked values: a ``CheckedRegion`` (a ``RegionConfig`` whose settings
``checked_config`` accepted), a parsed ``Snapshot``, a ``PlanRetention``. The
functions that take a ``Session`` leave committing to the caller (``repart.storage.run_in_transaction``
is the usual way to get one): nothing is written when they raise. ``scale`` and ``rollback`` take an
engine, because they build outside any transaction (``repart.controller.actions``).

    from repart.controller import service
    from repart.storage import RegionConfig, make_engine, run_in_transaction

    engine = make_engine("sqlite:///.repart/repart.db")
    run_in_transaction(engine, lambda s: service.create_region(s, "orders", RegionConfig("str", 4)))
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from datetime import datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Engine
from sqlalchemy.orm import Session

from repart.controller.settings import ControllerSettings
from repart.errors import InvalidInput, NotFound
from repart.protocol.snapshot import Snapshot
from repart.storage import models
from repart.storage.backoff import clear_backoff
from repart.storage.events import NewEvent, record_event
from repart.storage.modes import resume as resume_mode
from repart.storage.modes import set_mode as set_region_mode
from repart.storage.plan_reports import PLAN_OUTCOMES
from repart.storage.plan_reports import report_plan as store_plan_report
from repart.storage.plans import get_plan
from repart.storage.regions import CheckedRegion, RegionConfig, region_by_name
from repart.storage.regions import create_region as store_region
from repart.storage.regions import delete_region as remove_region
from repart.storage.regions import update_region as change_region
from repart.storage.retention import OPERATOR_RULE, PlanRetention, PrunedPlan
from repart.storage.retention import prune_plans as prune_region_plans
from repart.storage.snapshots import DeletedSnapshot
from repart.storage.snapshots import delete_snapshot as remove_snapshot
from repart.storage.snapshots import ingest_snapshot as store_snapshot
from repart.validation import Kind, Options, check

if TYPE_CHECKING:
    from repart.controller.actions import ActionResult

SETTINGS_OBJECT = Kind(Mapping, "an object of setting names and values")
SPLIT_OBJECT = Kind(Mapping, "an object of the split scheme's parameters")


def checked_config(config: RegionConfig) -> CheckedRegion:
    """``config``, checked, if the controller can tick a region with it: its ``settings`` are checked
    with the configuration they go with (``repart.controller.settings``; a policy's settings against its
    channel bounds, the split parameters against the scheme). InvalidInput naming ``settings.<field>``."""
    ControllerSettings.from_config(config)
    return CheckedRegion(config)


def create_region(session: Session, name: str, config: RegionConfig) -> models.Region:
    """Add region ``name`` with ``config`` (``checked_config``: an unknown or bad setting is refused
    before anything is stored); InvalidInput naming a bad name or field, Conflict if the name is taken."""
    return store_region(session, name, checked_config(config))


def update_region(
    session: Session,
    name: str,
    *,
    settings: Mapping[str, Any] | None = None,
    mode: str | None = None,
    reason: str | None = None,
    **changes: Any,
) -> models.Region:
    """Change fields of region ``name``'s configuration, merge ``settings`` into its settings (a
    ``split`` object into its ``split`` object; a setting or split parameter given as None is removed,
    back to its default) and set its ``mode`` with ``reason``.

    The new configuration is checked as a whole (InvalidInput naming the field, an unknown one too;
    ``checked_config``); ``reason`` needs ``mode``, and at least one change is needed. ``key_type``
    and ``slot_bits`` cannot change once the region has snapshots or versions (Conflict). NotFound for
    an unknown region.
    """
    if reason is not None and mode is None:
        raise InvalidInput("reason", "must come with mode: it is the reason for a change of mode")
    if settings is not None:
        check("settings", settings, SETTINGS_OBJECT)
    if not changes and not settings and mode is None:
        raise InvalidInput("changes", "must include at least one field, setting or mode: nothing to update")
    fields = [f.name for f in dataclasses.fields(RegionConfig)]
    unknown = sorted(set(changes) - set(fields))
    if unknown:
        raise InvalidInput(unknown[0], f"is not a region field; accepted: {', '.join(fields)}")
    row = region_by_name(session, name)
    old = RegionConfig.from_row(row)
    if settings:
        changes["settings"] = merged_settings(old.settings, settings)
    if changes:
        row = change_region(session, name, checked_config(dataclasses.replace(old, **changes)))
    if mode is not None:
        row = set_region_mode(session, name, mode, reason)
    return row


def merged_settings(old: Mapping[str, Any], new: Mapping[str, Any]) -> dict[str, Any]:
    """``old`` settings with ``new`` merged in, a ``split`` object into the ``split`` object; a value of
    None removes the setting (or split parameter). InvalidInput naming ``settings.split`` when it is not
    an object."""
    merged = dict(old)
    for key, value in new.items():
        if key == "split" and value is not None:
            check("settings.split", value, SPLIT_OBJECT)
            split = {**merged.get("split", {}), **value}
            value = {name: given for name, given in split.items() if given is not None} or None
        if value is None:
            merged.pop(key, None)
        else:
            merged[key] = value
    return merged


def delete_region(session: Session, name: str, *, force: bool = False) -> dict[str, Any]:
    """Delete region ``name`` with its snapshots, versions, plans and reports, and record a
    controller-wide ``region-deleted`` event; returns what went and the event's id. A region with
    versions needs ``force`` (Conflict otherwise)."""
    deleted = remove_region(session, name, force=force)
    counts = dataclasses.asdict(deleted)
    message = (
        f"deleted region {name!r} with {deleted.versions} version(s), {deleted.plans} plan(s) and "
        f"{deleted.snapshots} snapshot(s)"
    )
    data = {"region": name, "forced": force, **counts}
    event_id = record_event(session, None, NewEvent("region-deleted", OPERATOR_RULE, message, data))
    return {"name": name, "forced": force, **counts, "event_id": event_id, "message": message}


def resume(session: Session, region: str, *, now: datetime | None = None) -> models.Region:
    """Return a held region to its previous mode and end its backoff (a ``backoff-ended`` event), so
    the daemon ticks it at its next sweep. InvalidInput naming ``mode`` when the region is neither held
    nor backing off."""
    from repart.controller.tick import aware_now

    now = aware_now(now)
    row = region_by_name(session, region)
    backing_off = row.tick_failures > 0
    if row.mode != "hold" and not backing_off:
        raise InvalidInput(
            "mode",
            f"must be 'hold', or the region backing off after failed ticks, to resume; region {region!r} "
            f"is in {row.mode!r} with no failed tick",
        )
    if backing_off:
        message = (
            f"ended the backoff of region {region!r} after {row.tick_failures} failed tick(s) in a row "
            f"(the last: {row.last_error}); the next sweep ticks it"
        )
        data = {
            "tick_failures": row.tick_failures,
            "retry_at": None if row.retry_at is None else row.retry_at.isoformat(),
            "last_error": row.last_error,
        }
        clear_backoff(session, row.id)
        record_event(session, region, NewEvent("backoff-ended", OPERATOR_RULE, message, data), at=now)
        session.refresh(row)
    if row.mode == "hold":
        row = resume_mode(session, region, at=now)
    return row


def scale(
    engine: Engine, region: str, n_channels: int, *, reason: str | None = None, now: datetime | None = None
) -> ActionResult:
    """Activate a function on ``n_channels`` channels and hold the region (``actions.scale``)."""
    from repart.controller.actions import scale as scale_region  # the builder loads only when used

    return scale_region(engine, region, n_channels, reason=reason, now=now)


def rollback(
    engine: Engine, region: str, to_version: int, *, reason: str | None = None, now: datetime | None = None
) -> ActionResult:
    """Activate version ``to_version``'s function again and hold the region (``actions.rollback``)."""
    from repart.controller.actions import rollback as rollback_region  # the builder loads only when used

    return rollback_region(engine, region, to_version, reason=reason, now=now)


def ingest_snapshot(session: Session, snapshot: Snapshot, *, source: str | None = None) -> int:
    """Store a parsed ``snapshot`` for its region (checked against it: ``storage.ingest_snapshot``)."""
    return store_snapshot(session, snapshot, source=source)


def delete_snapshot(session: Session, region: str, seq: int, *, force: bool = False) -> DeletedSnapshot:
    """Delete window ``seq`` of ``region``, refused while a decision depends on it unless ``force``."""
    return remove_snapshot(session, region, seq, force=force)


def report_plan(
    session: Session,
    region: str,
    plan_id: int,
    state: str,
    *,
    moved_rows: int | None = None,
    moved_bytes: int | None = None,
    reason: str | None = None,
) -> tuple[models.Plan, bool]:
    """Record that a job applied plan ``plan_id`` of ``region`` (with the rows and bytes it moved) or
    failed to (a ``plan-failed`` event with ``reason``); a pending plan is taken through ``applying``.
    Returns the plan and whether it changed (``repart.storage.plan_reports``, which a job's
    ``SqlControllerClient`` calls too).

    A retry is a no-op: the state the plan is already in with the same numbers changes nothing. Another
    state or other numbers is a Conflict; a plan of another region is NotFound.
    """
    check("state", state, Options(PLAN_OUTCOMES))
    plan_of_region(session, region, plan_id)
    return store_plan_report(
        session, plan_id, state, moved_rows=moved_rows, moved_bytes=moved_bytes, reason=reason
    )


def plan_of_region(session: Session, region: str, plan_id: int) -> models.Plan:
    """Plan ``plan_id``, which must belong to ``region`` (NotFound otherwise)."""
    region_id = region_by_name(session, region).id
    row = get_plan(session, plan_id)
    if row.region_id != region_id:
        raise NotFound(f"plan {plan_id} is not a plan of region {region!r}")
    return row


def prune_plans(
    session: Session,
    region: str,
    *,
    keep_versions: int | None = None,
    older_than: float | None = None,
    now: datetime | None = None,
) -> list[PrunedPlan]:
    """Prune the moves of ``region``'s plans older than ``keep_versions`` versions or ``older_than``
    days (``repart.storage.retention``), each pruned plan's summary kept as a ``plan-pruned`` event.

    Without either, the region's own retention settings are used (InvalidInput naming
    ``keep_versions`` when it has none), and the applied version's plan is left out; given, a retention
    that would prune the applied version's plan is refused (InvalidInput naming the option) and
    nothing is written."""
    from repart.controller.tick import aware_now

    moment = aware_now(now)
    if keep_versions is None and older_than is None:
        retention = ControllerSettings.from_config(
            RegionConfig.from_row(region_by_name(session, region))
        ).retention
        if retention is None:
            raise InvalidInput(
                "keep_versions",
                f"is required (or older_than): region {region!r} sets neither settings.plan_keep_versions "
                "nor settings.plan_keep_days",
            )
        return prune_region_plans(session, region, retention, moment, strict=False, rule=OPERATOR_RULE)
    retention = PlanRetention(keep_versions=keep_versions, older_than=older_than)
    return prune_region_plans(session, region, retention, moment, strict=True, rule=OPERATOR_RULE)
