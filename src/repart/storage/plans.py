"""Plans: migrations between two versions, their moves and their status (DESIGN §6, §7).

A plan's JSON comes from ``repart.migration`` as canonical text with its SHA-256 digest; storage reads
only its moves, ``"explicit": [[key, source, target, weight], ...]`` and ``"slots": [[first_slot,
last_slot, source, target], ...]``, into ``plan_moves`` rows. A plan's status moves

    pending → applying → applied | failed,    pending → superseded

(a new plan supersedes a pending one that no job has started, DESIGN §8). When a plan is applied its
target version becomes ``applied`` and the previously applied version ``superseded``; when it fails or
is superseded its target version is ``abandoned``. Illegal changes raise TransitionError naming both
states.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from repart.partitioning.hashing import Key, KeyType
from repart.storage import models
from repart.storage.checks import require_int, require_key, require_list, require_number, require_tuple
from repart.storage.errors import NotFoundError, StorageError, TransitionError
from repart.storage.keys import key_columns
from repart.storage.regions import region_by_name
from repart.storage.versions import transition_version

PLAN_TRANSITIONS: dict[str, frozenset[str]] = {
    "pending": frozenset({"applying", "superseded"}),
    "applying": frozenset({"applied", "failed"}),
    "applied": frozenset(),
    "failed": frozenset(),
    "superseded": frozenset(),
}
# What a plan's status change does to its target version.
_TARGET_STATUS = {"applied": "applied", "failed": "abandoned", "superseded": "abandoned"}


@dataclass(frozen=True)
class ExplicitMove:
    """An explicit key moving from ``source`` to ``target``; ``weight`` is its predicted state."""

    key: Key
    source: int
    target: int
    weight: float


@dataclass(frozen=True)
class SlotMove:
    """The untracked keys of slots ``first_slot..last_slot`` (inclusive) moving ``source`` → ``target``."""

    first_slot: int
    last_slot: int
    source: int
    target: int


def sha256_hex(text: str) -> str:
    """SHA-256 (hex) of ``text``'s UTF-8 bytes: the digest of a stored function or plan (DESIGN §2)."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def parse_plan_moves(
    plan_json: str, key_type: KeyType, slot_bits: int, source_channels: int, target_channels: int
) -> tuple[list[ExplicitMove], list[SlotMove]]:
    """The moves of a plan document; StorageError naming the field for anything malformed.

    Sources must be channels of the old version (``< source_channels``), targets channels of the new
    one (``< target_channels``), and they must differ; slot ranges lie in ``[0, 2**slot_bits)``.
    """
    try:
        document = json.loads(plan_json)
    except json.JSONDecodeError as error:
        raise StorageError(f"plan_json is not valid JSON: {error}") from None
    if not isinstance(document, dict) or "explicit" not in document or "slots" not in document:
        raise StorageError("plan_json must be a JSON object with the fields 'explicit' and 'slots'")
    explicit = []
    for i, row in enumerate(require_list(document["explicit"], "plan explicit")):
        name = f"plan explicit[{i}]"
        raw_key, raw_source, raw_target, raw_weight = require_tuple(row, name, 4)
        source, target = _channels(name, raw_source, raw_target, source_channels, target_channels)
        explicit.append(
            ExplicitMove(
                key=require_key(raw_key, f"{name} key", key_type),
                source=source,
                target=target,
                weight=require_number(raw_weight, f"{name} weight", 0.0),
            )
        )
    slots = []
    high = (1 << slot_bits) - 1
    for i, row in enumerate(require_list(document["slots"], "plan slots")):
        name = f"plan slots[{i}]"
        raw_first, raw_last, raw_source, raw_target = require_tuple(row, name, 4)
        first = require_int(raw_first, f"{name} first slot", 0, high)
        last = require_int(raw_last, f"{name} last slot", first, high)
        source, target = _channels(name, raw_source, raw_target, source_channels, target_channels)
        slots.append(SlotMove(first, last, source, target))
    return explicit, slots


def _channels(
    name: str, source: Any, target: Any, source_channels: int, target_channels: int
) -> tuple[int, int]:
    checked_source = require_int(source, f"{name} source", 0, source_channels - 1)
    checked_target = require_int(target, f"{name} target", 0, target_channels - 1)
    if checked_source == checked_target:
        raise StorageError(
            f"{name} moves from channel {checked_source} to itself; source and target must differ"
        )
    return checked_source, checked_target


def move_rows(plan_id: int, explicit: list[ExplicitMove], slots: list[SlotMove]) -> list[dict[str, Any]]:
    """``plan_moves`` rows for a plan's moves: explicit moves first, then slot moves, in plan order."""
    rows: list[dict[str, Any]] = [
        {"kind": "explicit", "source": m.source, "target": m.target, "weight": m.weight, **key_columns(m.key)}
        for m in explicit
    ]
    rows.extend(
        {
            "kind": "slots",
            "first_slot": m.first_slot,
            "last_slot": m.last_slot,
            "source": m.source,
            "target": m.target,
        }
        for m in slots
    )
    for idx, row in enumerate(rows):
        row.update(plan_id=plan_id, idx=idx)
    return rows


def set_plan_status(
    session: Session,
    plan_id: int,
    status: str,
    *,
    moved_rows: int | None = None,
    moved_bytes: int | None = None,
) -> models.Plan:
    """Move a plan to ``status`` and its versions along (see the module doc).

    ``moved_rows`` and ``moved_bytes`` (what a job reports having moved) are recorded with ``applied``
    only. The plan row is locked (``SELECT … FOR UPDATE`` on PostgreSQL) so two jobs cannot both
    start it.
    """
    plan = session.scalar(select(models.Plan).where(models.Plan.id == plan_id).with_for_update())
    if plan is None:
        raise NotFoundError(f"plan {plan_id} does not exist")
    if (moved_rows is not None or moved_bytes is not None) and status != "applied":
        raise StorageError(f"moved_rows and moved_bytes are recorded when a plan is applied, not {status!r}")
    rows = None if moved_rows is None else require_int(moved_rows, "moved_rows")
    size = None if moved_bytes is None else require_int(moved_bytes, "moved_bytes")
    with session.begin_nested():
        transition_plan(session, plan, status)
        if rows is not None:
            plan.moved_rows = rows
        if size is not None:
            plan.moved_bytes = size
    return plan


def transition_plan(session: Session, plan: models.Plan, status: str) -> None:
    """Move ``plan`` to ``status`` and its versions along; TransitionError naming both states if the
    change is not allowed."""
    if status not in PLAN_TRANSITIONS:
        raise StorageError(f"status must be one of {', '.join(PLAN_TRANSITIONS)}, got {status!r}")
    allowed = PLAN_TRANSITIONS[plan.status]
    if status not in allowed:
        raise TransitionError(
            f"plan {plan.id} cannot go from {plan.status!r} to {status!r}; "
            f"allowed from {plan.status!r}: {', '.join(sorted(allowed)) or '(none)'}"
        )
    if status in _TARGET_STATUS:
        _move_versions(session, plan, status)
    plan.status = status
    session.flush()


def _move_versions(session: Session, plan: models.Plan, status: str) -> None:
    versions = {
        v.number: v
        for v in session.scalars(
            select(models.Version).where(
                models.Version.region_id == plan.region_id,
                (models.Version.number == plan.to_version) | (models.Version.status == "applied"),
            )
        )
    }
    if status == "applied":
        for previous in [v for v in versions.values() if v.status == "applied"]:
            transition_version(previous, "superseded")
    transition_version(versions[plan.to_version], _TARGET_STATUS[status])


def get_plan(session: Session, plan_id: int) -> models.Plan:
    """Plan ``plan_id`` with its moves; NotFoundError if it does not exist."""
    plan = session.scalar(
        select(models.Plan).where(models.Plan.id == plan_id).options(selectinload(models.Plan.moves))
    )
    if plan is None:
        raise NotFoundError(f"plan {plan_id} does not exist")
    return plan


def list_plans(session: Session, region: str, status: str | None = None) -> list[models.Plan]:
    """The plans of ``region`` (only those with ``status`` if given), oldest first."""
    region_id = region_by_name(session, region).id
    query = select(models.Plan).where(models.Plan.region_id == region_id)
    if status is not None:
        query = query.where(models.Plan.status == status)
    return list(session.scalars(query.order_by(models.Plan.id)))
