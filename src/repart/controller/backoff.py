"""Exponential backoff of a region whose ticks fail.

After the k-th failed tick in a row the daemon waits ``min(cap, interval · 2^(k-1))`` before ticking the
region again: one interval after the first failure (the next sweep, as without backoff), two after the
second, four after the third, and so on up to ``cap``. A successful tick or ``repart resume`` ends it.
A ``Conflict`` (a lost lease, a status changed by another writer) is not a failure: the next sweep
retries from the database's state.
"""

from __future__ import annotations

from repart.validation import POSITIVE, check

# Doublings past this would overflow a float; any cap is reached long before.
_MAX_EXPONENT = 1000


def backoff_seconds(failures: int, interval: float, cap: float) -> float:
    """The wait before the next tick after ``failures`` (>= 1) failed ticks in a row: ``interval`` doubled
    per failure after the first, at most ``cap`` seconds."""
    check("interval", interval, POSITIVE)
    check("max_backoff", cap, POSITIVE)
    if failures < 1:
        raise ValueError(f"failures must be at least 1, got {failures}")
    return min(cap, interval * 2.0 ** min(failures - 1, _MAX_EXPONENT))
