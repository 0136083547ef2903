"""Errors of the job side (DESIGN §10).

Both are ``ValueError``s, so the CLI prints them without a traceback and exits with code 2. Each
message names the column, field or file at fault and what is accepted; the operation that raised wrote
nothing that a reader could see.
"""

from __future__ import annotations


class JobInputError(ValueError):
    """A DataFrame, key column or version that a job cannot use as given."""
