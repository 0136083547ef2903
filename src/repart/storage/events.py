"""The audit log and batch reports.

An event records what the controller decided, by which rule and with which numbers: ``kind`` (e.g.
``activate``, ``rebalance-skipped``), ``rule`` (the policy or trigger that fired), a human-readable
``message`` and ``data``, a JSON object of the numbers behind the decision. Batch reports are what a
Spark batch reports back (moved rows, timings, checksums), optionally tied to the plan it applied.

``region_events`` and ``batch_reports`` read them back for the CLI (``repart events list``,
``repart batches list``); ``EVENT_KINDS`` lists the kinds repart writes, which ``--kind`` accepts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from types import MappingProxyType
from typing import Any

from sqlalchemy import select
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from repart.errors import Conflict, InvalidInput
from repart.partitioning.documents import require_int
from repart.storage import models, tables
from repart.storage.event_kinds import EVENT_KINDS
from repart.storage.jsontext import dump_object
from repart.storage.region_names import region_id_by_name
from repart.storage.regions import region_by_name
from repart.validation import STORED_INT, STRING, Options, check, shown


@dataclass(frozen=True)
class NewEvent:
    """An event to record: ``kind`` and ``rule`` are short identifiers, ``data`` a JSON object; a bad
    field raises ``InvalidInput`` naming it."""

    kind: str
    rule: str
    message: str
    data: Mapping[str, Any] = field(default_factory=lambda: MappingProxyType({}))

    def __post_init__(self) -> None:
        for name, limit in (("kind", 32), ("rule", 64)):
            value = getattr(self, name)
            if not isinstance(value, str) or not 1 <= len(value) <= limit:
                raise InvalidInput(name, f"must be a string of 1-{limit} characters, got {shown(value)}")
        check("message", self.message, STRING)
        dump_object(self.data, "data")


def record_event(session: Session, region: str | None, event: NewEvent, *, at: datetime | None = None) -> int:
    """Append ``event`` to the audit log (for ``region``, or the whole controller) and return its id."""
    region_id = None if region is None else region_id_by_name(session, region)
    row = models.Event(
        region_id=region_id,
        kind=event.kind,
        rule=event.rule,
        message=event.message,
        data_json=dump_object(event.data, "data"),
    )
    if at is not None:
        row.at = at
    session.add(row)
    session.flush()
    return row.id


def list_events(session: Session, region: str | None = None, *, limit: int = 100) -> list[models.Event]:
    """The newest ``limit`` events (of ``region`` if given), newest first."""
    count = require_int(limit, "limit", 1)
    query = select(models.Event).order_by(models.Event.id.desc()).limit(count)
    if region is not None:
        query = query.where(models.Event.region_id == region_by_name(session, region).id)
    return list(session.scalars(query))


def region_events(
    session: Session, region: str | None, *, kind: str | None = None, since: datetime | None = None
) -> list[models.Event]:
    """The events of ``region``, oldest first (by id, the order they were written in): only those of
    ``kind`` (one of ``EVENT_KINDS``; InvalidInput naming ``kind`` otherwise) and only those at or
    after ``since`` (timezone-aware; InvalidInput naming ``since`` for a naive datetime), if given.
    With ``region`` None, the events of no region: the controller's own (``region-deleted``) and
    those of deleted regions, whose events outlive them."""
    if kind is not None:
        check("kind", kind, Options(EVENT_KINDS))
    if since is not None and (since.tzinfo is None or since.utcoffset() is None):
        raise InvalidInput("since", f"must be a timezone-aware timestamp, got {since.isoformat()}")
    table = models.Event
    owner = None if region is None else region_by_name(session, region).id
    query = select(table).where(table.region_id.is_(None) if owner is None else table.region_id == owner)
    if kind is not None:
        query = query.where(table.kind == kind)
    if since is not None:
        query = query.where(table.at >= since)
    return list(session.scalars(query.order_by(table.id)))


def batch_reports(session: Session, region: str) -> list[models.BatchReport]:
    """What the Spark batches of ``region`` reported, by batch id (one report per batch)."""
    table = models.BatchReport
    region_id = region_by_name(session, region).id
    return list(session.scalars(select(table).where(table.region_id == region_id).order_by(table.batch)))


# A batch report, unless the region has one of its batch: one statement, built once per dialect.
_INSERT_REPORT = {
    name: dialect.insert(tables.batch_reports)
    .on_conflict_do_nothing(index_elements=["region_id", "batch"])
    .returning(tables.batch_reports.c.id)
    for name, dialect in (("postgresql", postgresql), ("sqlite", sqlite))
}


def record_batch_report(
    session: Session, region: str, batch: int, payload: Mapping[str, Any], *, plan_id: int | None = None
) -> int:
    """Store what Spark batch ``batch`` of ``region`` reported and return the report's id; ``plan_id``
    must be a plan of the region (InvalidInput naming ``plan_id`` otherwise). A batch is reported
    once: when the region has a report of ``batch`` already (a job killed after reporting and run again
    on the same batch, or a concurrent retry), that report stays as it is and its id is returned. One
    ``INSERT … ON CONFLICT DO NOTHING``, so a report costs one statement whether or not it is new."""
    number = check("batch", batch, STORED_INT)
    payload_json = dump_object(payload, "payload")
    region_id = region_id_by_name(session, region)
    if plan_id is not None:
        owner = session.scalar(select(models.Plan.region_id).where(models.Plan.id == plan_id))
        if owner != region_id:
            raise InvalidInput("plan_id", f"must be the id of a plan of region {region!r}, got {plan_id}")
    table = tables.batch_reports
    statement = _INSERT_REPORT[session.get_bind().dialect.name]
    row = {"region_id": region_id, "plan_id": plan_id, "batch": number, "payload_json": payload_json}
    inserted = session.scalar(statement, row)
    if inserted is not None:
        return int(inserted)
    first = session.scalar(select(table.c.id).where(table.c.region_id == region_id, table.c.batch == number))
    if first is None:  # the report it conflicted with went with its region, deleted meanwhile
        raise Conflict(f"region {region!r} was deleted while batch {number} was reported; retry")
    return int(first)
