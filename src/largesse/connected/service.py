"""Connected organizations: a platform (the API caller) onboards its own customers.

A connected organization is a real Largesse organization, a sub-organization of the platform
(orgs/suborgs.py: same environment, the platform's fees, the sandbox preload in the sandbox);
a connected member is a real member of it. A session is a short-lived, single-use sign-in URL
(`/connect/{token}`) for one connected member: only the token's SHA-256 is stored, and
spending it is one conditional UPDATE, so of two concurrent spends exactly one succeeds.
"""

from __future__ import annotations

import hashlib
import secrets
from dataclasses import dataclass
from datetime import timedelta
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

from sqlalchemy import Connection, and_, bindparam, func, select, update
from sqlalchemy.exc import IntegrityError

from largesse import paging
from largesse.connected.models import (
    connected_member_sessions,
    connected_organization_members,
    connected_organizations,
)
from largesse.errors import BadRequest, NotFound
from largesse.ids import new_id
from largesse.orgs import service as orgs
from largesse.orgs import suborgs
from largesse.orgs.models import api_keys, members, organizations
from largesse.timeutil import iso, utcnow

CURRENCIES = ("USD", "EUR", "GBP", "CAD")  # API.md §2.8
SESSION_TTL = timedelta(minutes=10)
DEFAULT_MEMBER_ROLE = "ADMIN"  # the platform's customer's users administer their own organization
# A connected member without an external_email still is a member row: it gets an address under
# the reserved .invalid domain (RFC 2606), which no message can ever reach.
PLACEHOLDER_DOMAIN = "connected.invalid"
MAX_RETURN_URL = 2000

_CO = connected_organizations
_CM = connected_organization_members
_SESSIONS = connected_member_sessions


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


# --- connected organizations ------------------------------------------------------------------

def create_connected_org(conn: Connection, *, platform_id: str, client_id: str, currency_code: str,
                         kyb_prefill: dict | None) -> str:
    """Onboard a platform's customer: a sub-organization and its connection; returns its ID."""
    from largesse.webhooks import service as webhooks

    currency = (currency_code or "USD").upper()
    if currency not in CURRENCIES:
        raise BadRequest(f"currency_code must be one of {', '.join(CURRENCIES)}",
                         {"currency_code": ["is not included in the list"]})
    client_id = client_id.strip()
    if not client_id:
        raise BadRequest("client_id must not be blank", {"client_id": ["can't be blank"]})
    kyb = {k: v for k, v in (kyb_prefill or {}).items() if v is not None}
    website = (kyb.get("website_url") or "").strip()
    if website and not orgs.valid_website(website):  # the rule of POST /organizations' `website`
        raise BadRequest("kyb_prefill.website_url must be an http(s) URL or a domain name",
                         {"kyb_prefill": {"website_url": ["is not a valid URL"]}})
    if "website_url" in kyb:
        kyb["website_url"] = website
    if conn.execute(_live(platform_id).where(_CO.c.client_id == client_id)).first() is not None:
        raise _taken()
    # The name rule of every organization (orgs/service.py: clean_name): no surrounding spaces, not blank.
    name = next((v.strip() for v in (kyb.get("company_name"), kyb.get("doing_business_as")) if v and v.strip()),
                client_id)
    created = suborgs.create_sub_org(conn, parent_id=platform_id, name=name[:200], website=website or None,
                                     currency_code=currency)
    connected_id = new_id()
    # A concurrent create with the same client_id fails on uq_connected_organizations_client_id:
    # 400, and its whole transaction, sub-organization included, rolls back.
    try:
        with conn.begin_nested():
            conn.execute(_CO.insert().values(
                id=connected_id, platform_organization_id=platform_id, organization_id=created.organization_id,
                client_id=client_id, kyb_prefill=kyb or None, created_at=utcnow(),
            ))
    except IntegrityError:
        raise _taken() from None
    webhooks.emit(conn, platform_id, [("CONNECTED_ORGANIZATIONS.REGISTERED", connected_id)])
    return connected_id


def _taken() -> BadRequest:
    return BadRequest("client_id has already been taken", {"client_id": ["has already been taken"]})


def _live(platform_id: str):
    return select(_CO).where(_CO.c.platform_organization_id == platform_id, _CO.c.deleted_at.is_(None))


def get_connected_org(conn: Connection, platform_id: str, connected_id: str, *, field: str = "id"):
    """The platform's live connected organization, or 404 naming `field`, the request's key
    that held the ID (the path's `id`, or a query parameter)."""
    row = conn.execute(_live(platform_id).where(_CO.c.id == connected_id)).first()
    if row is None:
        raise NotFound(f"Connected organization {connected_id} not found", {field: ["not found"]})
    return row


def list_connected_orgs(conn: Connection, platform_id: str, *, offset: int, limit: int):
    """(rows newest first, total_count bounded as every list counts: paging.bounded_count). A
    walk of ix_connected_organizations_live_created_id that stops after offset + limit rows
    (db.index_walks). The index is partial on deleted_at IS NULL, as the list's WHERE: when only
    uq_connected_organizations_client_id was, PostgreSQL without statistics read every live row
    through it and sorted them, index_walks or not (migration 0028)."""
    return _LIST.page(conn, {"platform_id": platform_id}, offset=offset, limit=limit)


_LIST = paging.Listing(
    _CO, and_(_CO.c.platform_organization_id == bindparam("platform_id"), _CO.c.deleted_at.is_(None)), {},
    order_by=(_CO.c.created_at.desc(), _CO.c.id.desc()))


def delete_connected_org(conn: Connection, platform_id: str, connected_id: str):
    """End the connection: the connected organization's API keys are revoked, its members are
    removed (their dashboard sessions and sign-in links die with them: a platform's user kept
    signing in to the dashboard, and issuing keys there), and it leaves the platform's lists.
    The same holds for the sub-organizations it created (POST /organizations with its key), and
    theirs: a key of one of them kept working, out of the platform's sight. The organizations
    themselves, their balances and ledgers stay (money is never deleted); the operator's CLI
    still reaches them. Returns the row as it was."""
    row = get_connected_org(conn, platform_id, connected_id)
    now = utcnow()
    ended = conn.execute(update(_CO).where(_CO.c.id == connected_id, _CO.c.deleted_at.is_(None))
                         .values(deleted_at=now)).rowcount
    if ended != 1:  # a concurrent delete won
        raise NotFound(f"Connected organization {connected_id} not found", {"id": ["not found"]})
    ended_orgs = [row.organization_id, *orgs.descendants(conn, row.organization_id)]
    conn.execute(update(api_keys).where(api_keys.c.organization_id.in_(ended_orgs),
                                        api_keys.c.revoked_at.is_(None)).values(revoked_at=now))
    conn.execute(update(_CM).where(_CM.c.connected_organization_id == connected_id, _CM.c.deleted_at.is_(None))
                 .values(deleted_at=now))
    conn.execute(update(_SESSIONS).where(_SESSIONS.c.organization_id == row.organization_id,
                                         _SESSIONS.c.revoked_at.is_(None)).values(revoked_at=now))
    for org_id, member_id in conn.execute(select(members.c.organization_id, members.c.id)
                                          .where(members.c.organization_id.in_(ended_orgs))
                                          .order_by(members.c.organization_id, members.c.id)).all():
        orgs.remove_member_in(conn, org_id, member_id, keep_last_admin=False)
    return row


def connected_org_to_wire(conn: Connection, row) -> dict:
    return connected_orgs_to_wire(conn, [row])[0]


def connected_orgs_to_wire(conn: Connection, rows) -> list[dict]:
    """A page of connected organizations with their organizations read in one statement (one per
    row cost a page of 10 about 15 ms of CPU and 29 ms on PostgreSQL; docs/benchmarks.md)."""
    ids = {row.organization_id for row in rows}
    found = {o.id: o for o in conn.execute(select(organizations).where(organizations.c.id.in_(ids)))} if ids else {}
    return [{"id": row.id, "client_id": row.client_id, "created_at": iso(row.created_at),
             "organization": orgs.organization_to_wire(found[row.organization_id])} for row in rows]


# --- connected organization members ------------------------------------------------------------

def create_connected_member(conn: Connection, *, platform_id: str, connected_id: str, external_name: str | None,
                            external_email: str | None, role: str | None) -> str:
    try:
        connected = get_connected_org(conn, platform_id, connected_id)
    except NotFound as exc:
        # An ID inside the body points at its property, with a 400 (the status this operation's
        # client decodes, API.md §1); 404 is for the resource in the path.
        raise BadRequest(exc.message, {"connected_organization_id": ["not found"]}) from None
    cm_id = new_id()
    email = external_email if external_email else f"{cm_id.lower()}@{PLACEHOLDER_DOMAIN}"
    member_id = orgs.add_member_checked(conn, organization_id=connected.organization_id, email=email,
                                        name=external_name, role=role or DEFAULT_MEMBER_ROLE, loc="external_email")
    conn.execute(_CM.insert().values(
        id=cm_id, connected_organization_id=connected_id, platform_organization_id=platform_id, member_id=member_id,
        external_name=external_name, external_email=external_email, created_at=utcnow(),
    ))
    return cm_id


def _live_members(platform_id: str):
    return select(_CM).where(_CM.c.platform_organization_id == platform_id, _CM.c.deleted_at.is_(None))


def get_connected_member(conn: Connection, platform_id: str, cm_id: str):
    row = conn.execute(_live_members(platform_id).where(_CM.c.id == cm_id)).first()
    if row is None:
        raise NotFound(f"Connected organization member {cm_id} not found", {"id": ["not found"]})
    return row


def list_connected_members(conn: Connection, platform_id: str, connected_id: str, *, offset: int, limit: int):
    get_connected_org(conn, platform_id, connected_id, field="connected_organization_id")
    base = _live_members(platform_id).where(_CM.c.connected_organization_id == connected_id)
    total = conn.execute(select(func.count()).select_from(base.subquery())).scalar_one()
    rows = conn.execute(base.order_by(_CM.c.created_at.desc(), _CM.c.id.desc()).offset(offset).limit(limit)).all()
    return rows, total


def delete_connected_member(conn: Connection, platform_id: str, cm_id: str):
    """Remove the member from the connected organization and end its sign-in links. The platform
    administers its connected organizations' membership, so removing their last administrator is
    allowed here (unlike DELETE /members). Returns the row as it was."""
    row = get_connected_member(conn, platform_id, cm_id)
    connected = conn.execute(select(_CO).where(_CO.c.id == row.connected_organization_id)).first()
    if conn.execute(select(members.c.id).where(members.c.id == row.member_id)).first() is not None:
        orgs.remove_member_in(conn, connected.organization_id, row.member_id, keep_last_admin=False)
    now = utcnow()
    ended = conn.execute(update(_CM).where(_CM.c.id == cm_id, _CM.c.deleted_at.is_(None))
                         .values(deleted_at=now)).rowcount
    if ended != 1:
        raise NotFound(f"Connected organization member {cm_id} not found", {"id": ["not found"]})
    conn.execute(update(_SESSIONS).where(_SESSIONS.c.connected_organization_member_id == cm_id,
                                         _SESSIONS.c.revoked_at.is_(None)).values(revoked_at=now))
    return row


def connected_member_to_wire(conn: Connection, row) -> dict:
    return connected_members_to_wire(conn, [row])[0]


def connected_members_to_wire(conn: Connection, rows) -> list[dict]:
    """A page of connected organization members with their members read in one statement."""
    ids = {row.member_id for row in rows}
    found = {m.id: m for m in conn.execute(select(members).where(members.c.id.in_(ids)))} if ids else {}
    out = []
    for row in rows:
        wire = {"id": row.id, "external_name": row.external_name, "external_email": row.external_email,
                "created_at": iso(row.created_at), "connected_organization_id": row.connected_organization_id}
        if row.member_id in found:
            wire["member"] = orgs.member_to_wire(found[row.member_id])
        out.append(wire)
    return out


# --- sessions: single-use sign-in links ---------------------------------------------------------

def check_return_url(value: str) -> str:
    """An absolute http(s) URL with a host: where the member goes back to, on the platform."""
    value = value.strip()
    try:
        parts = urlsplit(value) if len(value) <= MAX_RETURN_URL and value.isprintable() else None
        port_ok = parts is None or parts.port is None or parts.port > 0
    except ValueError:  # urlsplit and .port refuse a malformed host ("https://[::1") or port (":99999")
        parts, port_ok = None, False
    if (parts is None or not port_ok or parts.scheme.lower() not in ("http", "https") or not parts.hostname
            or " " in value):
        raise BadRequest("return_url must be an absolute http or https URL",
                         {"return_url": ["must be an absolute http(s) URL"]})
    return value


@dataclass
class Session:
    row: object
    url: str


def create_session(conn: Connection, *, platform_id: str, cm_id: str, return_url: str, state: str | None,
                   public_url: str) -> Session:
    return_url = check_return_url(return_url)
    row = get_connected_member(conn, platform_id, cm_id)
    connected = conn.execute(select(_CO).where(_CO.c.id == row.connected_organization_id)).first()
    token = secrets.token_urlsafe(32)
    now = utcnow()
    values = dict(id=new_id(), token_hash=hash_token(token), connected_organization_member_id=cm_id,
                  member_id=row.member_id, organization_id=connected.organization_id, return_url=return_url,
                  state=state, created_at=now, expires_at=now + SESSION_TTL)
    conn.execute(_SESSIONS.insert().values(**values))
    return Session(conn.execute(select(_SESSIONS).where(_SESSIONS.c.id == values["id"])).first(),
                   f"{public_url}/connect/{token}")


def session_to_wire(session: Session) -> dict:
    row = session.row
    out = {"connected_organization_member_id": row.connected_organization_member_id, "url": session.url,
           "return_url": row.return_url, "expires_at": iso(row.expires_at), "created_at": iso(row.created_at)}
    if row.state is not None:
        out["state"] = row.state
    return out


class SessionError(Exception):
    """kind: "not_found" (unknown or revoked), "used", "expired"."""

    def __init__(self, kind: str):
        super().__init__(kind)
        self.kind = kind


def _session_for(conn: Connection, token: str, environment: str):
    if not token or len(token) > 200:
        return None
    return conn.execute(select(_SESSIONS).where(_SESSIONS.c.token_hash == hash_token(token),
                                                _SESSIONS.c.organization_id.in_(orgs.of_environment(environment)))).first()


def _why_not(row) -> str | None:
    if row is None or row.revoked_at is not None:
        return "not_found"
    if row.spent_at is not None:
        return "used"
    if row.expires_at <= utcnow():
        return "expired"
    return None


def peek_session(conn: Connection, token: str, environment: str):
    """The live session of a token, without spending it (the GET page); SessionError otherwise."""
    row = _session_for(conn, token, environment)
    why = _why_not(row)
    if why:
        raise SessionError(why)
    return row


def spend_session_token(conn: Connection, token: str, environment: str) -> tuple[str, str, str, str | None]:
    """Spend a sign-in token once: (member_id, organization_id, return_url, state).

    One conditional UPDATE (unspent, unrevoked, unexpired) with RETURNING: of concurrent spends,
    exactly one gets the row. SessionError says why a token cannot be spent. The caller starts
    the member's web session in the same transaction if it has one to start.
    """
    now = utcnow()
    spent = conn.execute(
        update(_SESSIONS)
        .where(_SESSIONS.c.token_hash == hash_token(token), _SESSIONS.c.spent_at.is_(None),
               _SESSIONS.c.revoked_at.is_(None), _SESSIONS.c.expires_at > now,
               _SESSIONS.c.organization_id.in_(orgs.of_environment(environment)))
        .values(spent_at=now)
        .returning(_SESSIONS.c.member_id, _SESSIONS.c.organization_id, _SESSIONS.c.return_url, _SESSIONS.c.state)
    ).first() if token and len(token) <= 200 else None
    if spent is None:
        raise SessionError(_why_not(_session_for(conn, token, environment)) or "used")
    if conn.execute(select(members.c.id).where(members.c.id == spent.member_id)).first() is None:
        raise SessionError("not_found")  # the member was removed since the link was made
    return spent.member_id, spent.organization_id, spent.return_url, spent.state


def return_link(return_url: str, state: str | None) -> str:
    """return_url with `state` added to its query (kept as given otherwise)."""
    if state is None:
        return return_url
    parts = urlsplit(return_url)
    query = urlencode([*parse_qsl(parts.query, keep_blank_values=True), ("state", state)])
    return urlunsplit((parts.scheme, parts.netloc, parts.path, query, parts.fragment))
