"""``repart token create|list|revoke``: the HTTP API's bearer tokens.

``create`` prints the token once: the database keeps only its secret's SHA-256, so it cannot be shown
again (a lost token is revoked and another made). ``--expires`` takes a duration: a number and a unit,
``s``, ``m``, ``h`` or ``d`` (``30d``, ``12h``).
"""

from __future__ import annotations

import re
from datetime import timedelta
from typing import TYPE_CHECKING, Annotated, Any

import typer

from repart.cli.database import DbOption, JsonOption, console, print_json, query, read_query, timestamp
from repart.cli.errors import reports_bad_input
from repart.errors import InvalidInput

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

    from repart.storage.models import ApiToken

token_app = typer.Typer(no_args_is_help=True, help="Make, list and revoke the HTTP API's bearer tokens.")

_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}


def duration(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m`` or ``45s`` as a duration; InvalidInput naming ``--expires`` otherwise."""
    match = re.fullmatch(r"([1-9][0-9]{0,5})([smhd])", text.strip())
    if match is None:
        raise InvalidInput(
            "--expires", f"must be a positive number and a unit s, m, h or d (30d), got {text!r}"
        )
    return timedelta(**{_UNITS[match.group(2)]: int(match.group(1))})


def token_dict(row: ApiToken) -> dict[str, Any]:
    """A token's row as a JSON object (never its secret)."""
    return {
        "id": row.id,
        "scope": row.scope,
        "created_at": timestamp(row.created_at),
        "expires_at": timestamp(row.expires_at),
        "last_used_at": timestamp(row.last_used_at),
        "revoked_at": timestamp(row.revoked_at),
    }


@token_app.command("create")
@reports_bad_input
def create(
    scope: Annotated[
        str,
        typer.Option(
            help="job:REGION (a job's calls for one region), read (every region's status, versions, "
            "plans, events) or operator (read and the operator's calls)."
        ),
    ],
    expires: Annotated[
        str | None, typer.Option(help="Lifetime: a number and s, m, h or d (30d); default: until revoked.")
    ] = None,
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Make a token and print it once (the database keeps only its hash)."""
    from repart.storage.tables import utc_now
    from repart.storage.tokens import create_token

    lifetime = None if expires is None else duration(expires)

    def work(session: Session) -> tuple[str, dict[str, Any]]:
        text, made = create_token(
            session, scope, expires_at=None if lifetime is None else utc_now() + lifetime
        )
        return text, token_dict(made)

    text, row = query(db, work)
    if as_json:
        print_json({"token": text, **row})
    else:
        typer.echo(text)
        typer.echo(f"token {row['id']}, scope {row['scope']}; shown once: store it now", err=True)


@token_app.command("list")
@reports_bad_input
def list_(db: DbOption = None, as_json: JsonOption = False) -> None:
    """List the tokens: id, scope, creation, expiry, last use (to the minute) and revocation."""
    from repart.storage.tokens import list_tokens

    rows = read_query(db, lambda session: [token_dict(row) for row in list_tokens(session)])
    if as_json:
        print_json(rows)
        return
    from rich.table import Table

    table = Table("id", "scope", "created", "expires", "last used", "revoked")
    for row in rows:
        table.add_row(
            str(row["id"]),
            row["scope"],
            row["created_at"],
            row["expires_at"] or "-",
            row["last_used_at"] or "-",
            row["revoked_at"] or "-",
        )
    console().print(table)


@token_app.command("revoke")
@reports_bad_input
def revoke(
    token_id: Annotated[int, typer.Argument(help="The token's id (repart token list).")],
    db: DbOption = None,
    as_json: JsonOption = False,
) -> None:
    """Revoke a token: every call with it is refused from now on by a server that reads it, and by a
    running server within its --token-cache-seconds (10 s by default)."""
    from repart.storage.tokens import revoke_token

    row = query(db, lambda session: token_dict(revoke_token(session, token_id)))
    if as_json:
        print_json(row)
    else:
        typer.echo(f"token {row['id']} ({row['scope']}) revoked at {row['revoked_at']}")
