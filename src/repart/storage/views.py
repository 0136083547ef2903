"""Stored records as JSON objects: what ``repart … --json`` prints and what the HTTP API answers, in one
shape for both (a region's status, a version, a plan's summary, an event)."""

from __future__ import annotations

from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from repart.partitioning.routing import RoutingFunction
    from repart.partitioning.state_partitions import StatePartitions
    from repart.storage.models import Event, Plan, Region, Version
    from repart.storage.overview import RegionOverview


def timestamp(value: datetime | None) -> str | None:
    """An aware timestamp as ISO-8601 text, None as None."""
    return None if value is None else value.isoformat()


def region_status(overview: RegionOverview) -> dict[str, Any]:
    """The status of one region as a JSON object."""
    region, plan, event = overview.region, overview.open_plan, overview.last_event
    return {
        "region": region.name,
        "mode": region.mode,
        "mode_reason": region.mode_reason,
        "applied_version": region.applied_version,
        "N": region.n_channels_initial if overview.n_channels is None else overview.n_channels,
        "pending_plan": None
        if plan is None
        else {
            "id": plan.id,
            "from_version": plan.from_version,
            "to_version": plan.to_version,
            "status": plan.status,
        },
        "last_event": None
        if event is None
        else {"at": timestamp(event.at), "kind": event.kind, "rule": event.rule, "message": event.message},
        "backoff": None
        if region.tick_failures == 0
        else {
            "tick_failures": region.tick_failures,
            "retry_at": timestamp(region.retry_at),
            "last_error": region.last_error,
        },
    }


def version_dict(row: Version, function: RoutingFunction | StatePartitions) -> dict[str, Any]:
    """A version's metadata as a JSON object; a split function's split keys with their candidates and
    weights (a count of state partitions has no explicit map, slot overrides or split keys)."""
    from repart.partitioning.state_partitions import StatePartitions

    explicit = overrides = 0
    split_keys: list[dict[str, Any]] = []
    if not isinstance(function, StatePartitions):
        explicit, overrides = len(function.home.explicit), len(function.home.slot_overrides)
        split_keys = [
            {"key": key, "candidates": list(entry.candidates), "weights": list(entry.weights)}
            for key, entry in function.split.items()
        ]
    return {
        "version": row.number,
        "N": row.n_channels,
        "status": row.status,
        "digest": row.digest,
        "algorithm": row.algorithm,
        "kind": function.kind,
        "explicit_size": explicit,
        "slot_overrides": overrides,
        "split_keys": split_keys,
        "parent": row.parent_number,
        "created_at": timestamp(row.created_at),
    }


def plan_summary(row: Plan) -> dict[str, Any]:
    """A plan's metadata as a JSON object, what ``repart plans list`` shows and the audit log keeps of
    a pruned plan: its id, versions, status, predicted m and cost, move counts, the rows and bytes a
    job reported moving, its digest, when it was created and updated, and when its moves were pruned
    (None while they are kept)."""
    return {
        "id": row.id,
        "from_version": row.from_version,
        "to_version": row.to_version,
        "status": row.status,
        "predicted_m": row.predicted_m,
        "predicted_cost": row.predicted_cost,
        "explicit_moves": row.explicit_moves,
        "slot_moves": row.slot_moves,
        "moved_rows": row.moved_rows,
        "moved_bytes": row.moved_bytes,
        "digest": row.digest,
        "created_at": timestamp(row.created_at),
        "updated_at": timestamp(row.updated_at),
        "pruned_at": timestamp(row.pruned_at),
    }


def event_dict(row: Event) -> dict[str, Any]:
    """An event as a JSON object, its ``data`` parsed."""
    from repart.storage.jsontext import load_object

    return {
        "id": row.id,
        "kind": row.kind,
        "rule": row.rule,
        "message": row.message,
        "created_at": timestamp(row.at),
        "data": load_object(row.data_json),
    }


def mode_dict(row: Region) -> dict[str, Any]:
    """A region's name, mode and why, as JSON (``repart resume --json``, the API's resume)."""
    return {"region": row.name, "mode": row.mode, "mode_reason": row.mode_reason}
