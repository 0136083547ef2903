"""Activation: a new version, its plan and the event that explains them, in one transaction (DESIGN §7, §8).

``activate`` is the unit of work of the controller's Activate step. It checks everything first (the
function is canonical and matches its digest, fits the region, the plan's moves are well formed and
match its digest), then writes inside a SAVEPOINT: pending plans superseded (their versions
abandoned), the version with its explicit entries, the plan with its moves, and the event. Any
failure leaves none of it behind, even if the caller goes on to commit its transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, cast

from sqlalchemy import func, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from repart.partitioning.algorithms.builder import check_algorithm
from repart.partitioning.function import PartitionFunction
from repart.partitioning.hashing import KeyType
from repart.storage import models
from repart.storage.checks import require_number
from repart.storage.errors import ConflictError, NotFoundError, StorageError
from repart.storage.events import NewEvent
from repart.storage.jsontext import dump_object
from repart.storage.keys import key_columns
from repart.storage.plans import (
    ExplicitMove,
    SlotMove,
    move_rows,
    parse_plan_moves,
    sha256_hex,
    transition_plan,
)
from repart.storage.regions import region_by_name


@dataclass(frozen=True)
class NewVersion:
    """A built partition function: canonical JSON, its digest, N, the algorithm and its build report."""

    function_json: str
    digest: str
    n_channels: int
    algorithm: str
    report: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))
    parent_number: int | None = None


@dataclass(frozen=True)
class NewPlan:
    """A migration plan from ``repart.migration``: canonical JSON, its digest, predicted cost and m."""

    plan_json: str
    digest: str
    predicted_cost: float | None = None
    predicted_m: float | None = None


@dataclass(frozen=True)
class Activation:
    """What ``activate`` wrote: the version, the plan (None for a region's first version), the event,
    and the pending plans it superseded."""

    version_number: int
    version_id: int
    plan_id: int | None
    event_id: int
    superseded_plans: tuple[int, ...]


def activate(
    session: Session, region: str, version: NewVersion, plan: NewPlan | None, event: NewEvent
) -> Activation:
    """Store ``version`` as the region's next version, with ``plan`` and ``event``, atomically.

    The region's first version is activated without a plan and is ``applied`` at once (there is no
    state to move yet). Every later version needs a plan from the currently applied version; it is
    ``planned`` and its plan ``pending`` until a job applies it, and pending plans of the region are
    superseded. Activation is refused while a plan is being applied (ConflictError). The event's data
    is stored with ``activated_version`` and ``plan_id`` added. Concurrent activations of one region
    are serialized by locking the region row (PostgreSQL) or the database (SQLite).
    """
    row = region_by_name(session, region)
    session.execute(select(models.Region.id).where(models.Region.id == row.id).with_for_update())
    function = _checked_function(version, row)
    check_algorithm(version.algorithm)
    report_json = dump_object(version.report, "report")
    if version.parent_number is not None and _version(session, row.id, version.parent_number) is None:
        raise NotFoundError(f"parent_number: region {region!r} has no version {version.parent_number}")
    applied = session.scalar(
        select(models.Version).where(models.Version.region_id == row.id, models.Version.status == "applied")
    )
    _check_not_applying(session, row)
    if plan is None and applied is not None:
        raise StorageError(
            f"a plan is required: region {region!r} has applied version {applied.number}, "
            "so a new version needs a plan from it"
        )
    if plan is not None and applied is None:
        raise StorageError(
            f"region {region!r} has no applied version; its first version is activated without a plan"
        )
    moves = None if plan is None or applied is None else _checked_moves(plan, row, applied, version)
    latest = session.scalar(select(func.max(models.Version.number)).where(models.Version.region_id == row.id))
    number = (latest or 0) + 1
    try:
        with session.begin_nested():
            superseded = _supersede_pending(session, row.id)
            version_row = models.Version(
                region_id=row.id,
                number=number,
                parent_number=version.parent_number,
                n_channels=version.n_channels,
                digest=version.digest,
                function_json=version.function_json,
                algorithm=version.algorithm,
                status="applied" if plan is None else "planned",
                report_json=report_json,
            )
            session.add(version_row)
            session.flush()
            _insert_explicit(session, version_row.id, function)
            plan_id = None
            if plan is not None and applied is not None and moves is not None:
                plan_id = _insert_plan(session, row.id, plan, moves, applied.number, number)
            event_row = models.Event(
                region_id=row.id,
                kind=event.kind,
                rule=event.rule,
                message=event.message,
                data_json=dump_object(
                    {**event.data, "activated_version": number, "plan_id": plan_id}, "event data"
                ),
            )
            session.add(event_row)
            session.flush()
    except IntegrityError as error:
        raise ConflictError(
            f"activation of region {region!r} conflicts with a stored record: {error.orig}"
        ) from None
    return Activation(number, version_row.id, plan_id, event_row.id, superseded)


def _checked_function(version: NewVersion, region: models.Region) -> PartitionFunction:
    if not isinstance(version.function_json, str):
        raise StorageError(f"function_json must be a string, got {type(version.function_json).__name__}")
    try:
        function = PartitionFunction.from_json(version.function_json)
    except ValueError as error:
        raise StorageError(f"function_json is not a valid partition function: {error}") from None
    if function.to_json() != version.function_json:
        raise StorageError("function_json must be canonical JSON (as PartitionFunction.to_json() writes it)")
    if version.digest != function.digest:
        raise StorageError(
            f"digest must be the SHA-256 of function_json ({function.digest}), got {version.digest!r}"
        )
    if version.n_channels != function.n_channels:
        raise StorageError(
            f"n_channels must be the function's N ({function.n_channels}), got {version.n_channels!r}"
        )
    if not region.min_channels <= function.n_channels <= region.max_channels:
        raise StorageError(
            f"N must be in [{region.min_channels}, {region.max_channels}] (the region's channel bounds), "
            f"got {function.n_channels}"
        )
    if function.key_type not in (None, region.key_type):
        raise StorageError(
            f"the function's key_type must be the region's {region.key_type!r}, got {function.key_type!r}"
        )
    if function.slot_bits != region.slot_bits:
        raise StorageError(
            f"the function's slot_bits must be the region's {region.slot_bits}, got {function.slot_bits}"
        )
    return function


def _version(session: Session, region_id: int, number: int) -> models.Version | None:
    return session.scalar(
        select(models.Version).where(models.Version.region_id == region_id, models.Version.number == number)
    )


def _check_not_applying(session: Session, region: models.Region) -> None:
    applying = session.scalar(
        select(models.Plan.id).where(models.Plan.region_id == region.id, models.Plan.status == "applying")
    )
    if applying is not None:
        raise ConflictError(
            f"plan {applying} of region {region.name!r} is being applied; activate again once it is "
            "applied or failed"
        )


def _supersede_pending(session: Session, region_id: int) -> tuple[int, ...]:
    pending = session.scalars(
        select(models.Plan).where(models.Plan.region_id == region_id, models.Plan.status == "pending")
    ).all()
    for plan in pending:
        transition_plan(session, plan, "superseded")
    return tuple(plan.id for plan in pending)


def _insert_explicit(session: Session, version_id: int, function: PartitionFunction) -> None:
    entries = sorted(function.explicit.items())
    if entries:
        session.execute(
            insert(models.VersionExplicit),
            [
                {"version_id": version_id, "idx": idx, "channel": channel, **key_columns(key)}
                for idx, (key, channel) in enumerate(entries)
            ],
        )


def _checked_moves(
    plan: NewPlan, region: models.Region, source: models.Version, target: NewVersion
) -> tuple[list[ExplicitMove], list[SlotMove]]:
    expected = sha256_hex(plan.plan_json)
    if plan.digest != expected:
        raise StorageError(f"plan digest must be the SHA-256 of plan_json ({expected}), got {plan.digest!r}")
    for name in ("predicted_cost", "predicted_m"):
        value = getattr(plan, name)
        if value is not None:
            require_number(value, name, 0.0)
    key_type = cast(KeyType, region.key_type)
    return parse_plan_moves(plan.plan_json, key_type, region.slot_bits, source.n_channels, target.n_channels)


def _insert_plan(
    session: Session,
    region_id: int,
    plan: NewPlan,
    moves: tuple[list[ExplicitMove], list[SlotMove]],
    from_version: int,
    to_version: int,
) -> int:
    explicit, slots = moves
    row = models.Plan(
        region_id=region_id,
        from_version=from_version,
        to_version=to_version,
        status="pending",
        predicted_cost=plan.predicted_cost,
        predicted_m=plan.predicted_m,
        explicit_moves=len(explicit),
        slot_moves=len(slots),
        plan_json=plan.plan_json,
        digest=plan.digest,
    )
    session.add(row)
    session.flush()
    rows = move_rows(row.id, explicit, slots)
    if rows:
        session.execute(insert(models.PlanMove), rows)
    return row.id
