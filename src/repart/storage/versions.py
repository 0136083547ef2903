"""Versions: the stored partition functions of a region and their status.

A version is immutable once written (the ORM refuses content changes, see ``models``); only its status
moves, along ``planned → applied → superseded`` or ``planned → abandoned``. ``applied`` marks the
layout the region's state is in now: at most one version per region has it. Status changes follow the
plans (``repart.storage.plans``); this module holds the transition rule and the queries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from sqlalchemy import select
from sqlalchemy.orm import Session, selectinload

from repart.errors import Conflict, NotFound
from repart.storage import models
from repart.storage.regions import region_by_name

if TYPE_CHECKING:
    from repart.partitioning.routing import RoutingFunction
    from repart.partitioning.state_partitions import StatePartitions

VERSION_TRANSITIONS: dict[str, frozenset[str]] = {
    "planned": frozenset({"applied", "abandoned"}),
    "applied": frozenset({"superseded"}),
    "superseded": frozenset(),
    "abandoned": frozenset(),
}


def transition_version(version: models.Version, status: str) -> None:
    """Move ``version`` to ``status``; Conflict naming both states if that is not allowed."""
    allowed = VERSION_TRANSITIONS.get(version.status, frozenset())
    if status not in allowed:
        raise Conflict(
            f"version {version.number} cannot go from {version.status!r} to {status!r}; "
            f"allowed from {version.status!r}: {', '.join(sorted(allowed)) or '(none)'}"
        )
    version.status = status


def get_version(session: Session, region: str, number: int) -> models.Version:
    """Version ``number`` of ``region`` with its explicit entries; NotFound if it does not exist."""
    region_id = region_by_name(session, region).id
    row = session.scalar(
        select(models.Version)
        .where(models.Version.region_id == region_id, models.Version.number == number)
        .options(selectinload(models.Version.explicit))
    )
    if row is None:
        raise NotFound(f"region {region!r} has no version {number}")
    return row


def applied_version(session: Session, region: str) -> models.Version | None:
    """The version whose layout the region's state is in (status ``applied``); None before the first."""
    region_id = region_by_name(session, region).id
    return session.scalar(
        select(models.Version).where(
            models.Version.region_id == region_id, models.Version.status == "applied"
        )
    )


def list_versions(session: Session, region: str) -> list[models.Version]:
    """All versions of ``region``, oldest first."""
    region_id = region_by_name(session, region).id
    query = (
        select(models.Version).where(models.Version.region_id == region_id).order_by(models.Version.number)
    )
    return list(session.scalars(query))


def stored_function(version: models.Version) -> RoutingFunction | StatePartitions:
    """The function a version stores, of any kind: a ``StatePartitions`` in a ``spark-state`` region,
    else as ``version_function``."""
    from repart.partitioning.state_partitions import load_version_function

    return load_version_function(version.function_json)


def version_function(version: models.Version) -> RoutingFunction:
    """The function a version stores: a ``PartitionFunction``, or a ``SplitFunction`` in split mode."""
    from repart.partitioning.split.function import load_function

    return load_function(version.function_json)
