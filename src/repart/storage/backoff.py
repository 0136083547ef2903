"""A region's failed ticks in a row, stored on its row so that every daemon and ``repart status`` see
them: ``tick_failures``, ``retry_at`` (when the daemon ticks it again) and ``last_error``.

The daemon and ``repart run --once`` record a failure with the retry time the backoff chose
(``repart.controller.backoff``); every successful tick clears them in its own transaction, whatever ran
it (the daemon, ``repart run --once``, ``repart tick``), and ``repart resume`` clears them too.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, cast

from sqlalchemy import CursorResult, update
from sqlalchemy.orm import Session

from repart.storage import models

#: The longest failure message kept on a region row.
MAX_ERROR_CHARS = 2000


def record_failure(session: Session, region_id: int, error: str, retry_at: datetime) -> None:
    """Count one more failed tick of region ``region_id``, keep ``error`` (cut to ``MAX_ERROR_CHARS``)
    and make ``retry_at`` its next tick's time."""
    table = models.Region
    session.execute(
        update(table)
        .where(table.id == region_id)
        .values(
            tick_failures=table.tick_failures + 1,
            retry_at=retry_at,
            last_error=error[:MAX_ERROR_CHARS],
            updated_at=table.updated_at,
        )
        .execution_options(synchronize_session=False)
    )


def clear_backoff(session: Session, region_id: int) -> bool:
    """End region ``region_id``'s backoff: no failure counted, no retry time, no error; its
    ``updated_at`` stays (its configuration did not change). Whether it was backing off."""
    table = models.Region
    cleared = session.execute(
        update(table)
        .where(table.id == region_id, table.tick_failures > 0)
        .values(tick_failures=0, retry_at=None, last_error=None, updated_at=table.updated_at)
        .execution_options(synchronize_session=False)
    )
    return bool(cast(CursorResult[Any], cleared).rowcount)
