"""Errors by what the caller should do about them.

Every error repart raises on purpose is a ``RepartError``. Its class says what to do next, and the CLI
turns it into one line on stderr and the exit code ``exit_code``:

| class | exit | the caller should |
|---|---|---|
| InvalidInput | 2 | fix the named field or option and try again |
| NotFound | 2 | name a region, version, plan or file that exists |
| Conflict | 3 | retry later (a plan being applied, a lease held elsewhere, a write lock) |
| Corrupt | 4 | repair or restore the damaged state or document; retrying cannot help |
| Unavailable | 5 | check the address of a service (an object store endpoint), or retry later |

Anything else that escapes a command is a bug and shows its traceback.

This module and ``repart.validation`` import nothing, so every package may use them (the one
exception to the packages' dependency direction, recorded in docs/DECISIONS.md).
"""

from __future__ import annotations


class RepartError(Exception):
    """Base class of every error repart raises on purpose."""

    exit_code = 1


class InvalidInput(RepartError, ValueError):
    """A value the caller gave is outside what is accepted.

    ``field`` names the parameter, option or document field (``alpha``, ``settings.cooldown``,
    ``snapshot.window.seq``); the message is ``"<field> <requirement>"``, where ``requirement`` says what
    is accepted and what was given. A front end that knows the field under another name (the CLI's
    ``--alpha``) shows ``rename(option)``. It is a ``ValueError`` too, as scikit-learn's parameter errors
    are, so code that guards a conversion with ``except ValueError`` keeps working.
    """

    exit_code = 2

    def __init__(self, field: str, requirement: str) -> None:
        super().__init__(f"{field} {requirement}")
        self.field = field
        self.requirement = requirement

    def rename(self, name: str) -> str:
        """The message with the field shown as ``name``."""
        return f"{name} {self.requirement}"


class NotFound(RepartError, LookupError):
    """A region, version, plan, snapshot or file that does not exist."""

    exit_code = 2


class Conflict(RepartError):
    """The request clashes with the current state (a plan being applied, a lease held elsewhere, a
    record that already exists, a lost compare-and-set, a write lock not granted in time); it may
    succeed later or after the other party finishes."""

    exit_code = 3


class Corrupt(RepartError):
    """Stored state or a document is damaged: a missing or truncated file, a checksum or row count that
    does not match, a commit document or manifest that cannot be read. Never the user's input, never
    retried."""

    exit_code = 4

    def __init__(self, message: str, *, path: str | None = None) -> None:
        super().__init__(message if path is None else f"{path}: {message}")
        self.path = path


class Unavailable(RepartError):
    """A service a command needs did not answer: an object store's endpoint that refuses connections or
    times out. The address may be wrong, or the service down; nothing was written."""

    exit_code = 5
