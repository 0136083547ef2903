"""``GrantCache``: the grants of recently checked tokens, kept in the API's process for a few seconds.

Checking a token against the database costs a transaction, which at a job's few calls a second was the
largest part of a call. A token that the database granted is kept here, by its id with its secret's
SHA-256, for ``seconds`` (``DEFAULT_SECONDS``); a call presenting it again within that time is admitted
without reading the database:

- the secret is compared with the kept hash in constant time (``hmac.compare_digest``), and a
  mismatch goes to the database, which refuses and audits it;
- the expiry is checked at every call against the kept ``expires_at``, so an expired token is refused
  at once;
- a revocation reaches the calls of a process at most ``seconds`` after it committed: that is the
  bound of the cache (0 turns it off: every call reads the token);
- nothing refused is kept, so every refusal is decided, and audited, by the database;
- a job token's region is kept by name and checked against the region's id in the call's own
  transaction, so a token whose region was deleted (the token with it) grants nothing on a new region
  of the same name, cached or not.

Each server process has its own cache; the bound holds for each.
"""

from __future__ import annotations

import hashlib
import hmac
import threading
import time
from dataclasses import dataclass, replace
from datetime import datetime

from repart.storage.tokens import Grant, token_parts
from repart.validation import Interval, check

DEFAULT_SECONDS = 10.0
"""How long a grant is kept: a revoked token is refused at most this long after its revocation."""
MAX_SECONDS = Interval(float, 0, 3600)
"""The accepted keeping times: up to an hour, so that a revocation always takes effect."""


@dataclass(frozen=True)
class _Kept:
    digest: str
    grant: Grant
    until: float  # time.monotonic() after which the database is asked again


class GrantCache:
    """Grants of tokens the database accepted, each kept ``seconds`` (module docstring); thread-safe."""

    def __init__(self, seconds: float = DEFAULT_SECONDS) -> None:
        self.seconds = check("token_cache_seconds", seconds, MAX_SECONDS)
        self._kept: dict[int, _Kept] = {}
        self._lock = threading.Lock()

    def get(self, presented: str | None, now: datetime) -> Grant | None:
        """The kept grant of token text ``presented`` if it is kept, unexpired at ``now`` and its secret
        matches; None otherwise (the database decides)."""
        parts = token_parts(presented)
        if parts is None:
            return None
        token_id, secret = parts
        kept = self._kept.get(token_id)
        if kept is None or time.monotonic() >= kept.until:
            return None
        if not hmac.compare_digest(hashlib.sha256(secret.encode()).hexdigest(), kept.digest):
            return None
        expires_at = kept.grant.expires_at
        if expires_at is not None and expires_at <= now:
            return None
        return kept.grant

    def keep(self, presented: str, grant: Grant, read_at: float) -> None:
        """Keep ``grant``, which the database gave token text ``presented`` in a transaction that began
        at ``read_at`` (``time.monotonic()``), until ``seconds`` after that moment: a revocation
        committed after the read is honoured within ``seconds`` of it, however long the call took."""
        parts = token_parts(presented)
        if parts is None or self.seconds == 0:
            return
        digest = hashlib.sha256(parts[1].encode()).hexdigest()
        with self._lock:
            self._kept[grant.token_id] = _Kept(digest, grant, read_at + self.seconds)

    def used(self, grant: Grant, at: datetime) -> None:
        """Note that ``grant``'s last use was written at ``at``, so that the kept grant does not ask
        for it to be written again within ``LAST_USE_RESOLUTION``."""
        with self._lock:
            kept = self._kept.get(grant.token_id)
            if kept is not None:
                self._kept[grant.token_id] = replace(kept, grant=replace(kept.grant, last_used_at=at))

    def forget(self, token_id: int) -> None:
        """Drop token ``token_id``'s grant (the next call presenting it asks the database)."""
        with self._lock:
            self._kept.pop(token_id, None)
