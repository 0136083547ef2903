"""Bearer tokens of the HTTP API: made, listed, revoked and checked.

A token is ``repart_<id>_<secret>``: ``id`` finds its row, and ``secret`` (256 random bits) proves it.
The database keeps only the secret's SHA-256, compared in constant time (``hmac.compare_digest``), so a
copy of the database grants nothing; ``create_token`` returns the whole token once and it cannot be
shown again. A token's scope is one of

- ``job:REGION``: the job calls (``ControllerClient``) of that one region, which the token names by
  its id: the token is deleted with the region, and never acts on a region later made with its name;
- ``read``: the read-only calls (status, versions, plans, events) of every region;
- ``operator``: the read-only calls and the operator's calls.

A token may expire (``expires_at``) and may be revoked; its last use is kept to the minute
(``LAST_USE_RESOLUTION``), so that a busy job does not write its token's row at every call.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Literal

from sqlalchemy import select, update
from sqlalchemy.orm import Session

from repart.errors import InvalidInput, NotFound
from repart.storage import models
from repart.storage.regions import region_by_name
from repart.storage.tables import utc_now
from repart.validation import shown

PREFIX = "repart"
JOB_SCOPE = "job:"
GLOBAL_SCOPES = ("read", "operator")
LAST_USE_RESOLUTION = timedelta(minutes=1)
"""A token's last use is written when the stored one is older than this."""

RefusalReason = Literal["missing", "malformed", "unknown", "wrong-secret", "expired", "revoked"]


@dataclass(frozen=True)
class Refused(Exception):
    """A presented token that grants nothing: ``reason`` says why, ``token_id`` which row it named
    (None when it named none)."""

    reason: RefusalReason
    token_id: int | None = None


@dataclass(frozen=True)
class Grant:
    """What a valid token grants: its id and scope, for a job token its region's id, its expiry and
    its stored last use."""

    token_id: int
    scope: str
    region_id: int | None
    expires_at: datetime | None
    last_used_at: datetime | None

    def use_is_stale(self) -> bool:
        """Whether the token's stored last use is older than ``LAST_USE_RESOLUTION`` (or missing)."""
        return self.last_used_at is None or utc_now() - self.last_used_at >= LAST_USE_RESOLUTION


def check_scope(session: Session, scope: object) -> tuple[str, int | None]:
    """``scope`` if it is ``read``, ``operator`` or ``job:REGION`` of an existing region, with the id of
    that region (None for the others); InvalidInput naming ``scope`` (NotFound for an unknown region)
    otherwise."""
    if isinstance(scope, str) and scope in GLOBAL_SCOPES:
        return scope, None
    if isinstance(scope, str) and scope.startswith(JOB_SCOPE) and len(scope) > len(JOB_SCOPE):
        region = region_by_name(session, scope[len(JOB_SCOPE) :])
        return JOB_SCOPE + region.name, region.id
    raise InvalidInput("scope", f"must be read, operator or job:REGION, got {shown(scope)}")


def create_token(
    session: Session, scope: str, *, expires_at: datetime | None = None
) -> tuple[str, models.ApiToken]:
    """A new token of ``scope`` (checked by ``check_scope``) valid until ``expires_at`` (None: until
    revoked; else an aware time in the future): the token's text, shown once, and its row."""
    checked, region_id = check_scope(session, scope)
    now = utc_now()
    if expires_at is not None and (expires_at.tzinfo is None or expires_at <= now):
        raise InvalidInput("expires", f"must be an aware time in the future, got {expires_at.isoformat()}")
    secret = secrets.token_urlsafe(32)
    row = models.ApiToken(
        secret_sha256=_digest(secret),
        scope=checked,
        region_id=region_id,
        created_at=now,
        expires_at=expires_at,
    )
    session.add(row)
    session.flush()
    return f"{PREFIX}_{row.id}_{secret}", row


def list_tokens(session: Session) -> list[models.ApiToken]:
    """Every token's row (never its secret), oldest first."""
    return list(session.scalars(select(models.ApiToken).order_by(models.ApiToken.id)))


def revoke_token(session: Session, token_id: int) -> models.ApiToken:
    """Revoke token ``token_id`` from now on (a token already revoked keeps its first revocation); a
    running API server that kept its grant refuses it within its ``token_cache_seconds``. NotFound for
    an unknown id."""
    row = session.get(models.ApiToken, token_id)
    if row is None:
        raise NotFound(f"token {token_id} does not exist; `repart token list` shows the tokens")
    if row.revoked_at is None:
        row.revoked_at = utc_now()
        session.flush()
    return row


def authenticate(session: Session, presented: str | None) -> Grant:
    """What the token text ``presented`` grants now; ``Refused`` saying why it grants nothing. Writes
    nothing: a granted call records its use with ``record_use``."""
    if not presented:
        raise Refused("missing")
    parts = token_parts(presented)
    if parts is None:
        raise Refused("malformed")
    token_id, secret = parts
    row = session.get(models.ApiToken, token_id)
    if row is None:
        raise Refused("unknown", token_id)
    if not hmac.compare_digest(_digest(secret), row.secret_sha256):
        raise Refused("wrong-secret", token_id)
    now = utc_now()
    if row.revoked_at is not None:
        raise Refused("revoked", token_id)
    if row.expires_at is not None and row.expires_at <= now:
        raise Refused("expired", token_id)
    return Grant(token_id, row.scope, row.region_id, row.expires_at, row.last_used_at)


def token_parts(presented: str | None) -> tuple[int, str] | None:
    """The id and the secret of token text ``presented`` (``repart_<id>_<secret>``); None when it is
    not of that form."""
    parts = (presented or "").split("_", 2)
    if len(parts) != 3 or parts[0] != PREFIX or not parts[1].isdigit() or len(parts[1]) > 18:
        return None
    return int(parts[1]), parts[2]


def record_use(session: Session, grant: Grant) -> datetime:
    """Write that ``grant``'s token was used now (a granted call, once it succeeded); returns the time
    written."""
    now = utc_now()
    session.execute(
        update(models.ApiToken)
        .where(models.ApiToken.id == grant.token_id)
        .values(last_used_at=now)
        .execution_options(synchronize_session=False)
    )
    return now


def _digest(secret: str) -> str:
    return hashlib.sha256(secret.encode()).hexdigest()
