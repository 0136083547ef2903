"""Errors raised by the storage layer (DESIGN §10).

Every error is a ``ValueError``: bad input that the CLI prints without a traceback (exit code 2). Each
message names the field or record and the accepted values. Nothing half-written remains when one is
raised: the operation that raised it wrote nothing.
"""

from __future__ import annotations


class StorageError(ValueError):
    """Base class of every storage error."""


class SnapshotError(StorageError):
    """A snapshot document is malformed or does not fit its region (DESIGN §3)."""


class NotFoundError(StorageError):
    """A region, version or plan that does not exist."""


class ConflictError(StorageError):
    """A record that clashes with one already stored (duplicate name, window or version number)."""


class TransitionError(StorageError):
    """A status change that the life cycle of a plan or version does not allow (DESIGN §7)."""


class ImmutableVersionError(StorageError):
    """An attempt to change the content of a version, which is immutable once written (DESIGN §7)."""
