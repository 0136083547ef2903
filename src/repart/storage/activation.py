"""Activation: a new version, its plan and the event that explains them, in one transaction.

``activate`` is the unit of work of the controller's Activate step. It checks everything first (the
function is canonical and matches its digest and fits the region; the plan, a
``repart.migration.MigrationPlan``, goes from the applied version's function to the new one), then
writes inside a SAVEPOINT: the region's status compared and set
(``repart.storage.status``), pending plans superseded (their versions abandoned), the version with its
explicit entries, the plan with its moves, and the event. Any failure leaves none of it behind, even if
the caller goes on to commit its transaction.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from sqlalchemy import func, insert, select
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session

from repart.errors import Conflict, InvalidInput, NotFound
from repart.migration import MigrationPlan
from repart.partitioning.algorithms.builder import check_algorithm
from repart.partitioning.domain import SPLIT_SCHEMES
from repart.partitioning.function import PartitionFunction
from repart.partitioning.routing import RoutingFunction
from repart.partitioning.state_partitions import StatePartitions, load_version_function
from repart.storage import models
from repart.storage.events import NewEvent
from repart.storage.jsontext import dump_object
from repart.storage.keys import key_columns
from repart.storage.plans import move_rows, transition_plan
from repart.storage.regions import region_by_name
from repart.storage.status import RegionStatus, check_status, compare_and_set_status
from repart.storage.tables import utc_now
from repart.validation import STRING, Interval, Options, check, shown


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
class Activation:
    """What ``activate`` wrote: the version, the plan (None for a region's first version), the event,
    and the pending plans it superseded."""

    version_number: int
    version_id: int
    plan_id: int | None
    event_id: int
    superseded_plans: tuple[int, ...]


def activate(
    session: Session,
    region: str,
    version: NewVersion,
    plan: MigrationPlan | str | None,
    event: NewEvent,
    *,
    expected: RegionStatus | None = None,
    considered_seq: int | None = None,
    at: datetime | None = None,
) -> Activation:
    """Store ``version`` as the region's next version, with ``plan`` and ``event``, atomically.

    The region's first version is activated without a plan and is ``applied`` at once (there is no
    state to move yet). Every later version needs a plan from the currently applied version to it: a
    ``MigrationPlan`` (as ``repart.migration.plan_migration`` builds it) or its JSON text, whose
    ``source_digest`` is the applied version's digest, ``target_digest`` the new version's, and whose
    key type, slot bits and channel counts are theirs. The version is ``planned`` and its plan
    ``pending`` until a job applies it, and pending plans of the region are superseded. Activation is
    refused while a plan is being applied (Conflict). The event's data is stored with
    ``activated_version``, ``plan_id`` and ``superseded_plans`` added. Concurrent activations of one
    region are serialized by locking the region row (PostgreSQL) or the database (SQLite).

    The region's status moves along by compare-and-set (``compare_and_set_status``): from
    ``expected`` (a status read earlier, say by the tick that decided this activation; default: the
    status read here, under the lock) to the new version as the latest, as the applied one too when it
    is the first, ``considered_seq`` as the newest window considered (default: unchanged), and ``at``
    (default: now; also the version's and the event's time) as the last change when N differs from the
    parent version's. A status that is no longer ``expected`` is a Conflict, and nothing is written.
    It is checked before the version and the plan, so a plan from a version that is no longer the
    applied one (a job applied a pending plan meanwhile) is a Conflict too, not an InvalidInput.

    A version or plan that does not fit raises ``InvalidInput`` naming the field: ``function_json``,
    ``digest``, ``n_channels``, ``algorithm`` or ``report`` of ``version``, ``plan`` (missing, not
    wanted, of the wrong type or not from the applied version to the new one) or ``plan_json`` (plan
    text that is not a migration plan).
    """
    row = region_by_name(session, region, lock=True)
    moment = utc_now() if at is None else at
    current = RegionStatus.of(row)
    if expected is not None:
        # Before the plan is checked: a plan from a version no longer applied is a stale decision.
        check_status(region, expected, current)
    function = _checked_function(version, row)
    if function.kind == "split":
        check("algorithm", version.algorithm, SPLIT_ALGORITHMS)
    elif function.kind == "state-partitions":
        check("algorithm", version.algorithm, STATE_ALGORITHMS)
    else:
        check_algorithm(version.algorithm)
    report_json = dump_object(version.report, "report")
    parent = None if version.parent_number is None else _version(session, row.id, version.parent_number)
    if version.parent_number is not None and parent is None:
        raise NotFound(f"parent_number: region {region!r} has no version {version.parent_number}")
    applied = session.scalar(
        select(models.Version).where(models.Version.region_id == row.id, models.Version.status == "applied")
    )
    _check_not_applying(session, row)
    if plan is None and applied is not None:
        raise InvalidInput(
            "plan",
            f"is required: region {region!r} has applied version {applied.number}, so a new version "
            "needs a plan from it; got None",
        )
    if plan is not None and applied is None:
        raise InvalidInput(
            "plan",
            f"must be None: region {region!r} has no applied version, and its first version is "
            f"activated without a plan; got {shown(plan)}",
        )
    checked_plan = None if plan is None or applied is None else _checked_plan(plan, row, applied, function)
    latest = session.scalar(select(func.max(models.Version.number)).where(models.Version.region_id == row.id))
    number = (latest or 0) + 1
    status = RegionStatus(
        applied_version=number if plan is None else current.applied_version,
        latest_version=number,
        considered_seq=current.considered_seq if considered_seq is None else considered_seq,
        last_change_at=moment
        if parent is not None and parent.n_channels != version.n_channels
        else current.last_change_at,
        mode=current.mode,
    )
    try:
        with session.begin_nested():
            compare_and_set_status(session, region, row.id, expected or current, status)
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
                created_at=moment,
            )
            session.add(version_row)
            session.flush()
            if not isinstance(function, StatePartitions):
                _insert_explicit(session, version_row.id, function.home)
            plan_id = None
            if checked_plan is not None and applied is not None:
                plan_id = _insert_plan(session, row.id, checked_plan, applied.number, number)
            event_row = models.Event(
                region_id=row.id,
                at=moment,
                kind=event.kind,
                rule=event.rule,
                message=event.message,
                data_json=dump_object(
                    {
                        **event.data,
                        "activated_version": number,
                        "plan_id": plan_id,
                        "superseded_plans": list(superseded),
                    },
                    "data",
                ),
            )
            session.add(event_row)
            session.flush()
    except IntegrityError as error:
        raise Conflict(
            f"activation of region {region!r} conflicts with a stored record: {error.orig}"
        ) from None
    return Activation(number, version_row.id, plan_id, event_row.id, superseded)


#: The algorithm of a split version: the scheme that chose its split keys' candidates.
SPLIT_ALGORITHMS = Options(tuple(f"split-{scheme}" for scheme in SPLIT_SCHEMES))
#: The algorithm of a spark-state region's version: the initial count, the skew-aware choice of a
#: count, or an operator's count.
STATE_ALGORITHMS = Options(("initial", "skew-aware", "operator"))


def _checked_function(version: NewVersion, region: models.Region) -> RoutingFunction | StatePartitions:
    """The function of ``version`` if its JSON is canonical, matches the version's digest and N, and
    fits the region (its engine, channel bounds, key type, slot bits; a split function only in split
    mode)."""
    text = check("function_json", version.function_json, STRING)
    try:
        function = load_version_function(text)
    except ValueError as error:
        raise InvalidInput("function_json", f"must be a partition function's JSON: {error}") from None
    if function.to_json() != text:
        raise InvalidInput(
            "function_json",
            f"must be canonical JSON (as the function's to_json() writes it), got {shown(text)}",
        )
    if isinstance(function, StatePartitions) != (region.engine == "spark-state"):
        wanted = "a count of state partitions" if region.engine == "spark-state" else "a partition function"
        raise InvalidInput(
            "function_json",
            f"must be {wanted}: region {region.name!r} has engine {region.engine!r}, got a "
            f"{function.kind!r} function",
        )
    if function.kind == "split" and region.split_scheme is None:
        raise InvalidInput(
            "function_json",
            f"must be key-preserving: region {region.name!r} is not in split mode, got a split function",
        )
    if version.digest != function.digest:
        raise InvalidInput(
            "digest", f"must be the SHA-256 of function_json ({function.digest}), got {shown(version.digest)}"
        )
    if version.n_channels != function.n_channels:
        raise InvalidInput(
            "n_channels", f"must be the function's N ({function.n_channels}), got {shown(version.n_channels)}"
        )
    bounds = Interval(int, region.min_channels, region.max_channels)
    if not bounds.accepts(function.n_channels):
        raise InvalidInput(
            "n_channels", f"must be {bounds} (the region's channel bounds), got {function.n_channels}"
        )
    if function.key_type not in (None, region.key_type):
        raise InvalidInput(
            "function_json",
            f"must be a function of the region's key_type {region.key_type!r} (or of none), "
            f"got key_type {function.key_type!r}",
        )
    if not isinstance(function, StatePartitions) and function.slot_bits != region.slot_bits:
        raise InvalidInput(
            "function_json",
            f"must be a function of the region's slot_bits {region.slot_bits}, "
            f"got slot_bits {function.slot_bits}",
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
        raise Conflict(
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


def _checked_plan(
    plan: MigrationPlan | str,
    region: models.Region,
    applied: models.Version,
    target: RoutingFunction | StatePartitions,
) -> MigrationPlan:
    """``plan`` (parsed if it is JSON text) if it goes from the applied version to ``target``."""
    if isinstance(plan, str):
        try:
            plan = MigrationPlan.from_json(plan)
        except ValueError as error:
            raise InvalidInput("plan_json", f"must be a migration plan's JSON: {error}") from None
    if not isinstance(plan, MigrationPlan):
        raise InvalidInput(
            "plan",
            f"must be a MigrationPlan or its JSON text, got {shown(plan)} of type {type(plan).__name__}",
        )
    expected = (
        ("key_type", (region.key_type, None), "the region's key type, or None"),
        ("slot_bits", (region.slot_bits,), "the region's slot bits"),
        ("source_n_channels", (applied.n_channels,), f"N of the applied version {applied.number}"),
        ("target_n_channels", (target.n_channels,), "N of the new version"),
        ("source_digest", (applied.digest,), f"the digest of the applied version {applied.number}"),
        ("target_digest", (target.digest,), "the digest of the new version"),
    )
    for name, accepted, what in expected:
        value = getattr(plan, name)
        if value not in accepted:
            raise InvalidInput(
                "plan",
                f"must go from the applied version to the new one: its {name} must be {accepted[0]!r} "
                f"({what}), got {value!r}",
            )
    return plan


def _insert_plan(
    session: Session, region_id: int, plan: MigrationPlan, from_version: int, to_version: int
) -> int:
    row = models.Plan(
        region_id=region_id,
        from_version=from_version,
        to_version=to_version,
        status="pending",
        predicted_cost=plan.cost,
        predicted_m=plan.m,
        explicit_moves=len(plan.explicit_moves),
        slot_moves=len(plan.slot_moves),
        plan_json=plan.to_json(),
        digest=plan.digest,
    )
    session.add(row)
    session.flush()
    rows = move_rows(row.id, plan)
    if rows:
        session.execute(insert(models.PlanMove), rows)
    return row.id
