"""Storage errors that do not yet name their field (DESIGN §12.4 migration in progress).

``StorageError`` and ``SnapshotError`` are ``InvalidInput``-like errors whose message names the field
in its text; they are being replaced by ``repart.errors.InvalidInput(field, requirement)``.
"""

from __future__ import annotations

from repart.errors import ReparError


class StorageError(ReparError, ValueError):
    """Bad input to the storage layer, named in the message (exit code 2)."""

    exit_code = 2


class SnapshotError(StorageError):
    """A snapshot document is malformed or does not fit its region (DESIGN §3)."""
