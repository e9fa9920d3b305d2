"""API keys: issued once, stored as SHA-256, verified per request.

A key is "LRG_SANDBOX_" or "LRG_PROD_" followed by 43 URL-safe characters (256 random
bits). The key has full entropy, so a fast hash is enough: nobody can brute-force a
2^256 space, and a per-request lookup must stay cheap.

Environments: an organization is "sandbox" or "production" (organizations.environment) and
its keys carry the matching prefix. A server answers 401 to keys of the other environment
twice over: by the prefix before any database work, and by the organization's recorded
environment in the caller lookup itself (a column of the same joined row, no extra query),
so a key whose prefix does not match its organization cannot cross either.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from typing import Annotated

from fastapi import Depends, Request
from sqlalchemy import Connection, bindparam, select

from largesse import db
from largesse.errors import ApiError, Forbidden, Unauthorized
from largesse.ids import new_id
from largesse.orgs.models import api_keys, organizations
from largesse.timeutil import utcnow
from largesse.web import get_engine, run_db

PERMISSIONS = ("read_write", "read_only")
# Every other method is a write, which a read_only key may never make (caller_from): the one
# place that rule lives, for every route present and future (tests/orgs/test_read_only.py).
READ_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
PREFIXES = {"sandbox": "LRG_SANDBOX_", "production": "LRG_PROD_"}

# key hash -> organization id of every key this process has verified, for the API rate
# limiter (ratelimit.py), which counts a request before the endpoint's own lookup runs.
# A key never changes organization; the map grows with the number of valid keys only.
verified_keys: dict[str, str] = {}


@dataclass(frozen=True)
class Caller:
    organization_id: str
    currency_code: str
    fee_basis_points: int
    fee_flat_cents: int
    reward_expiry_days: int | None
    permission: str
    key_id: str


def hash_key(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


def issue_key(conn: Connection, *, organization_id: str, permission: str = "read_write",
              label: str | None = None) -> tuple[str, str]:
    """Create a key; returns (key_id, key). The key is never stored or shown again.

    Its prefix follows the organization's environment, whatever the caller's settings say:
    a key always works on the servers of its organization's environment and only there.
    """
    if permission not in PERMISSIONS:
        raise ValueError(f"permission must be one of {PERMISSIONS}")
    environment = conn.execute(select(organizations.c.environment).where(organizations.c.id == organization_id)
                               ).scalar_one()
    key = PREFIXES[environment] + secrets.token_urlsafe(32)
    key_id = new_id()
    conn.execute(api_keys.insert().values(
        id=key_id, organization_id=organization_id, key_hash=hash_key(key), prefix=key[:16],
        permission=permission, label=label, created_at=utcnow(),
    ))
    return key_id, key


# Built once: SQLAlchemy memoizes a statement's cache key on the object, so reusing it
# skips the statement construction that dominated the per-request profile.
CALLER_COLUMNS = (
    api_keys.c.id, api_keys.c.permission, organizations.c.id.label("org_id"),
    organizations.c.currency_code, organizations.c.fee_basis_points, organizations.c.fee_flat_cents,
    organizations.c.reward_expiry_days, organizations.c.environment,
)
_CALLER = (
    select(*CALLER_COLUMNS)
    .join(organizations, organizations.c.id == api_keys.c.organization_id)
    .where(api_keys.c.key_hash == bindparam("key_hash"), api_keys.c.revoked_at.is_(None))
)


@dataclass(frozen=True)
class Credentials:
    """A well-formed bearer key (hashed), whether the request wants to write, and the
    environment of the server it was sent to."""

    key_hash: str
    writes: bool
    environment: str


_HEADER_SPACE = " \t"  # HTTP's optional whitespace, and only it: str.strip() also drops U+00A0, U+0085


def bearer_key(authorization: str) -> str | None:
    """The API key of an Authorization header's value (decoded as Latin-1, as ASGI servers pass
    headers), or None when it is not 'Bearer <key>'. The one reading of the header: the rate
    limiter counts under the hash of what this returns, so a key it verifies is the key it counts
    (a trailing U+00A0 once made a key that verified but was never counted)."""
    scheme, _, key = authorization.partition(" ")
    key = key.strip(_HEADER_SPACE)
    if scheme.lower() != "bearer" or not key or len(key) > 200:
        return None
    return key


def parse_authorization(authorization: str | None, *, writes: bool, environment: str) -> Credentials:
    if not authorization:
        raise Unauthorized("Missing Authorization header; send 'Authorization: Bearer <API key>'")
    key = bearer_key(authorization)
    if key is None:
        raise Unauthorized("Authorization must be 'Bearer <API key>'")
    if not key.startswith(PREFIXES[environment]):
        other = "production" if environment == "sandbox" else "sandbox"
        if key.startswith(PREFIXES[other]):
            raise Unauthorized(f"This is a {other} API key; this server is the {environment} environment")
    return Credentials(hash_key(key), writes, environment)


def verify(conn: Connection, credentials: Credentials) -> Caller:
    """The caller behind credentials, inside the caller's transaction; 401/403 otherwise."""
    return caller_from(conn.execute(_CALLER, {"key_hash": credentials.key_hash}).first(), credentials)


def caller_from(row, credentials: Credentials) -> Caller:
    """A Caller from a row of _CALLER's columns (or a query selecting them too), or 401/403."""
    if row is None:
        raise Unauthorized("Invalid or revoked API key")
    if row.environment != credentials.environment:
        raise Unauthorized(f"This API key belongs to a {row.environment} organization; "
                           f"this server is the {credentials.environment} environment")
    verified_keys[credentials.key_hash] = row.org_id
    if credentials.writes and row.permission == "read_only":
        raise Forbidden("This API key is read-only")
    return Caller(
        organization_id=row.org_id, currency_code=row.currency_code, fee_basis_points=row.fee_basis_points,
        fee_flat_cents=row.fee_flat_cents, reward_expiry_days=row.reward_expiry_days,
        permission=row.permission, key_id=row.id,
    )


def _lookup(engine, credentials: Credentials) -> Caller:
    with db.read(engine) as conn:
        return verify(conn, credentials)


async def bearer(request: Request) -> Credentials:
    """Checks the header's form only; the key itself is verified in the request's transaction
    (see orders.service.place_order), saving the hottest path a transaction of its own."""
    return parse_authorization(request.headers.get("authorization"),
                               writes=request.method not in READ_METHODS,
                               environment=request.app.state.settings.environment)


async def current_caller(request: Request) -> Caller:
    engine = get_engine(request)
    caller = await run_db(engine, _lookup, engine, await bearer(request))
    request.state.caller = caller  # verified: refusal() need not look the key up again
    return caller


async def refusal(request: Request) -> ApiError | None:
    """The 401/403 a write request's key earns, or None: called by the app's error handlers
    before they answer a write with another 4xx, so that a read-only (or unknown) key gets its
    403 (401) whatever else is wrong with the request (a malformed body is parsed, and refused,
    before any endpoint runs). Costs a key lookup on those error answers only; None for reads
    and for requests whose key was verified already."""
    if request.method in READ_METHODS or getattr(request.state, "caller", None) is not None:
        return None
    try:
        await current_caller(request)
    except (Unauthorized, Forbidden) as exc:
        return exc
    except Exception:  # the database is away, say: the original error stands
        return None
    return None


CallerDep = Annotated[Caller, Depends(current_caller)]
