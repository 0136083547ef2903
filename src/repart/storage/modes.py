"""Region modes: what the controller's tick may do with a region.

``auto``: the tick acts. ``recommend``: it decides as in ``auto`` and records what it would activate
(a ``recommended`` event with the candidate's predicted b and m and its plan's move counts) but activates
nothing: a dry run. ``hold``: it does nothing at all. An operator's ``rollback`` or ``scale`` holds the
region with the operator's reason, so that the next tick does not undo it; ``resume`` returns to the
mode the region had before it was held. Every change of mode is a ``mode-changed`` event.

The mode is part of the region's status (``repart.storage.status``): a tick that read the region before
an operator held it cannot write its decision after.
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy.orm import Session

from repart.errors import InvalidInput
from repart.storage import models
from repart.storage.events import NewEvent, record_event
from repart.storage.regions import region_by_name
from repart.storage.tables import REGION_MODES
from repart.validation import Options, check

OPERATOR_RULE = "operator"


def set_mode(
    session: Session, region: str, mode: str, reason: str | None, *, at: datetime | None = None
) -> models.Region:
    """Put ``region`` in ``mode`` for ``reason`` and record a ``mode-changed`` event.

    Entering ``hold`` remembers the mode to resume (the current one; a held region keeps the one it had
    before). Setting the mode a region already has changes only the reason, and with the same reason
    nothing at all (no event). Raises InvalidInput naming
    ``mode`` for a mode outside ``auto``, ``recommend``, ``hold``; NotFound for an unknown region.
    """
    check("mode", mode, Options(REGION_MODES))
    row = region_by_name(session, region, lock=True)
    before = row.mode
    if mode == before and reason == row.mode_reason:
        return row  # nothing changes, so nothing to record
    if mode == "hold" and before != "hold":
        row.previous_mode = before
    row.mode = mode
    row.mode_reason = reason
    session.flush()
    message = f"mode {before} -> {mode}" + (f": {reason}" if reason else "")
    data = {"from": before, "to": mode, "reason": reason}
    record_event(session, region, NewEvent("mode-changed", OPERATOR_RULE, message, data), at=at)
    return row


def resume(session: Session, region: str, *, at: datetime | None = None) -> models.Region:
    """Return a held ``region`` to the mode it had before it was held (``auto`` if it was created held).

    Raises InvalidInput naming ``mode`` when the region is not held; NotFound for an unknown region.
    """
    row = region_by_name(session, region)
    if row.mode != "hold":
        raise InvalidInput("mode", f"must be 'hold' to resume; region {region!r} is in {row.mode!r}")
    return set_mode(session, region, row.previous_mode or "auto", "resumed by the operator", at=at)
